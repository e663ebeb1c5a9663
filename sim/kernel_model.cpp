// The driver side of the model: what a write to `create`, `remove` or `current_vgpu_type`
// does, and the availability accounting behind `available_instances` and
// `creatable_vgpu_types`.
#include "sim/kernel_model.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
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

bool IsSriov(const GpuSpec& gpu) {
  return gpu.kind == GpuKind::kSriovMdev || gpu.kind == GpuKind::kVendorVfio;
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

// --- accounting ---

std::vector<std::string> KernelModel::ParentsOf(size_t gpu) const {
  const GpuSpec& spec = profile_.gpus[gpu];
  if (!gpus_[gpu].present) return {};
  if (IsSriov(spec)) return gpus_[gpu].vfs;
  return {spec.address};
}

const TypeSpec* KernelModel::FindType(size_t gpu, std::string_view type_id) const {
  for (const TypeSpec& type : profile_.gpus[gpu].types) {
    if (type.id == type_id) return &type;
  }
  return nullptr;
}

bool KernelModel::GpuHasVgpu(size_t gpu) const {
  return std::any_of(vgpus_.begin(), vgpus_.end(),
                     [gpu](const auto& entry) { return entry.second.gpu == gpu; });
}

std::optional<uint32_t> KernelModel::LowestPlacement(size_t gpu, const TypeSpec& type) const {
  for (uint32_t start : type.placement_ids) {
    bool free = true;
    for (const auto& [id, vgpu] : vgpus_) {
      if (vgpu.gpu != gpu || !vgpu.placement) continue;
      const TypeSpec* held = FindType(gpu, vgpu.type);
      const uint32_t end = *vgpu.placement + (held ? held->placement_size : 1);
      if (start < end && *vgpu.placement < start + type.placement_size) free = false;
    }
    if (free) return start;
  }
  return std::nullopt;
}

uint32_t KernelModel::FreePlacements(size_t gpu, const TypeSpec& type) const {
  // Slots taken: the vGPUs' own, then each placement this count takes, lowest first.
  std::vector<std::pair<uint32_t, uint32_t>> taken;  // [start, end)
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu != gpu || !vgpu.placement) continue;
    const TypeSpec* held = FindType(gpu, vgpu.type);
    taken.emplace_back(*vgpu.placement, *vgpu.placement + (held ? held->placement_size : 1));
  }
  uint32_t count = 0;
  for (uint32_t start : type.placement_ids) {
    const uint32_t end = start + type.placement_size;
    bool free = std::none_of(taken.begin(), taken.end(), [&](const auto& range) {
      return start < range.second && range.first < end;
    });
    if (!free) continue;
    taken.emplace_back(start, end);
    ++count;
  }
  return count;
}

uint32_t KernelModel::RoomInGpuInstance(size_t gpu, uint32_t gi, const TypeSpec& type) const {
  // A GPU instance hosts one framebuffer size (series may differ), at most max_per_gi of it.
  uint32_t in_gi = 0;
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu != gpu || vgpu.gpu_instance != gi) continue;
    const TypeSpec* held = FindType(gpu, vgpu.type);
    if (held == nullptr || held->framebuffer_mib != type.framebuffer_mib) return 0;
    ++in_gi;
  }
  return type.max_per_gi > in_gi ? type.max_per_gi - in_gi : 0;
}

uint32_t KernelModel::GpuInstanceRoom(size_t gpu, const TypeSpec& type) const {
  uint32_t room = 0;
  for (const GpuInstance& gi : gpus_[gpu].gpu_instances) {
    if (gi.profile == *type.gi_profile) room += RoomInGpuInstance(gpu, gi.id, type);
  }
  return room;
}

std::optional<uint32_t> KernelModel::FittingGpuInstance(size_t gpu, const TypeSpec& type) const {
  for (const GpuInstance& gi : gpus_[gpu].gpu_instances) {
    if (gi.profile == *type.gi_profile && RoomInGpuInstance(gpu, gi.id, type) > 0) return gi.id;
  }
  return std::nullopt;
}

