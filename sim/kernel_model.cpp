// The driver side of the model: the node profile checked before anything is laid out, and what
// a write to `create`, `remove` or `current_vgpu_type` does. The capacity rules the writes consult
// are in kernel_capacity.cpp, the counts rewritten after each change in kernel_counts.cpp, the
// test and simulator controls in kernel_controls.cpp.
#include "sim/kernel_model.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <set>
#include <system_error>

#include "common/ascii.h"
#include "mdev/nvidia.h"
#include "sim/model_internal.h"
#include "sim/tree.h"

namespace kvgpu::sim {

namespace {

bool IsHex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

// The kernel's uuid_is_valid()/guid_parse(): 8-4-4-4-12 hex digits, either case.
bool IsGuid(std::string_view text) {
  if (text.size() != 36) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? text[i] != '-' : !IsHex(text[i])) return false;
  }
  return true;
}

// The kernel's kstrtoull(text, 0): optional '+', 0x/0 prefixes pick the base, digits, then at
// most one trailing newline. Returns the errno a store() method would return on failure.
std::optional<uint64_t> KernelStrToUll(std::string_view text, int* err) {
  *err = EINVAL;
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  unsigned base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X') && IsHex(text[2])) {
    base = 16;
    text.remove_prefix(2);
  } else if (text.size() > 1 && text[0] == '0') {
    base = 8;
    text.remove_prefix(1);
  }
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    unsigned digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (IsHex(c)) {
      digit = static_cast<unsigned>(std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
    } else {
      return std::nullopt;
    }
    if (digit >= base) return std::nullopt;
    if (value > (UINT64_MAX - digit) / base) {
      *err = ERANGE;
      return std::nullopt;
    }
    value = value * base + digit;
  }
  *err = 0;
  return value;
}

Status Errno(int err, const fs::path& path, const std::string& what) {
  return Status::FromErrno(err, "write to " + path.string() + ": " + what);
}

Status Invalid(const std::string& message) {
  return Status::Error(ErrorCode::kInvalid, "bad node profile: " + message);
}

