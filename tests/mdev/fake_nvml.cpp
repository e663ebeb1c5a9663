// A fake libnvidia-ml for NvmlGpuModeProbe's tests: exactly the entry points the probe calls, with
// nvml.h's signatures, struct layouts, version checks and return codes (nvml.h of CUDA 13.3, as
// NVIDIA/go-nvml keeps it in gen/nvml/nvml.h at 2f9e261fe40a7a1c54783d66805e8920564763b4),
// answering from the JSON fixture named by $KVGPU_FAKE_NVML_FIXTURE, read at nvmlInit_v2:
//
//   {"devices": [{"pciBusId": "0000:af:00.0",
//                 "migMode": 1,            // absent: NVML_ERROR_NOT_SUPPORTED (no MIG)
//                 "heterogeneousMode": 0,  // absent: NVML_ERROR_NOT_SUPPORTED
//                 "vgpuTypes": [{"id": 1702, "name": "NVIDIA L40S-8Q", "placementSize": 8,
//                                "placementIds": [0, 8], "gpuInstanceProfileId": 19,
//                                "maxInstancesPerGi": 1}],
//                 "gpuInstanceProfiles": [{"profile": 0, "id": 19, "instanceCount": 7}],
//                 "gpuInstances": [{"id": 1, "profileId": 19}],
//                 "vgpuInstances": [{"instance": 7, "type": 1702, "mdevUuid": "...",
//                                    "placementId": 0, "gpuInstanceId": 1}]}],
//    "fail": {"nvmlDeviceGetGpuInstances": 999}}   // that entry point answers that code
//
// Built twice: whole, and with KVGPU_FAKE_NVML_MODES_ONLY (only the four calls of a driver
// without placements or GPU instances), so the probe meets missing symbols.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12;
constexpr unsigned int INVALID_GPU_INSTANCE_PROFILE_ID = 0xFFFFFFFF;
constexpr unsigned int INVALID_GPU_INSTANCE_ID = 0xFFFFFFFF;
constexpr unsigned int NVML_INVALID_VGPU_PLACEMENT_ID = 0xFFFF;

nlohmann::json fixture;

const nlohmann::json& Devices() {
  static const nlohmann::json none = nlohmann::json::array();
  return fixture.contains("devices") ? fixture["devices"] : none;
}

// obj[key], or an empty array: a reference that outlives the call (value() returns a copy).
const nlohmann::json& List(const nlohmann::json& obj, const char* key) {
  static const nlohmann::json none = nlohmann::json::array();
  return obj.contains(key) ? obj[key] : none;
}

// The code a fixture makes `function` fail with, or NVML_SUCCESS.
nvmlReturn_t Fail(const char* function) {
  if (!fixture.contains("fail") || !fixture["fail"].contains(function)) return NVML_SUCCESS;
  return fixture["fail"][function].get<int>();
}

}  // namespace

extern "C" {

// nvml.h: typedef struct nvmlDevice_st* nvmlDevice_t; here the device's index + 1.
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlGpuInstance_st;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
using nvmlVgpuTypeId_t = unsigned int;
using nvmlVgpuInstance_t = unsigned int;

struct nvmlVgpuHeterogeneousMode_v1_t {
  unsigned int version;
  unsigned int mode;
};
struct nvmlVgpuPlacementId_v1_t {
  unsigned int version;
  unsigned int placementId;
};
struct nvmlVgpuPlacementList_v2_t {
  unsigned int version;
  unsigned int placementSize;
  unsigned int count;
  unsigned int* placementIds;
  unsigned int mode;
};
struct nvmlVgpuTypeMaxInstance_v1_t {
  unsigned int version;
  nvmlVgpuTypeId_t vgpuTypeId;
  unsigned int maxInstancePerGI;
};
struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};
struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};
struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};

}  // extern "C"