uint32_t KernelModel::Available(size_t gpu, const std::string& parent, const TypeSpec& type) const {
  const GpuSpec& spec = profile_.gpus[gpu];
  const GpuState& state = gpus_[gpu];
  // vGPUs on the GPU that share the type's count: its own; with the equal-size lock, every type of
  // its framebuffer size.
  uint32_t same = 0;
  uint32_t own = 0;
  uint32_t used_units = 0;
  bool locked_out = false;
  bool parent_used = false;
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu != gpu) continue;
    const TypeSpec* held = FindType(gpu, vgpu.type);
    used_units += held ? held->cost : 1;
    if (vgpu.type == type.id) ++own;
    const bool sharing = spec.lock == GpuSpec::Lock::kFramebuffer
                             ? held != nullptr && held->framebuffer_mib == type.framebuffer_mib
                             : vgpu.type == type.id;
    if (sharing) {
      ++same;
    } else {
      locked_out = true;
    }
    parent_used |= vgpu.parent == parent;
  }
  uint32_t left = 0;
  if (type.gi_profile) {
    // MIG-backed: only while MIG is on, in a GPU instance of its profile with room for its size.
    if (!state.mig) return 0;
    left = std::min(type.max_instances > own ? type.max_instances - own : 0,
                    GpuInstanceRoom(gpu, type));
  } else if (state.mig) {
    return 0;  // time-sliced types are not offered while MIG is on
  } else if (state.heterogeneous) {
    // Mixed-size: any size where a placement is free, within the type's (mixed-size) max.
    const uint32_t max =
        type.max_instances_mixed > 0 ? type.max_instances_mixed : type.max_instances;
    left = std::min(max > own ? max - own : 0, FreePlacements(gpu, type));
  } else {
    // Time-sliced vGPU: the physical GPU (all its VFs) serves one type, or one size, at a time.
    if (spec.lock != GpuSpec::Lock::kNone && locked_out) return 0;
    left = type.max_instances > same ? type.max_instances - same : 0;
  }
  if (spec.pool > 0) {
    uint32_t pool_left = spec.pool > used_units ? (spec.pool - used_units) / type.cost : 0;
    left = std::min(left, pool_left);
  }
  // A VF carries at most one vGPU.
  if (IsSriov(spec)) left = parent_used ? 0 : std::min(left, 1u);
  return left;
}

namespace {

// Replaces an attribute only when its value changes: a create on an A100 touches 140 counts,
// most of which stay as they are, and each replacement is a rename readers may notice.
Status Update(const fs::path& file, const std::string& content, mode_t mode,
              const fs::path& scratch) {
  std::ifstream in(file, std::ios::binary);
  if (in) {
    std::string current((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (current == content) return Status::Ok();
  }
  return tree::PutFile(file, content, mode, scratch);
}

}  // namespace

Status KernelModel::Refresh(size_t gpu) {
  const GpuSpec& spec = profile_.gpus[gpu];
  fs::path scratch = real_root_ / kScratchDir;
  for (const std::string& parent : ParentsOf(gpu)) {
    fs::path dir = DeviceDir(gpu, parent);
    if (spec.kind == GpuKind::kVendorVfio) {
      std::string creatable = kCreatableHeader;
      for (const TypeSpec& type : spec.types) {
        if (Available(gpu, parent, type) == 0) continue;
        std::string id = type.id;
        id.resize(std::max<size_t>(id.size(), 6), ' ');
        creatable += id + ": " + type.name.value_or("") + "\n";
      }
      auto held = vgpus_.find(parent);
      std::string current = held == vgpus_.end() ? "0" : held->second.type;
      Status s =
          Update(dir / "nvidia" / "creatable_vgpu_types", creatable, tree::kReadOnly, scratch);
      if (!s.ok()) return s;
      s = Update(dir / "nvidia" / "current_vgpu_type", current + "\n", tree::kReadWrite, scratch);
      if (!s.ok()) return s;
      continue;
    }
    for (const TypeSpec& type : spec.types) {
      Status s =
          Update(dir / "mdev_supported_types" / type.id / "available_instances",
                 std::to_string(Available(gpu, parent, type)) + "\n", tree::kReadOnly, scratch);
      if (!s.ok()) return s;
    }
  }
  return WriteModes();
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

// --- controls ---

void KernelModel::SetBusy(const std::string& vgpu_id, bool busy) {
  std::lock_guard lock(mutex_);
  auto it = vgpus_.find(AsciiLower(vgpu_id));
  if (it != vgpus_.end()) it->second.busy = busy;
}

void KernelModel::InjectFault(Op op, std::string path_suffix, int err, int times) {
  std::lock_guard lock(mutex_);
  if (times == 0) return;
  faults_.push_back(Fault{op, std::move(path_suffix), err, times});
}

void KernelModel::ClearFaults() {
  std::lock_guard lock(mutex_);
  faults_.clear();
}

std::optional<size_t> KernelModel::GpuByAddress(const std::string& address) const {
  for (size_t i = 0; i < profile_.gpus.size(); ++i) {
    if (profile_.gpus[i].address == address) return i;
  }
  return std::nullopt;
}

Status KernelModel::RemoveGpu(const std::string& address) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu) {
    return Status::Error(ErrorCode::kUnknownParent, "the profile has no GPU " + address);
  }
  if (!gpus_[*gpu].present) return Status::Error(ErrorCode::kGone, address + " is already gone");
  UnlayoutGpu(*gpu);
  return Status::Ok();
}

Status KernelModel::RestoreGpu(const std::string& address) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu) {
    return Status::Error(ErrorCode::kUnknownParent, "the profile has no GPU " + address);
  }
  if (gpus_[*gpu].present) return Status::Error(ErrorCode::kExists, address + " is present");
  // The driver rebind of a VF re-enable (sriov-manage) clears mixed-size mode and destroys every
  // GPU instance; MIG mode itself persists (measured, cubecos on an RTX PRO 6000).
  gpus_[*gpu].heterogeneous = false;
  gpus_[*gpu].gpu_instances.clear();
  return LayoutGpu(*gpu);
}

