// The NVML probe: the declarations nvml.h makes for the calls used, written out here so that the
// build needs no NVIDIA package.
//
// Source of every signature, struct layout, version and constant below: nvml.h of CUDA 13.3
// (NVML_API_VERSION 13), as NVIDIA/go-nvml keeps a direct copy of it in gen/nvml/nvml.h at commit
// 2f9e261fe40a7a1c54783d66805e8920564763b4 (July 2026); the same entry points are in NVIDIA's
// NVML API Reference (docs.nvidia.com/deploy/nvml-api), groups "Initialization and Cleanup",
// "Device Queries", "vGPU Management", "vGPU Queries" and "Multi Instance GPU Management".
// The opaque handles nvmlDevice_t and nvmlGpuInstance_t are pointers to incomplete structs there.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>

#include "mdev/gpu_mode_probe.h"

namespace kvgpu::mdev {

namespace {

using NvmlReturn = int;                                   // nvmlReturn_t
using NvmlDevice = struct NvmlDeviceOpaque*;              // nvmlDevice_t
using NvmlGpuInstance = struct NvmlGpuInstanceOpaque*;    // nvmlGpuInstance_t
constexpr NvmlReturn kNvmlSuccess = 0;                    // NVML_SUCCESS
constexpr NvmlReturn kNvmlInvalidArgument = 2;            // NVML_ERROR_INVALID_ARGUMENT
constexpr NvmlReturn kNvmlNotSupported = 3;               // NVML_ERROR_NOT_SUPPORTED
constexpr NvmlReturn kNvmlInsufficientSize = 7;           // NVML_ERROR_INSUFFICIENT_SIZE
constexpr unsigned int kMigEnable = 1;                    // NVML_DEVICE_MIG_ENABLE
constexpr unsigned int kFeatureEnabled = 1;               // NVML_FEATURE_ENABLED
constexpr unsigned int kFeatureDisabled = 0;              // NVML_FEATURE_DISABLED
constexpr unsigned int kHeterogeneousPlacements = 0;      // NVML_VGPU_PGPU_HETEROGENEOUS_MODE
constexpr unsigned int kInvalidGiProfile = 0xFFFFFFFF;    // INVALID_GPU_INSTANCE_PROFILE_ID
constexpr unsigned int kInvalidGpuInstance = 0xFFFFFFFF;  // INVALID_GPU_INSTANCE_ID
constexpr unsigned int kInvalidPlacement = 0xFFFF;        // NVML_INVALID_VGPU_PLACEMENT_ID
constexpr unsigned int kVgpuNameBuffer = 64;              // NVML_VGPU_NAME_BUFFER_SIZE
constexpr unsigned int kUuidBuffer = 80;                  // NVML_DEVICE_UUID_BUFFER_SIZE

// nvmlVgpuHeterogeneousMode_v1_t; nvmlDeviceGetVgpuHeterogeneousMode answers "mode can either be
// NVML_FEATURE_ENABLED or NVML_FEATURE_DISABLED".
struct NvmlVgpuHeterogeneousMode {
  unsigned int version;
  unsigned int mode;
};
// nvmlVgpuPlacementList_v2_t (= nvmlVgpuPlacementList_t).
struct NvmlVgpuPlacementList {
  unsigned int version;        // IN
  unsigned int placementSize;  // OUT: "the number of slots occupied by the vGPU type"
  unsigned int count;          // IN/OUT
  unsigned int* placementIds;  // IN/OUT
  unsigned int mode;           // IN: NVML_VGPU_PGPU_HETEROGENEOUS_MODE or ..._HOMOGENEOUS_MODE
};
// nvmlVgpuPlacementId_v1_t (= nvmlVgpuPlacementId_t).
struct NvmlVgpuPlacementId {
  unsigned int version;
  unsigned int placementId;
};
// nvmlVgpuTypeMaxInstance_v1_t (= nvmlVgpuTypeMaxInstance_t).
struct NvmlVgpuTypeMaxInstance {
  unsigned int version;
  unsigned int vgpuTypeId;  // nvmlVgpuTypeId_t, IN
  unsigned int maxInstancePerGI;
};
// nvmlGpuInstanceProfileInfo_t (the unversioned first layout).
struct NvmlGpuInstanceProfileInfo {
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
// nvmlGpuInstancePlacement_t and nvmlGpuInstanceInfo_t.
struct NvmlGpuInstancePlacement {
  unsigned int start;
  unsigned int size;
};
struct NvmlGpuInstanceInfo {
  NvmlDevice device;
  unsigned int id;
  unsigned int profileId;
  NvmlGpuInstancePlacement placement;
};

// NVML_STRUCT_VERSION(data, ver) = sizeof(nvml<data>_v<ver>_t) | ver << 24.
template <typename T>
constexpr unsigned int StructVersion(unsigned int version) {
  return static_cast<unsigned int>(sizeof(T)) | (version << 24U);
}
// nvidia-ml-py's pynvml.py spells the first one out: VgpuHeterogeneousMode_v1 = 0x1000008.
static_assert(StructVersion<NvmlVgpuHeterogeneousMode>(1) == 0x1000008);
static_assert(StructVersion<NvmlVgpuPlacementId>(1) == 0x1000008);
static_assert(StructVersion<NvmlVgpuTypeMaxInstance>(1) == 0x100000C);
static_assert(sizeof(void*) != 8 || StructVersion<NvmlVgpuPlacementList>(2) == 0x2000020);

// Counts NVML answers are believed up to: a GPU's types, vGPUs, GPU instances, placements.
constexpr unsigned int kMaxEntries = 1024;
// nvmlDeviceGetGpuInstanceProfileInfo is asked "starting from 0, until the API returns
// NVML_ERROR_INVALID_ARGUMENT"; NVML_GPU_INSTANCE_PROFILE_COUNT is 0x12 in this header.
constexpr unsigned int kMaxGiProfiles = 64;

template <typename Fn>
Fn Symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// A list NVML fills after a count query: called with count 0 first (INSUFFICIENT_SIZE gives the
// count, SUCCESS means none), then with a buffer of that size. nullopt on any other answer.
template <typename T, typename Call>
std::optional<std::vector<T>> CountedList(Call call) {
  unsigned int count = 0;
  NvmlReturn r = call(&count, static_cast<T*>(nullptr));
  if (r == kNvmlSuccess) return std::vector<T>{};
  if (r != kNvmlInsufficientSize || count > kMaxEntries) return std::nullopt;
  std::vector<T> items(count);
  r = call(&count, items.data());
  if (r != kNvmlSuccess || count > items.size()) return std::nullopt;
  items.resize(count);
  return items;
}

std::string CString(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

struct NvmlGpuModeProbe::Api {
  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*handle_by_pci)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*mig_mode)(NvmlDevice, unsigned int*, unsigned int*) = nullptr;
  NvmlReturn (*heterogeneous_mode)(NvmlDevice, NvmlVgpuHeterogeneousMode*) = nullptr;
  NvmlReturn (*supported_vgpus)(NvmlDevice, unsigned int*, unsigned int*) = nullptr;
  NvmlReturn (*type_name)(unsigned int, char*, unsigned int*) = nullptr;
  NvmlReturn (*supported_placements)(NvmlDevice, unsigned int, NvmlVgpuPlacementList*) = nullptr;
  NvmlReturn (*type_gi_profile)(unsigned int, unsigned int*) = nullptr;
  NvmlReturn (*type_max_per_gi)(NvmlVgpuTypeMaxInstance*) = nullptr;
  NvmlReturn (*type_max_instances)(NvmlDevice, unsigned int, unsigned int*) = nullptr;
  NvmlReturn (*gi_profile_info)(NvmlDevice, unsigned int, NvmlGpuInstanceProfileInfo*) = nullptr;
  NvmlReturn (*gpu_instances)(NvmlDevice, unsigned int, NvmlGpuInstance*, unsigned int*) = nullptr;
  NvmlReturn (*gpu_instance_info)(NvmlGpuInstance, NvmlGpuInstanceInfo*) = nullptr;
  NvmlReturn (*active_vgpus)(NvmlDevice, unsigned int*, unsigned int*) = nullptr;
  NvmlReturn (*vgpu_type)(unsigned int, unsigned int*) = nullptr;
  NvmlReturn (*vgpu_mdev_uuid)(unsigned int, char*, unsigned int) = nullptr;
  NvmlReturn (*vgpu_placement)(unsigned int, NvmlVgpuPlacementId*) = nullptr;
  NvmlReturn (*vgpu_gpu_instance)(unsigned int, unsigned int*) = nullptr;