namespace {

// NVML_STRUCT_VERSION(data, ver)
template <typename T>
constexpr unsigned int Version(unsigned int ver) {
  return static_cast<unsigned int>(sizeof(T)) | (ver << 24U);
}

const nlohmann::json* Device(nvmlDevice_t device) {
  const auto index = reinterpret_cast<uintptr_t>(device);
  if (index == 0 || index > Devices().size()) return nullptr;
  return &Devices()[index - 1];
}

[[maybe_unused]] const nlohmann::json* Type(nvmlVgpuTypeId_t id) {
  for (const auto& device : Devices()) {
    for (const auto& type : List(device, "vgpuTypes")) {
      if (type["id"].get<unsigned int>() == id) return &type;
    }
  }
  return nullptr;
}

[[maybe_unused]] const nlohmann::json* Instance(nvmlVgpuInstance_t id) {
  for (const auto& device : Devices()) {
    for (const auto& vgpu : List(device, "vgpuInstances")) {
      if (vgpu["instance"].get<unsigned int>() == id) return &vgpu;
    }
  }
  return nullptr;
}

// NVML's count-then-fill lists: INSUFFICIENT_SIZE with the count when the buffer is short.
[[maybe_unused]] nvmlReturn_t FillList(const nlohmann::json& list, const char* key,
                                       unsigned int* count, unsigned int* out) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned int have = static_cast<unsigned int>(list.size());
  if (*count < have) {
    *count = have;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < have; ++i) out[i] = list[i][key].get<unsigned int>();
  *count = have;
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  const char* path = std::getenv("KVGPU_FAKE_NVML_FIXTURE");
  if (path == nullptr) return NVML_ERROR_UNKNOWN;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  fixture = nlohmann::json::parse(text.str(), nullptr, false);
  if (!in || fixture.is_discarded()) return NVML_ERROR_UNKNOWN;
  return Fail("nvmlInit_v2");
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  if (pciBusId == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < Devices().size(); ++i) {
    if (Devices()[i]["pciBusId"] == pciBusId) {
      *device = reinterpret_cast<nvmlDevice_t>(i + 1);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                  unsigned int* pendingMode) {
  const nlohmann::json* d = Device(device);
  if (d == nullptr || currentMode == nullptr || pendingMode == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t r = Fail("nvmlDeviceGetMigMode")) return r;
  if (!d->contains("migMode")) return NVML_ERROR_NOT_SUPPORTED;
  *currentMode = *pendingMode = (*d)["migMode"].get<unsigned int>();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVgpuHeterogeneousMode(nvmlDevice_t device,
                                                nvmlVgpuHeterogeneousMode_v1_t* mode) {
  const nlohmann::json* d = Device(device);
  if (d == nullptr || mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (mode->version != Version<nvmlVgpuHeterogeneousMode_v1_t>(1)) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  if (nvmlReturn_t r = Fail("nvmlDeviceGetVgpuHeterogeneousMode")) return r;
  // "NVML_ERROR_NOT_SUPPORTED If MIG is enabled or device doesn't support this feature".
  if (!d->contains("heterogeneousMode") || d->value("migMode", 0u) == 1) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  mode->mode = (*d)["heterogeneousMode"].get<unsigned int>();
  return NVML_SUCCESS;
}

#ifndef KVGPU_FAKE_NVML_MODES_ONLY

nvmlReturn_t nvmlDeviceGetSupportedVgpus(nvmlDevice_t device, unsigned int* vgpuCount,
                                         nvmlVgpuTypeId_t* vgpuTypeIds) {
  const nlohmann::json* d = Device(device);
  if (d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = Fail("nvmlDeviceGetSupportedVgpus")) return r;
  return FillList(List(*d, "vgpuTypes"), "id", vgpuCount, vgpuTypeIds);
}

nvmlReturn_t nvmlVgpuTypeGetName(nvmlVgpuTypeId_t vgpuTypeId, char* vgpuTypeName,
                                 unsigned int* size) {
  const nlohmann::json* t = Type(vgpuTypeId);
  if (t == nullptr || vgpuTypeName == nullptr || size == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t r = Fail("nvmlVgpuTypeGetName")) return r;
  const std::string name = t->value("name", "");
  if (*size < name.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(vgpuTypeName, name.c_str(), name.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVgpuTypeSupportedPlacements(nvmlDevice_t device,
                                                      nvmlVgpuTypeId_t vgpuTypeId,
                                                      nvmlVgpuPlacementList_v2_t* list) {
  const nlohmann::json* t = Type(vgpuTypeId);
  if (Device(device) == nullptr || t == nullptr || list == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (list->version != Version<nvmlVgpuPlacementList_v2_t>(2)) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  if (nvmlReturn_t r = Fail("nvmlDeviceGetVgpuTypeSupportedPlacements")) return r;
  // The fixture's placements are heterogeneous ones (mode 0, NVML's default).
  if (!t->contains("placementIds") || list->mode != 0) return NVML_ERROR_NOT_SUPPORTED;
  const nlohmann::json& ids = (*t)["placementIds"];
  if (list->count < ids.size()) {
    list->count = static_cast<unsigned int>(ids.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < ids.size(); ++i) list->placementIds[i] = ids[i].get<unsigned int>();
  list->count = static_cast<unsigned int>(ids.size());
  list->placementSize = (*t)["placementSize"].get<unsigned int>();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlVgpuTypeGetGpuInstanceProfileId(nvmlVgpuTypeId_t vgpuTypeId,
                                                 unsigned int* gpuInstanceProfileId) {
  const nlohmann::json* t = Type(vgpuTypeId);
  if (t == nullptr || gpuInstanceProfileId == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = Fail("nvmlVgpuTypeGetGpuInstanceProfileId")) return r;
  *gpuInstanceProfileId = t->value("gpuInstanceProfileId", INVALID_GPU_INSTANCE_PROFILE_ID);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlVgpuTypeGetMaxInstances(nvmlDevice_t device, nvmlVgpuTypeId_t vgpuTypeId,
                                         unsigned int* vgpuInstanceCount) {
  const nlohmann::json* t = Type(vgpuTypeId);
  if (Device(device) == nullptr || t == nullptr || vgpuInstanceCount == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t r = Fail("nvmlVgpuTypeGetMaxInstances")) return r;
  if (!t->contains("maxInstances")) return NVML_ERROR_NOT_SUPPORTED;
  *vgpuInstanceCount = (*t)["maxInstances"].get<unsigned int>();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlVgpuTypeGetMaxInstancesPerGpuInstance(nvmlVgpuTypeMaxInstance_v1_t* max) {
  if (max == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (max->version != Version<nvmlVgpuTypeMaxInstance_v1_t>(1)) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  const nlohmann::json* t = Type(max->vgpuTypeId);
  if (t == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = Fail("nvmlVgpuTypeGetMaxInstancesPerGpuInstance")) return r;
  if (!t->contains("maxInstancesPerGi")) return NVML_ERROR_NOT_SUPPORTED;  // a non-MIG type
  max->maxInstancePerGI = (*t)["maxInstancesPerGi"].get<unsigned int>();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  const nlohmann::json* d = Device(device);
  if (d == nullptr || info == nullptr || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t r = Fail("nvmlDeviceGetGpuInstanceProfileInfo")) return r;
  for (const auto& p : List(*d, "gpuInstanceProfiles")) {
    if (p["profile"].get<unsigned int>() != profile) continue;
    *info = {};
    info->id = p["id"].get<unsigned int>();
    info->instanceCount = p["instanceCount"].get<unsigned int>();
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

// A GPU instance handle: (device index + 1) << 16 | (its place in the fixture + 1).
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t* gpuInstances, unsigned int* count) {
  const nlohmann::json* d = Device(device);
  if (d == nullptr || gpuInstances == nullptr || count == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t r = Fail("nvmlDeviceGetGpuInstances")) return r;
  if (d->value("migMode", 0u) != 1) return NVML_ERROR_NOT_SUPPORTED;
  const nlohmann::json& gis = (*d)["gpuInstances"];
  unsigned int n = 0;
  for (size_t i = 0; i < gis.size(); ++i) {
    if (gis[i]["profileId"].get<unsigned int>() != profileId) continue;
    const uintptr_t handle = (reinterpret_cast<uintptr_t>(device) << 16) | (i + 1);
    gpuInstances[n++] = reinterpret_cast<nvmlGpuInstance_t>(handle);
  }
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
  const auto handle = reinterpret_cast<uintptr_t>(gpuInstance);
  const auto device = reinterpret_cast<nvmlDevice_t>(handle >> 16);
  const nlohmann::json* d = Device(device);
  const size_t index = (handle & 0xFFFF) - 1;
  if (d == nullptr || info == nullptr || index >= (*d)["gpuInstances"].size()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t r = Fail("nvmlGpuInstanceGetInfo")) return r;
  const nlohmann::json& gi = (*d)["gpuInstances"][index];
  *info = {};
  info->device = device;
  info->id = gi["id"].get<unsigned int>();
  info->profileId = gi["profileId"].get<unsigned int>();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetActiveVgpus(nvmlDevice_t device, unsigned int* vgpuCount,
                                      nvmlVgpuInstance_t* vgpuInstances) {
  const nlohmann::json* d = Device(device);
  if (d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = Fail("nvmlDeviceGetActiveVgpus")) return r;
  return FillList(List(*d, "vgpuInstances"), "instance", vgpuCount, vgpuInstances);
}

nvmlReturn_t nvmlVgpuInstanceGetType(nvmlVgpuInstance_t vgpuInstance,
                                     nvmlVgpuTypeId_t* vgpuTypeId) {
  const nlohmann::json* v = Instance(vgpuInstance);
  if (vgpuTypeId == nullptr || vgpuInstance == 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (v == nullptr) return NVML_ERROR_NOT_FOUND;
  *vgpuTypeId = (*v)["type"].get<unsigned int>();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlVgpuInstanceGetMdevUUID(nvmlVgpuInstance_t vgpuInstance, char* mdevUuid,
                                         unsigned int size) {
  const nlohmann::json* v = Instance(vgpuInstance);
  if (mdevUuid == nullptr || vgpuInstance == 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (v == nullptr) return NVML_ERROR_NOT_FOUND;
  if (!v->contains("mdevUuid")) return NVML_ERROR_NOT_SUPPORTED;
  const std::string uuid = (*v)["mdevUuid"].get<std::string>();
  if (size < uuid.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(mdevUuid, uuid.c_str(), uuid.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlVgpuInstanceGetPlacementId(nvmlVgpuInstance_t vgpuInstance,
                                            nvmlVgpuPlacementId_v1_t* placement) {
  const nlohmann::json* v = Instance(vgpuInstance);
  if (placement == nullptr || vgpuInstance == 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (placement->version != Version<nvmlVgpuPlacementId_v1_t>(1)) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  if (v == nullptr) return NVML_ERROR_NOT_FOUND;
  placement->placementId = v->value("placementId", NVML_INVALID_VGPU_PLACEMENT_ID);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlVgpuInstanceGetGpuInstanceId(nvmlVgpuInstance_t vgpuInstance,
                                              unsigned int* gpuInstanceId) {
  const nlohmann::json* v = Instance(vgpuInstance);
  if (gpuInstanceId == nullptr || vgpuInstance == 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (v == nullptr) return NVML_ERROR_NOT_FOUND;
  *gpuInstanceId = v->value("gpuInstanceId", INVALID_GPU_INSTANCE_ID);
  return NVML_SUCCESS;
}

#endif  // KVGPU_FAKE_NVML_MODES_ONLY

}  // extern "C"