Status KernelModel::SetHeterogeneous(const std::string& address, bool on) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu || !gpus_[*gpu].present) return Status::FromErrno(ENOENT, "no GPU " + address);
  if (!profile_.gpus[*gpu].heterogeneous_capable || gpus_[*gpu].mig) {
    return Status::FromErrno(EOPNOTSUPP, address + ": mixed-size mode not supported");
  }
  if (gpus_[*gpu].heterogeneous == on) return Status::Ok();
  if (GpuHasVgpu(*gpu)) return Status::FromErrno(EBUSY, address + ": in use by another client");
  gpus_[*gpu].heterogeneous = on;
  return Refresh(*gpu);
}

Status KernelModel::SetMig(const std::string& address, bool on) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu || !gpus_[*gpu].present) return Status::FromErrno(ENOENT, "no GPU " + address);
  const GpuSpec& spec = profile_.gpus[*gpu];
  GpuState& state = gpus_[*gpu];
  if (spec.gi_profiles.empty()) return Status::FromErrno(EOPNOTSUPP, address + ": no MIG");
  if (state.mig == on) return Status::Ok();
  if (GpuHasVgpu(*gpu) || !state.gpu_instances.empty() || IsSriov(spec)) {
    return Status::FromErrno(EBUSY, address + ": in use by another client");
  }
  state.mig = on;
  if (on) state.heterogeneous = false;
  return Refresh(*gpu);
}

Result<uint32_t> KernelModel::CreateGpuInstance(const std::string& address, uint32_t profile_id) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu || !gpus_[*gpu].present) return Status::FromErrno(ENOENT, "no GPU " + address);
  GpuState& state = gpus_[*gpu];
  const auto& profiles = profile_.gpus[*gpu].gi_profiles;
  auto profile = std::find_if(profiles.begin(), profiles.end(),
                              [&](const GpuSpec::GiProfile& p) { return p.id == profile_id; });
  if (profile == profiles.end()) {
    return Status::FromErrno(
        EINVAL, address + " has no GPU-instance profile " + std::to_string(profile_id));
  }
  if (!state.mig) return Status::FromErrno(EOPNOTSUPP, address + ": MIG mode is off");
  const auto made = std::count_if(state.gpu_instances.begin(), state.gpu_instances.end(),
                                  [&](const GpuInstance& gi) { return gi.profile == profile_id; });
  // Both the profile's own count and the GPU's compute slices bound it (MIG user guide,
  // "Supported MIG Profiles": each profile's fraction of the SMs; an H200 has 7 slices).
  uint32_t slices_used = 0;
  for (const GpuInstance& gi : state.gpu_instances) {
    for (const auto& p : profiles) {
      if (p.id == gi.profile) slices_used += p.slices;
    }
  }
  if (static_cast<uint32_t>(made) >= profile->max_count ||
      slices_used + profile->slices > profile_.gpus[*gpu].gpu_slices) {
    return Status::FromErrno(ENOSPC, address + ": no room for another " + profile->name);
  }
  uint32_t id = 1;
  while (std::any_of(state.gpu_instances.begin(), state.gpu_instances.end(),
                     [&](const GpuInstance& gi) { return gi.id == id; })) {
    ++id;
  }
  state.gpu_instances.push_back({id, profile_id});
  if (Status s = Refresh(*gpu); !s.ok()) return s;
  return id;
}

Status KernelModel::DestroyGpuInstance(const std::string& address, uint32_t gi_id) {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  if (!gpu || !gpus_[*gpu].present) return Status::FromErrno(ENOENT, "no GPU " + address);
  auto& gis = gpus_[*gpu].gpu_instances;
  auto it =
      std::find_if(gis.begin(), gis.end(), [&](const GpuInstance& gi) { return gi.id == gi_id; });
  if (it == gis.end())
    return Status::FromErrno(ENOENT, address + ": no GPU instance " + std::to_string(gi_id));
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu == *gpu && vgpu.gpu_instance == gi_id) {
      return Status::FromErrno(EBUSY,
                               address + ": GPU instance " + std::to_string(gi_id) + " in use");
    }
  }
  gis.erase(it);
  return Refresh(*gpu);
}

