#include "deviceplugin/model/gpu_mode_probe.h"

#include <dlfcn.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvgpu::deviceplugin {

// --- NVML ---
//
// The declarations NVML's header (nvml.h) makes for the calls used, written out here so that the
// build needs no NVIDIA package. Sources: NVML API Reference (docs.nvidia.com/deploy/nvml-api),
// "Initialization and Cleanup" (nvmlInit_v2), "Device Queries" (nvmlDeviceGetHandleByPciBusId_v2),
// "Multi Instance GPU Management" (nvmlDeviceGetMigMode: currentMode, pendingMode;
// NVML_DEVICE_MIG_ENABLE = 1), "vGPU Management" (nvmlDeviceGetVgpuHeterogeneousMode) and the
// struct nvmlVgpuHeterogeneousMode_v1_t {unsigned int version; unsigned int mode;} whose version
// constant nvmlVgpuHeterogeneousMode_v1 is NVML_STRUCT_VERSION(VgpuHeterogeneousMode, 1) =
// sizeof(struct) | 1 << 24 = 0x1000008 (nvml.h; NVIDIA's nvidia-ml-py `pynvml.py` has
// VgpuHeterogeneousMode_v1 = 0x1000008). That `mode` reads NVML_FEATURE_ENABLED (1) /
// DISABLED (0), the values nvmlDeviceSetVgpuHeterogeneousMode takes, is our reading [unverified];
// any other value leaves the mode unknown.
namespace {

using NvmlReturn = int;                       // nvmlReturn_t; NVML_SUCCESS = 0
using NvmlDevice = struct NvmlDeviceOpaque*;  // nvmlDevice_t
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNotSupported = 3;   // NVML_ERROR_NOT_SUPPORTED
constexpr unsigned int kMigEnable = 1;        // NVML_DEVICE_MIG_ENABLE
constexpr unsigned int kFeatureEnabled = 1;   // NVML_FEATURE_ENABLED
constexpr unsigned int kFeatureDisabled = 0;  // NVML_FEATURE_DISABLED

struct NvmlVgpuHeterogeneousMode {
  unsigned int version;
  unsigned int mode;
};
constexpr unsigned int kHeterogeneousModeV1 =
    static_cast<unsigned int>(sizeof(NvmlVgpuHeterogeneousMode)) | (1u << 24);
static_assert(kHeterogeneousModeV1 == 0x1000008);

}  // namespace

struct NvmlGpuModeProbe::Api {
  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*handle_by_pci)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*mig_mode)(NvmlDevice, unsigned int*, unsigned int*) = nullptr;
  NvmlReturn (*heterogeneous_mode)(NvmlDevice, NvmlVgpuHeterogeneousMode*) = nullptr;
};

NvmlGpuModeProbe::NvmlGpuModeProbe(std::string library) : library_(std::move(library)) {}

NvmlGpuModeProbe::~NvmlGpuModeProbe() {
  // NVML stays initialised for the process (nvmlShutdown is reference counted; other users of
  // the library in the process keep theirs); the handle is closed with it.
  if (api_ && api_->handle != nullptr) dlclose(api_->handle);
}

namespace {

template <typename Fn>
Fn Symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

}  // namespace

