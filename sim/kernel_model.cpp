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
#include <set>
#include <system_error>

#include "common/ascii.h"
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
    std::set<std::string> ids;
    for (const TypeSpec& type : gpu.types) {
      if (type.id.empty() || type.id.find('/') != std::string::npos || type.id[0] == '.') {
        return Invalid("type id '" + type.id + "' is not a file name");
      }
      if (!ids.insert(type.id).second) return Invalid("type " + type.id + " twice");
      if (type.max_instances == 0 || type.cost == 0) {
        return Invalid("type " + type.id + " needs max_instances and cost of at least 1");
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
  if (Status s = model->LayoutNode(); !s.ok()) return s;
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

uint32_t KernelModel::Available(size_t gpu, const std::string& parent, const TypeSpec& type) const {
  const GpuSpec& spec = profile_.gpus[gpu];
  // vGPUs on the GPU that share the type's count: its own; with the equal-size lock, every type of
  // its framebuffer size.
  uint32_t same = 0;
  uint32_t used_units = 0;
  bool locked_out = false;
  bool parent_used = false;
  for (const auto& [id, vgpu] : vgpus_) {
    if (vgpu.gpu != gpu) continue;
    const TypeSpec* held = FindType(gpu, vgpu.type);
    used_units += held ? held->cost : 1;
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
  // Time-sliced vGPU: the physical GPU (all its VFs) serves one type, or one size, at a time.
  if (spec.lock != GpuSpec::Lock::kNone && locked_out) return 0;
  uint32_t left = type.max_instances > same ? type.max_instances - same : 0;
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
  return Status::Ok();
}

// --- driver reactions ---

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
  Vgpu vgpu{uuid, attr.gpu, attr.parent, type->id, AllocateIommuGroup(), false};
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
    return Errno(ENOSPC, path, "no room for vGPU type " + type->id + " on this GPU");
  }
  vgpus_[attr.parent] = Vgpu{
      attr.parent, attr.gpu, attr.parent, type->id, gpus_[attr.gpu].groups[attr.parent], false};
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
  return LayoutGpu(*gpu);
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