Status KernelModel::WriteModes() {
  nlohmann::json gpus = nlohmann::json::array();
  for (size_t i = 0; i < profile_.gpus.size(); ++i) {
    const GpuSpec& spec = profile_.gpus[i];
    const GpuState& state = gpus_[i];
    if (spec.kind == GpuKind::kVirtual || !state.present) continue;
    nlohmann::json gpu = {
        {"address", spec.address}, {"mig", state.mig}, {"heterogeneous", state.heterogeneous}};
    nlohmann::json instances = nlohmann::json::array();
    for (const GpuInstance& gi : state.gpu_instances) {
      uint64_t framebuffer = 0;
      for (const auto& p : spec.gi_profiles) {
        if (p.id == gi.profile) framebuffer = p.framebuffer_mib;
      }
      instances.push_back(
          {{"id", gi.id}, {"profileId", gi.profile}, {"framebufferMib", framebuffer}});
    }
    gpu["gpuInstances"] = instances;
    nlohmann::json types = nlohmann::json::array();
    for (const TypeSpec& type : spec.types) {
      // NVML's nvmlVgpuTypeGetMaxInstances: the most the GPU makes of the type in its mode now.
      const uint32_t max = state.heterogeneous && type.max_instances_mixed > 0
                               ? type.max_instances_mixed
                               : type.max_instances;
      nlohmann::json t = {
          {"id", type.id}, {"framebufferMib", type.framebuffer_mib}, {"maxInstances", max}};
      if (!type.placement_ids.empty()) {
        t["placementSize"] = type.placement_size;
        t["placementIds"] = type.placement_ids;
      }
      if (type.gi_profile) {
        t["gpuInstanceProfileId"] = *type.gi_profile;
        t["maxPerGpuInstance"] = type.max_per_gi;
      }
      types.push_back(t);
    }
    gpu["types"] = types;
    nlohmann::json vgpus = nlohmann::json::array();
    for (const auto& [id, vgpu] : vgpus_) {
      if (vgpu.gpu != i) continue;
      nlohmann::json v = {{"id", id}, {"parent", vgpu.parent}, {"type", vgpu.type}};
      if (vgpu.placement) v["placementId"] = *vgpu.placement;
      if (vgpu.gpu_instance) v["gpuInstanceId"] = *vgpu.gpu_instance;
      vgpus.push_back(v);
    }
    gpu["vgpus"] = vgpus;
    gpus.push_back(gpu);
  }
  nlohmann::json doc = {{"gpus", gpus}};
  return Update(real_root_ / kModesFile, doc.dump() + "\n", tree::kReadOnly,
                real_root_ / kScratchDir);
}

Result<std::string> KernelModel::ReadOutput(const Output& output) const {
  auto it = vgpus_.find(output.vgpu);
  if (output.mdev) {
    // Not Applicable until the vGPU is in use (gentlemanautomaton/machina, mdevfs).
    if (it == vgpus_.end() || !it->second.busy || !it->second.placement) {
      return std::string("Not Applicable\n");
    }
    return std::to_string(*it->second.placement) + "\n";
  }
  if (it == vgpus_.end()) {
    return Status::FromErrno(ENXIO, output.vgpu + ": no vGPU on this VF");
  }
  // With no placement or GPU instance (equal-size, strict) the driver's value is not published:
  // 0 is ours.
  std::optional<uint32_t> value = output.placement ? it->second.placement : it->second.gpu_instance;
  return std::to_string(value.value_or(0)) + "\n";
}

std::vector<std::string> KernelModel::VgpuIds() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  for (const auto& [id, vgpu] : vgpus_) ids.push_back(id);
  return ids;
}

std::vector<KernelModel::VgpuInfo> KernelModel::Vgpus() const {
  std::lock_guard lock(mutex_);
  std::vector<VgpuInfo> out;
  for (const auto& [id, vgpu] : vgpus_) out.push_back({id, vgpu.parent, vgpu.type, vgpu.busy});
  return out;
}

void KernelModel::SetRemovalHook(RemovalHook hook) {
  std::lock_guard lock(mutex_);
  removal_hook_ = std::move(hook);
}

bool KernelModel::GpuPresent(const std::string& address) const {
  std::lock_guard lock(mutex_);
  auto gpu = GpuByAddress(address);
  return gpu && gpus_[*gpu].present;
}

}  // namespace kvgpu::sim