// A profile the model can lay out: checked whole before anything touches the disk.
Status CheckProfile(const NodeProfile& profile) {
  if (profile.gpus.empty()) return Invalid("'" + profile.name + "' has no GPU");
  std::set<std::string> addresses;
  for (const GpuSpec& gpu : profile.gpus) {
    if (!addresses.insert(gpu.address).second) return Invalid("GPU " + gpu.address + " twice");
    if (gpu.kind == GpuKind::kVirtual) {
      if (gpu.address.empty() || gpu.address.find('/') != std::string::npos ||
          gpu.address[0] == '.') {
        return Invalid("virtual parent name '" + gpu.address + "' is not a file name");
      }
    } else {
      auto pci = ParsePciAddress(gpu.address);
      if (!pci) return Invalid("'" + gpu.address + "' is not a PCI address like 0000:3b:00.0");
      if (gpu.vendor_id.empty() || gpu.device_id.empty() || gpu.driver.empty()) {
        return Invalid("GPU " + gpu.address + " needs vendor_id, device_id and driver");
      }
      // VFs stay on the PF's bus; no profile here needs more.
      if (pci->devfn + 4 + gpu.num_vfs > 0x100) {
        return Invalid("GPU " + gpu.address + " has too many VFs for its bus");
      }
    }
    if (IsSriov(gpu) != (gpu.num_vfs > 0)) {
      return Invalid("GPU " + gpu.address + ": VFs go with (and only with) an SR-IOV kind");
    }
    if (gpu.types.empty()) return Invalid("GPU " + gpu.address + " has no vGPU type");
    if (gpu.heterogeneous && (!gpu.heterogeneous_capable || gpu.mig)) {
      return Invalid("GPU " + gpu.address + ": mixed-size mode on a GPU that cannot (or MIG on)");
    }
    if ((gpu.mig || !gpu.initial_gpu_instances.empty()) && gpu.gi_profiles.empty()) {
      return Invalid("GPU " + gpu.address + ": MIG on a GPU without GPU-instance profiles");
    }
    if (!gpu.gi_profiles.empty() && gpu.gpu_slices == 0) {
      return Invalid("GPU " + gpu.address + ": GPU-instance profiles need the GPU's slice count");
    }
    uint32_t slices = 0;
    std::map<uint32_t, uint32_t> made;
    for (uint32_t gi : gpu.initial_gpu_instances) {
      auto gi_profile = std::find_if(gpu.gi_profiles.begin(), gpu.gi_profiles.end(),
                                     [&](const GpuSpec::GiProfile& p) { return p.id == gi; });
      if (!gpu.mig || gi_profile == gpu.gi_profiles.end()) {
        return Invalid("GPU " + gpu.address + ": GPU instance of profile " + std::to_string(gi) +
                       " needs MIG on and that profile");
      }
      slices += gi_profile->slices;
      if (++made[gi] > gi_profile->max_count || slices > gpu.gpu_slices) {
        return Invalid("GPU " + gpu.address + ": more GPU instances than the GPU holds");
      }
    }
    std::set<std::string> ids;
    for (const TypeSpec& type : gpu.types) {
      if (type.id.empty() || type.id.find('/') != std::string::npos || type.id[0] == '.') {
        return Invalid("type id '" + type.id + "' is not a file name");
      }
      if (!ids.insert(type.id).second) return Invalid("type " + type.id + " twice");
      if (type.max_instances == 0 || type.cost == 0) {
        return Invalid("type " + type.id + " needs max_instances and cost of at least 1");
      }
      if (!type.placement_ids.empty() && (type.placement_size == 0 || !gpu.heterogeneous_capable)) {
        return Invalid("type " + type.id + ": placements need a size and a mixed-size capable GPU");
      }
      // A MIG-backed name (<GPU>-<slices>-<GB><series>) runs only in a GPU instance: the driver
      // never offers it as a time-sliced type.
      const auto parsed = type.name ? mdev::ParseNvidiaProfile(*type.name) : std::nullopt;
      if (parsed && parsed->mig_slices > 0 && !type.gi_profile) {
        return Invalid("type " + type.id + " is MIG-backed by its name but has no GI profile");
      }
      if (type.gi_profile &&
          (type.max_per_gi == 0 ||
           std::none_of(gpu.gi_profiles.begin(), gpu.gi_profiles.end(),
                        [&](const GpuSpec::GiProfile& p) { return p.id == *type.gi_profile; }))) {
        return Invalid("type " + type.id +
                       ": MIG-backed types need a GPU-instance profile of the "
                       "GPU and a max per GPU instance");
      }
      if (gpu.kind == GpuKind::kVendorVfio) {
        int err = 0;
        auto number = KernelStrToUll(type.id, &err);
        if (!number || *number == 0 || *number > UINT32_MAX ||
            !std::all_of(type.id.begin(), type.id.end(),
                         [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
          return Invalid("vendor-VFIO type id '" + type.id + "' is not a positive number");
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace

std::optional<PciAddress> ParsePciAddress(std::string_view text) {
  if (text.size() != 12 || text[4] != ':' || text[7] != ':' || text[10] != '.') return std::nullopt;
  auto field = [&](size_t pos, size_t len) -> std::optional<uint32_t> {
    uint32_t value = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      char c = text[i];
      if (!IsHex(c) || std::isupper(static_cast<unsigned char>(c))) return std::nullopt;
      value = value * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return value;
  };
  auto domain = field(0, 4), bus = field(5, 2), device = field(8, 2), function = field(11, 1);
  if (!domain || !bus || !device || !function || *device > 0x1f || *function > 7) {
    return std::nullopt;
  }
  return PciAddress{*domain, *bus, *device << 3 | *function};
}

KernelModel::KernelModel(fs::path root, fs::path real_root, NodeProfile profile)
    : root_(std::move(root)), real_root_(std::move(real_root)), profile_(std::move(profile)) {
  gpus_.resize(profile_.gpus.size());
}

Result<std::unique_ptr<KernelModel>> KernelModel::Create(fs::path root, NodeProfile profile) {
  if (Status s = CheckProfile(profile); !s.ok()) return s;
  std::error_code ec;
  if (fs::exists(root, ec) && !fs::is_empty(root, ec)) {
    return Status::Error(ErrorCode::kInvalid, "simulated sysfs root " + root.string() +
                                                  " is not empty; give an empty or new directory");
  }
  if (Status s = tree::MakeDirs(root); !s.ok()) return s;
  fs::path real_root = fs::canonical(root, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot resolve " + root.string());
  std::unique_ptr<KernelModel> model(
      new KernelModel(std::move(root), std::move(real_root), std::move(profile)));
  std::lock_guard lock(model->mutex_);
  for (size_t i = 0; i < model->profile_.gpus.size(); ++i) {
    const GpuSpec& spec = model->profile_.gpus[i];
    GpuState& state = model->gpus_[i];
    state.heterogeneous = spec.heterogeneous;
    state.mig = spec.mig;
    for (uint32_t gi_profile : spec.initial_gpu_instances) {
      state.gpu_instances.push_back(
          {static_cast<uint32_t>(state.gpu_instances.size() + 1), gi_profile});
    }
  }
  if (Status s = model->LayoutNode(); !s.ok()) return s;
  if (Status s = model->WriteModes(); !s.ok()) return s;
  return model;
}

// --- driver reactions ---

void KernelModel::Place(size_t gpu, const TypeSpec& type, Vgpu& vgpu) const {
  // The driver picks: the lowest creatable placement (mixed-size), the lowest-numbered GPU
  // instance with room (MIG; which one the driver picks is not published, ours).
  if (type.gi_profile) {
    vgpu.gpu_instance = FittingGpuInstance(gpu, type);
  } else if (gpus_[gpu].heterogeneous) {
    vgpu.placement = LowestPlacement(gpu, type);
  }
}

Status KernelModel::WriteCreate(const Attribute& attr, const fs::path& path,
                                std::string_view data) {
  // mdev core create_store(): 36 characters, or 37 (the 37th, usually '\n', is not looked at).
  if (data.size() < 36 || data.size() > 37 || !IsGuid(data.substr(0, 36))) {
    return Errno(EINVAL, path, "'" + std::string(data) + "' is not a UUID");
  }
  std::string uuid = AsciiLower(data.substr(0, 36));
  if (vgpus_.count(uuid) != 0) {
    return Errno(EEXIST, path, "an mdev " + uuid + " already exists");
  }
  const TypeSpec* type = FindType(attr.gpu, attr.type);
  if (Available(attr.gpu, attr.parent, *type) == 0) {
    return Errno(type->mdev_core_limit ? EUSERS : ENOSPC, path,
                 "no room for another " + type->id + " on " + attr.parent);
  }
  Vgpu vgpu{uuid, attr.gpu, attr.parent, type->id, AllocateIommuGroup(), false, {}, {}};
  Place(attr.gpu, *type, vgpu);
  vgpus_[uuid] = vgpu;
  if (Status s = LayoutMdev(vgpu); !s.ok()) {
    UnlayoutMdev(vgpu);
    vgpus_.erase(uuid);
    return s;
  }
  return Refresh(attr.gpu);
}

Status KernelModel::WriteRemove(const Attribute& attr, const fs::path& path,
                                std::string_view data) {
  int err = 0;
  auto value = KernelStrToUll(data, &err);
  if (!value) return Errno(err, path, "'" + std::string(data) + "' is not a number");
  if (*value == 0) return Status::Ok();  // remove_store() ignores 0
  auto it = vgpus_.find(attr.vgpu);
  if (it == vgpus_.end()) return Errno(ENODEV, path, attr.vgpu + " is already gone");
  if (it->second.busy) return Errno(EBUSY, path, attr.vgpu + " is in use by a VM");
  Vgpu vgpu = it->second;
  vgpus_.erase(it);
  UnlayoutMdev(vgpu);
  return Refresh(vgpu.gpu);
}

Status KernelModel::WriteCurrentType(const Attribute& attr, const fs::path& path,
                                     std::string_view data) {
  int err = 0;
  auto value = KernelStrToUll(data, &err);
  if (!value) return Errno(err, path, "'" + std::string(data) + "' is not a vGPU type id");
  auto held = vgpus_.find(attr.parent);
  if (*value == 0) {
    if (held == vgpus_.end()) return Status::Ok();  // nothing to destroy
    if (held->second.busy) return Errno(EBUSY, path, attr.parent + " is in use by a VM");
    vgpus_.erase(held);
    return Refresh(attr.gpu);
  }
  if (held != vgpus_.end()) {
    return Errno(EEXIST, path, attr.parent + " already hosts vGPU type " + held->second.type);
  }
  const TypeSpec* type = FindType(attr.gpu, std::to_string(*value));
  if (type == nullptr) {
    return Errno(EINVAL, path, "this GPU has no vGPU type " + std::to_string(*value));
  }
  if (Available(attr.gpu, attr.parent, *type) == 0) {
    // MIG-backed with no GPU instance that fits: the driver fails the create request with EIO
    // (dmesg "NVRM: Failed to add vgpu create request: 0x38", measured on an RTX PRO 6000).
    if (type->gi_profile && gpus_[attr.gpu].mig &&
        FittingGpuInstance(attr.gpu, *type) == std::nullopt && vgpus_.count(attr.parent) == 0) {
      return Errno(EIO, path, "no GPU instance fits vGPU type " + type->id);
    }
    return Errno(ENOSPC, path, "no room for vGPU type " + type->id + " on this GPU");
  }
  Vgpu vgpu{attr.parent, attr.gpu, attr.parent, type->id, gpus_[attr.gpu].groups[attr.parent],
            false,       {},       {}};
  Place(attr.gpu, *type, vgpu);
  vgpus_[attr.parent] = vgpu;
  return Refresh(attr.gpu);
}

}  // namespace kvgpu::sim