bool NvmlGpuModeProbe::LoadLocked() const {
  if (tried_) return api_ != nullptr;
  tried_ = true;
  void* handle = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
  auto api = std::make_unique<Api>();
  api->handle = handle;
  api->init = Symbol<decltype(api->init)>(handle, "nvmlInit_v2");
  api->handle_by_pci =
      Symbol<decltype(api->handle_by_pci)>(handle, "nvmlDeviceGetHandleByPciBusId_v2");
  api->mig_mode = Symbol<decltype(api->mig_mode)>(handle, "nvmlDeviceGetMigMode");
  api->heterogeneous_mode =
      Symbol<decltype(api->heterogeneous_mode)>(handle, "nvmlDeviceGetVgpuHeterogeneousMode");
  if (api->init == nullptr || api->handle_by_pci == nullptr || api->init() != kNvmlSuccess) {
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

std::optional<GpuShapeFacts> NvmlGpuModeProbe::Probe(const std::string& pci_address) const {
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
    NvmlVgpuHeterogeneousMode mode{kHeterogeneousModeV1, 0};
    if (api_->heterogeneous_mode(device, &mode) == kNvmlSuccess) {
      if (mode.mode == kFeatureEnabled) facts.heterogeneous = true;
      if (mode.mode == kFeatureDisabled) facts.heterogeneous = false;
    }
  }
  return facts;
}

const char* GpuModeProbeChoiceName(GpuModeProbeChoice choice) {
  switch (choice) {
    case GpuModeProbeChoice::kNvml:
      return "nvml";
    case GpuModeProbeChoice::kSim:
      return "sim";
    case GpuModeProbeChoice::kNone:
      break;
  }
  return "none";
}

std::optional<GpuModeProbeChoice> ParseGpuModeProbeChoice(std::string_view name) {
  for (auto c : {GpuModeProbeChoice::kNone, GpuModeProbeChoice::kNvml, GpuModeProbeChoice::kSim}) {
    if (name == GpuModeProbeChoiceName(c)) return c;
  }
  return std::nullopt;
}

std::shared_ptr<const GpuModeProbe> MakeGpuModeProbe(GpuModeProbeChoice choice,
                                                     const std::filesystem::path& sysfs_root) {
  switch (choice) {
    case GpuModeProbeChoice::kNvml:
      return std::make_shared<NvmlGpuModeProbe>();
    case GpuModeProbeChoice::kSim:
      // The simulator's modes file sits at the top of its tree (sim/kernel_model.h kModesFile).
      return std::make_shared<SimGpuModeProbe>(sysfs_root / "sim-gpu-modes.json");
    case GpuModeProbeChoice::kNone:
      break;
  }
  return nullptr;
}

// --- the simulator's file ---

namespace {

std::optional<uint32_t> U32(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_unsigned() ||
      it->get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
    return std::nullopt;
  }
  return it->get<uint32_t>();
}

}  // namespace

std::optional<GpuShapeFacts> SimGpuModeProbe::Probe(const std::string& pci_address) const {
  std::ifstream in(file_);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("gpus") || !doc["gpus"].is_array()) {
    return std::nullopt;
  }
  for (const nlohmann::json& gpu : doc["gpus"]) {
    if (!gpu.is_object() || gpu.value("address", "") != pci_address) continue;
    GpuShapeFacts facts;
    if (gpu.contains("mig") && gpu["mig"].is_boolean()) facts.mig = gpu["mig"].get<bool>();
    if (gpu.contains("heterogeneous") && gpu["heterogeneous"].is_boolean()) {
      facts.heterogeneous = gpu["heterogeneous"].get<bool>();
    }
    if (gpu.contains("gpuInstances") && gpu["gpuInstances"].is_array()) {
      facts.gpu_instances_known = true;
      for (const nlohmann::json& gi : gpu["gpuInstances"]) {
        auto id = U32(gi, "id");
        auto profile = U32(gi, "profileId");
        if (!id || !profile) return std::nullopt;  // a file we cannot read whole says nothing
        facts.gpu_instances.push_back({*id, *profile, 0, 0});
      }
    }
    for (const nlohmann::json& type : gpu.value("types", nlohmann::json::array())) {
      if (!type.is_object() || !type.contains("id") || !type["id"].is_string()) continue;
      GpuShapeFacts::TypeFacts& t = facts.types[type["id"].get<std::string>()];
      if (type.contains("placementIds") && type["placementIds"].is_array()) {
        auto size = U32(type, "placementSize");
        if (!size || *size == 0) return std::nullopt;
        t.placements.size = *size;
        for (const nlohmann::json& id : type["placementIds"]) {
          if (!id.is_number_unsigned()) return std::nullopt;
          t.placements.ids.push_back(id.get<uint32_t>());
        }
      }
      if (type.contains("gpuInstanceProfileId")) {
        t.gi_profile = U32(type, "gpuInstanceProfileId");
        auto max = U32(type, "maxPerGpuInstance");
        if (!t.gi_profile || !max) return std::nullopt;
        t.max_per_gi = *max;
      }
    }
    for (const nlohmann::json& vgpu : gpu.value("vgpus", nlohmann::json::array())) {
      if (!vgpu.is_object() || !vgpu.contains("id") || !vgpu["id"].is_string()) continue;
      GpuShapeFacts::VgpuFacts& v = facts.vgpus[vgpu["id"].get<std::string>()];
      v.type = vgpu.value("type", "");
      v.placement = U32(vgpu, "placementId");
      v.gpu_instance = U32(vgpu, "gpuInstanceId");
    }
    return facts;
  }
  return std::nullopt;
}

}  // namespace kvgpu::deviceplugin