  // The GPU's vGPU types (nvmlDeviceGetSupportedVgpus), each tied to a sysfs type: NVML id ->
  // sysfs id. Empty when they cannot be read.
  std::map<unsigned int, std::string> Types(NvmlDevice device,
                                            const std::vector<SysfsTypeName>& sysfs) const;
  void ReadType(NvmlDevice device, unsigned int nvml_id, GpuShapeFacts::TypeFacts& t) const;
  void ReadGpuInstances(NvmlDevice device, GpuShapeFacts& facts) const;
  void ReadVgpus(NvmlDevice device, const std::map<unsigned int, std::string>& types,
                 GpuShapeFacts& facts) const;
};

NvmlGpuModeProbe::NvmlGpuModeProbe(std::string library) : library_(std::move(library)) {}

NvmlGpuModeProbe::~NvmlGpuModeProbe() {
  // NVML stays initialised for the process (nvmlShutdown is reference counted; other users of
  // the library in the process keep theirs); the handle is closed with it.
  if (api_ && api_->handle != nullptr) dlclose(api_->handle);
}

bool NvmlGpuModeProbe::LoadLocked() const {
  if (tried_) return api_ != nullptr;
  tried_ = true;
  void* handle = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
  auto api = std::make_unique<Api>();
  Api& a = *api;
  a.handle = handle;
  a.init = Symbol<decltype(a.init)>(handle, "nvmlInit_v2");
  a.handle_by_pci = Symbol<decltype(a.handle_by_pci)>(handle, "nvmlDeviceGetHandleByPciBusId_v2");
  a.mig_mode = Symbol<decltype(a.mig_mode)>(handle, "nvmlDeviceGetMigMode");
  a.heterogeneous_mode =
      Symbol<decltype(a.heterogeneous_mode)>(handle, "nvmlDeviceGetVgpuHeterogeneousMode");
  a.supported_vgpus = Symbol<decltype(a.supported_vgpus)>(handle, "nvmlDeviceGetSupportedVgpus");
  a.type_name = Symbol<decltype(a.type_name)>(handle, "nvmlVgpuTypeGetName");
  a.supported_placements =
      Symbol<decltype(a.supported_placements)>(handle, "nvmlDeviceGetVgpuTypeSupportedPlacements");
  a.type_gi_profile =
      Symbol<decltype(a.type_gi_profile)>(handle, "nvmlVgpuTypeGetGpuInstanceProfileId");
  a.type_max_per_gi =
      Symbol<decltype(a.type_max_per_gi)>(handle, "nvmlVgpuTypeGetMaxInstancesPerGpuInstance");
  a.type_max_instances =
      Symbol<decltype(a.type_max_instances)>(handle, "nvmlVgpuTypeGetMaxInstances");
  a.gi_profile_info =
      Symbol<decltype(a.gi_profile_info)>(handle, "nvmlDeviceGetGpuInstanceProfileInfo");
  a.gpu_instances = Symbol<decltype(a.gpu_instances)>(handle, "nvmlDeviceGetGpuInstances");
  a.gpu_instance_info = Symbol<decltype(a.gpu_instance_info)>(handle, "nvmlGpuInstanceGetInfo");
  a.active_vgpus = Symbol<decltype(a.active_vgpus)>(handle, "nvmlDeviceGetActiveVgpus");
  a.vgpu_type = Symbol<decltype(a.vgpu_type)>(handle, "nvmlVgpuInstanceGetType");
  a.vgpu_mdev_uuid = Symbol<decltype(a.vgpu_mdev_uuid)>(handle, "nvmlVgpuInstanceGetMdevUUID");
  a.vgpu_placement = Symbol<decltype(a.vgpu_placement)>(handle, "nvmlVgpuInstanceGetPlacementId");
  a.vgpu_gpu_instance =
      Symbol<decltype(a.vgpu_gpu_instance)>(handle, "nvmlVgpuInstanceGetGpuInstanceId");
  if (a.init == nullptr || a.handle_by_pci == nullptr || a.init() != kNvmlSuccess) {
    dlclose(handle);
    return false;
  }
  api_ = std::move(api);
  return true;
}

bool NvmlGpuModeProbe::Loaded() const {
  std::lock_guard lock(mutex_);
  return LoadLocked();
}

std::map<unsigned int, std::string> NvmlGpuModeProbe::Api::Types(
    NvmlDevice device, const std::vector<SysfsTypeName>& sysfs) const {
  std::map<unsigned int, std::string> types;
  if (supported_vgpus == nullptr) return types;
  auto ids = CountedList<unsigned int>(
      [&](unsigned int* count, unsigned int* out) { return supported_vgpus(device, count, out); });
  if (!ids) return types;
  for (unsigned int id : *ids) {
    std::string name;
    if (type_name != nullptr) {
      char buffer[kVgpuNameBuffer] = {};
      unsigned int size = sizeof buffer;
      if (type_name(id, buffer, &size) == kNvmlSuccess) name = CString(buffer, sizeof buffer);
    }
    // By name first: NVML's type name ("GRID M60-2Q" in nvml.h) is the string sysfs shows (the
    // mdev type's `name`, vendor VFIO's creatable_vgpu_types line). Then by number: an mdev type
    // directory is nvidia-<NVML type id> (Open-ForBC/OpenForBC openforbc/gpu.py reads
    // mdev_supported_types/nvidia-{id} for NVML's ids) and vendor VFIO lists the bare id
    // [unverified: that it is NVML's number].
    const SysfsTypeName* match = nullptr;
    for (const SysfsTypeName& t : sysfs) {
      if (!name.empty() && t.name == name) match = &t;
      if (match != nullptr) break;
    }
    for (const SysfsTypeName& t : sysfs) {
      if (match != nullptr) break;
      const std::string number = std::to_string(id);
      if (t.id == number || t.id == "nvidia-" + number) match = &t;
    }
    if (match != nullptr) types[id] = match->id;
  }
  return types;
}

void NvmlGpuModeProbe::Api::ReadType(NvmlDevice device, unsigned int nvml_id,
                                     GpuShapeFacts::TypeFacts& t) const {
  if (supported_placements != nullptr) {
    // The supported (not the creatable) placements: the rule works out what is free from the
    // vGPUs' own placements (scheduling::ModeRoom), as the driver does.
    std::vector<unsigned int> ids(kMaxEntries);
    NvmlVgpuPlacementList list{StructVersion<NvmlVgpuPlacementList>(2), 0,
                               static_cast<unsigned int>(ids.size()), ids.data(),
                               kHeterogeneousPlacements};
    if (supported_placements(device, nvml_id, &list) == kNvmlSuccess && list.placementSize > 0 &&
        list.count > 0 && list.count <= ids.size()) {
      t.placement_size = list.placementSize;
      t.placement_ids.assign(ids.begin(), ids.begin() + list.count);
    }
  }
  // nvml.h: "the maximum number of vGPU instances creatable on a device for given vGPU type".
  unsigned int max_instances = 0;
  if (type_max_instances != nullptr &&
      type_max_instances(device, nvml_id, &max_instances) == kNvmlSuccess) {
    t.max_instances = max_instances;
  }
  if (type_gi_profile != nullptr && type_max_per_gi != nullptr) {
    unsigned int profile = kInvalidGiProfile;
    NvmlVgpuTypeMaxInstance max{StructVersion<NvmlVgpuTypeMaxInstance>(1), nvml_id, 0};
    // Both or neither: a GI profile without its max per instance would place nothing there.
    if (type_gi_profile(nvml_id, &profile) == kNvmlSuccess && profile != kInvalidGiProfile &&
        type_max_per_gi(&max) == kNvmlSuccess) {
      t.gi_profile = profile;
      t.max_per_gi = max.maxInstancePerGI;
    }
  }
}

void NvmlGpuModeProbe::Api::ReadGpuInstances(NvmlDevice device, GpuShapeFacts& facts) const {
  if (gi_profile_info == nullptr || gpu_instances == nullptr || gpu_instance_info == nullptr) {
    return;
  }
  std::vector<GpuShapeFacts::GpuInstance> found;
  for (unsigned int profile = 0;; ++profile) {
    if (profile == kMaxGiProfiles) return;  // never ended: believe none of it
    NvmlGpuInstanceProfileInfo info{};
    const NvmlReturn r = gi_profile_info(device, profile, &info);
    if (r == kNvmlInvalidArgument) break;  // past the last profile
    if (r == kNvmlNotSupported) continue;  // a profile this GPU has not
    if (r != kNvmlSuccess || info.instanceCount > kMaxEntries) return;
    std::vector<NvmlGpuInstance> handles(std::max(info.instanceCount, 1u));
    unsigned int count = 0;
    if (gpu_instances(device, info.id, handles.data(), &count) != kNvmlSuccess ||
        count > handles.size()) {
      return;
    }
    for (unsigned int i = 0; i < count; ++i) {
      NvmlGpuInstanceInfo gi{};
      if (gpu_instance_info(handles[i], &gi) != kNvmlSuccess) return;
      found.push_back({gi.id, gi.profileId});
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  facts.gpu_instances = std::move(found);
  facts.gpu_instances_known = true;
}

void NvmlGpuModeProbe::Api::ReadVgpus(NvmlDevice device,
                                      const std::map<unsigned int, std::string>& types,
                                      GpuShapeFacts& facts) const {
  if (active_vgpus == nullptr || vgpu_type == nullptr || vgpu_mdev_uuid == nullptr) return;
  auto instances = CountedList<unsigned int>(
      [&](unsigned int* count, unsigned int* out) { return active_vgpus(device, count, out); });
  if (!instances) return;
  for (unsigned int instance : *instances) {
    // Only the mdev's UUID ties an NVML vGPU instance to a sysfs vGPU ("MDEV UUID is displayed
    // only on KVM platform"); NVML names no VF, so vendor-VFIO vGPUs are left out and the model
    // places them where the driver would.
    char uuid[kUuidBuffer] = {};
    unsigned int type = 0;
    if (vgpu_mdev_uuid(instance, uuid, sizeof uuid) != kNvmlSuccess ||
        vgpu_type(instance, &type) != kNvmlSuccess || !types.contains(type)) {
      continue;
    }
    GpuShapeFacts::VgpuFacts v;
    v.type = types.at(type);
    NvmlVgpuPlacementId placement{StructVersion<NvmlVgpuPlacementId>(1), kInvalidPlacement};
    if (vgpu_placement != nullptr && vgpu_placement(instance, &placement) == kNvmlSuccess &&
        placement.placementId != kInvalidPlacement) {
      v.placement = placement.placementId;
    }
    unsigned int gi = kInvalidGpuInstance;
    if (vgpu_gpu_instance != nullptr && vgpu_gpu_instance(instance, &gi) == kNvmlSuccess &&
        gi != kInvalidGpuInstance) {
      v.gpu_instance = gi;
    }
    facts.vgpus[Lower(CString(uuid, sizeof uuid))] = std::move(v);
  }
}

std::optional<GpuShapeFacts> NvmlGpuModeProbe::Probe(
    const std::string& pci_address, const std::vector<SysfsTypeName>& sysfs_types) const {
  std::lock_guard lock(mutex_);
  if (!LoadLocked()) return std::nullopt;
  NvmlDevice device = nullptr;
  if (api_->handle_by_pci(pci_address.c_str(), &device) != kNvmlSuccess) return std::nullopt;
  GpuShapeFacts facts;
  unsigned int current = 0;
  unsigned int pending = 0;
  // A GPU without MIG answers NVML_ERROR_NOT_SUPPORTED: MIG is then off.
  if (api_->mig_mode != nullptr) {
    const NvmlReturn r = api_->mig_mode(device, &current, &pending);
    if (r == kNvmlSuccess) facts.mig = current == kMigEnable;
    if (r == kNvmlNotSupported) facts.mig = false;
  }
  if (api_->heterogeneous_mode != nullptr) {
    NvmlVgpuHeterogeneousMode mode{StructVersion<NvmlVgpuHeterogeneousMode>(1), 0};
    const NvmlReturn r = api_->heterogeneous_mode(device, &mode);
    if (r == kNvmlSuccess && mode.mode == kFeatureEnabled) facts.heterogeneous = true;
    if (r == kNvmlSuccess && mode.mode == kFeatureDisabled) facts.heterogeneous = false;
    // NVML_ERROR_NOT_SUPPORTED: "If MIG is enabled or device doesn't support this feature";
    // either way the GPU is not in mixed-size mode.
    if (r == kNvmlNotSupported) facts.heterogeneous = false;
  }
  const std::map<unsigned int, std::string> types = api_->Types(device, sysfs_types);
  for (const auto& [nvml_id, sysfs_id] : types) {
    GpuShapeFacts::TypeFacts t;
    api_->ReadType(device, nvml_id, t);
    if (!t.placement_ids.empty() || t.gi_profile || t.max_instances > 0)
      facts.types[sysfs_id] = std::move(t);
  }
  if (facts.mig == true) api_->ReadGpuInstances(device, facts);
  if (facts.mig == false) facts.gpu_instances_known = true;  // MIG off: no GPU instances
  api_->ReadVgpus(device, types, facts);
  return facts;
}

}  // namespace kvgpu::mdev
