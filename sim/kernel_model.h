// A model of an NVIDIA vGPU host's kernel, as far as this project sees it through sysfs.
//
// It builds a real-shaped tree (directories, attribute files and relative symlinks laid out as
// sysfs has them) under a root, and it answers writes to `create`, `remove` and
// `current_vgpu_type` the way the drivers do: same rules, same errno. Reads go straight to the
// tree, which the model keeps current (available_instances, creatable_vgpu_types, devices).
// One model serves the unit tests (as a SysfsIo), the demo, and the FUSE simulator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::sim {

namespace fs = std::filesystem;

struct TypeSpec {
  std::string id;                          // "nvidia-222", "mtty-2", vendor VFIO: "1414"
  std::optional<std::string> name;         // "GRID T4-1B"; absent -> no `name` file
  std::optional<std::string> description;  // absent -> no `description` file (mtty)
  std::string device_api = "vfio-pci";
  uint64_t framebuffer_mib = 0;  // NVIDIA types: what the equal-size lock compares
  uint32_t max_instances = 1;    // per physical GPU (or per pool for virtual parents)
  uint32_t cost = 1;  // units of the GPU's pool one instance takes (mtty-2 takes 2 ports)
  // The mdev core's own max_instances accounting (mdpy, mbochs: drivers without get_available):
  // no room then fails with EUSERS from the core instead of the driver's ENOSPC.
  bool mdev_core_limit = false;
  // Mixed-size (heterogeneous) mode, NVML's nvmlVgpuPlacementList_v2_t: the slots one vGPU of the
  // type takes and the slots it may start at. Empty ids: the type cannot go on a GPU in
  // mixed-size mode. max_instances_mixed: its max there when lower than max_instances (0: same).
  uint32_t placement_size = 0;
  std::vector<uint32_t> placement_ids;
  uint32_t max_instances_mixed = 0;
  // MIG-backed types: the GPU-instance profile they run in and how many fit one GPU instance
  // (nvidia-smi vgpu -s -v: "GPU Instance Profile ID", "Max Instances Per GI"). nullopt: a
  // time-sliced type, which the GPU offers only while MIG is off.
  std::optional<uint32_t> gi_profile;
  uint32_t max_per_gi = 0;
};

enum class GpuKind {
  kMdevPci,     // a PCI GPU that is itself the mdev parent (T4, V100, A10 on vGPU <= 16)
  kSriovMdev,   // a PF whose VFs are mdev parents, one vGPU per VF (A100, vGPU <= 16)
  kVendorVfio,  // a PF whose VFs carry nvidia/{creatable,current}_vgpu_type (vGPU 17+)
  kVirtual,     // a non-PCI parent such as the kernel's mtty sample
};

struct GpuSpec {
  std::string address;  // PCI address of the GPU ("0000:3b:00.0") or the virtual name ("mtty")
  GpuKind kind = GpuKind::kMdevPci;
  std::string vendor_id = "0x10de";
  std::string device_id;  // "0x1eb8" for T4
  std::string driver = "nvidia";
  uint32_t num_vfs = 0;  // SR-IOV VFs (kSriovMdev, kVendorVfio)
  // The NUMA node its PCI functions report (sysfs numa_node); -1 is the kernel's "none".
  int32_t numa_node = -1;
  uint32_t pool = 0;  // capacity units shared by all types (0: each type's max_instances alone)
  // Time-sliced vGPU: the first vGPU locks the GPU to its type (the drivers the T4 profile is
  // taken from) or to its framebuffer size (NVIDIA's equal-size mode, the default today: types of
  // one size share the GPU's count for that size). Virtual parents have no such lock.
  enum class Lock { kNone, kType, kFramebuffer };
  Lock lock = Lock::kType;
  std::vector<TypeSpec> types;
  // Mixed-size mode ("Heterogeneous Time-Slice Sizes: Supported"): whether the GPU can be
  // switched to it, and whether it is on when the node comes up (set by the node's setup, after
  // SR-IOV was enabled). A runtime flag: RestoreGpu (VFs re-enabled) clears it.
  bool heterogeneous_capable = false;
  bool heterogeneous = false;
  // MIG: the GPU-instance profiles the GPU offers, whether MIG mode is on (persistent: it
  // survives RestoreGpu) and the GPU instances the node's setup made before anything runs
  // (runtime: RestoreGpu, a VF re-enable, destroys them).
  struct GiProfile {
    uint32_t id = 0;   // NVML's GPU-instance profile id ("GPU Instance Profile ID")
    std::string name;  // "1g.18gb"
    uint64_t framebuffer_mib = 0;
    uint32_t max_count = 0;  // GPU instances of this profile one GPU holds at most
    // Compute slices one instance takes (the N of "Ng"; MIG user guide, "Supported MIG Profiles":
    // a 1g profile has 1/7 of an A100's or H100's SMs, a 2g 2/7).
    uint32_t slices = 1;
  };
  std::vector<GiProfile> gi_profiles;
  // The GPU's compute slices: its GPU instances' slices add up to at most this many, whatever
  // each profile's own count allows (7 on A100/H100/H200, 4 on RTX PRO 6000 Blackwell).
  uint32_t gpu_slices = 0;
  bool mig = false;
  std::vector<uint32_t> initial_gpu_instances;  // GI profile ids, made in order at layout
};

struct NodeProfile {
  std::string name;
  std::string summary;
  std::vector<GpuSpec> gpus;
  // /sys/module/nvidia/version: the host's vGPU manager (empty: no NVIDIA driver, as with mtty).
  // The built-in NVIDIA profiles carry an R550 (vGPU 17) manager version.
  std::string host_driver_version;
};

// Built-in profiles: "t4x2", "t4x2-equal-size", "a100-sriov", "h200-vfio", "h200-mig",
// "l40s-vfio", "rtxpro6000-mig", "mtty", "mixed". sim/README.md gives each one's sources.
std::vector<std::string> ProfileNames();
Result<NodeProfile> ProfileByName(std::string_view name);

// File-system operations the fault injector can fail.
enum class Op { kRead, kWrite, kList, kReadLink };

class KernelModel : public mdev::SysfsIo {
 public:
  // Lays out the profile's tree under `root` (created; must be empty or absent).
  static Result<std::unique_ptr<KernelModel>> Create(fs::path root, NodeProfile profile);

  const fs::path& root() const { return root_; }
  const NodeProfile& profile() const { return profile_; }

  // SysfsIo. Writes to create/remove/current_vgpu_type act as the driver would; writes to any
  // other attribute fail as a read-only sysfs attribute does (EACCES).
  Result<std::string> ReadFile(const fs::path& path) override;
  Status WriteFile(const fs::path& path, std::string_view data) override;
  Result<std::vector<std::string>> ListDir(const fs::path& path) override;
  Result<fs::path> ReadLink(const fs::path& path) override;
  Result<fs::path> Canonical(const fs::path& path) override;
  bool Exists(const fs::path& path) override;
  bool IsDirectory(const fs::path& path) override;

  // What open(2) of `path` for reading or writing would answer, as kernfs decides it before any
  // read or write: ENOENT when absent, EISDIR when writing a directory, EACCES when reading a
  // write-only attribute (`create`, `remove`) or writing one the driver has no store() for.
  // The FUSE simulator's open() asks this; ReadFile/WriteFile apply the same rules.
  Status CheckOpen(const fs::path& path, bool for_write);

  // --- Test and simulator controls ---
  // A vGPU held open (a VM attached): removing it fails with EBUSY until released.
  void SetBusy(const std::string& vgpu_id, bool busy);
  // The next `times` operations `op` on a path ending in `path_suffix` fail with `err` (and
  // change nothing); times < 0 fails them until ClearFaults. kReadLink also covers Canonical.
  void InjectFault(Op op, std::string path_suffix, int err, int times = 1);
  void ClearFaults();
  // The GPU (and its VFs and vGPUs) disappears from sysfs, as on hot-unplug or driver unbind;
  // RestoreGpu brings it back empty.
  Status RemoveGpu(const std::string& address);
  Status RestoreGpu(const std::string& address);
  // Existing vGPU ids (UUIDs, or VF addresses for vendor VFIO), for assertions.
  std::vector<std::string> VgpuIds() const;
  // Existing vGPUs with where they sit and whether they are held, for the simulator's state file.
  struct VgpuInfo {
    std::string id;
    std::string parent;
    std::string type;
    bool busy = false;
  };
  std::vector<VgpuInfo> Vgpus() const;
  // Called, under the model's lock, with each path (relative to the root, such as
  // "sys/bus/mdev/devices/<uuid>") just before the model deletes it and everything below it: a
  // vGPU removed, a GPU unplugged. The FUSE simulator uses it to make the kernel forget the
  // entries it cached. Empty: none.
  using RemovalHook = std::function<void(const fs::path& relative)>;
  void SetRemovalHook(RemovalHook hook);
  // Whether the profile's GPU at `address` is plugged in (false after RemoveGpu, or if unknown).
  bool GpuPresent(const std::string& address) const;

  // --- Modes the node's administrator sets (nvidia-smi / NVML on a real host) ---
  // `nvidia-smi vgpu -i <gpu> -shm 0|1`: EBUSY while the GPU carries a vGPU ("In use by another
  // client"), EOPNOTSUPP where the GPU cannot or MIG is on (the field reads N/A there).
  Status SetHeterogeneous(const std::string& address, bool on);
  // `nvidia-smi -i <gpu> -mig 0|1`: EBUSY while the GPU carries a vGPU or a GPU instance, or
  // while its VFs are enabled (the measured order: -mig 1 before sriov-manage -e; here a
  // vendor-VFIO or SR-IOV GPU's VFs are always enabled, so only non-SR-IOV GPUs switch).
  // EOPNOTSUPP on a GPU without MIG.
  Status SetMig(const std::string& address, bool on);
  // `nvidia-smi mig -i <gpu> -cgi <profile>`: the new GPU instance's id. EINVAL for a profile the
  // GPU has not, EOPNOTSUPP while MIG is off, ENOSPC when the profile's count is reached.
  Result<uint32_t> CreateGpuInstance(const std::string& address, uint32_t profile_id);
  // `-dgi`: EBUSY while a vGPU runs in it, ENOENT for an unknown id.
  Status DestroyGpuInstance(const std::string& address, uint32_t gi_id);

  // What only NVML / nvidia-smi show, written by the model to kModesFile under the root after
  // every change (write-to-temp + rename), for the simulator's mode probe
  // (mdev/gpu_mode_probe.h). JSON; docs/simulator.md gives the format.
  static constexpr const char* kModesFile = "sim-gpu-modes.json";

 private:
  // A file the driver reacts to when written.
  enum class Action { kCreate, kRemove, kCurrentType };
  struct Attribute {
    Action action;
    size_t gpu;          // index into profile_.gpus
    std::string parent;  // parent device name (GPU, VF or virtual device)
    std::string type;    // kCreate: the type id
    std::string vgpu;    // kRemove: the mdev's UUID
  };
  struct Vgpu {
    std::string id;  // UUID, or the VF address for vendor VFIO
    size_t gpu;
    std::string parent;
    std::string type;
    uint32_t iommu_group = 0;  // mdev only: a fresh group; vendor VFIO uses the VF's
    bool busy = false;
    std::optional<uint32_t> placement;     // its first slot, in mixed-size mode
    std::optional<uint32_t> gpu_instance;  // the GPU instance's id, for a MIG-backed type
  };
  struct GpuInstance {
    uint32_t id = 0;
    uint32_t profile = 0;
  };
  struct GpuState {
    bool present = true;
    bool heterogeneous = false;
    bool mig = false;
    std::vector<GpuInstance> gpu_instances;
    std::string bridge;                      // root port above the GPU ("0000:00:02.0")
    std::vector<std::string> vfs;            // SR-IOV VF addresses, virtfn order
    std::map<std::string, uint32_t> groups;  // PCI function -> IOMMU group
  };
  struct Fault {
    Op op;
    std::string suffix;
    int err;
    int times;
  };

  KernelModel(fs::path root, fs::path real_root, NodeProfile profile);

  // Layout (kernel_layout.cpp).
  Status LayoutNode();
  // The kernel around the GPUs (kernel_host.cpp): loaded modules, the IOMMU, the command line.
  Status LayoutHostKernel(bool any_mdev);
  Status LayoutGpu(size_t gpu);
  Status LayoutPciFunction(size_t gpu, const std::string& address, bool is_vf);
  Status LayoutMdevTypes(size_t gpu, const std::string& parent);
  Status LayoutVendorVfioFiles(size_t gpu, const std::string& vf);
  Status LayoutMdev(const Vgpu& vgpu);
  void UnlayoutMdev(const Vgpu& vgpu);
  void UnlayoutGpu(size_t gpu);
  void RemoveFromTree(const fs::path& path);  // tells removal_hook_ first
  fs::path DeviceDir(size_t gpu, const std::string& function) const;
  fs::path SysDir() const { return real_root_ / "sys"; }
  uint32_t AllocateIommuGroup();

  // Driver rules: capacity (kernel_capacity.cpp), the writes (kernel_model.cpp), the counts and
  // the modes file rewritten after each change (kernel_counts.cpp).
  std::vector<std::string> ParentsOf(size_t gpu) const;
  uint32_t Available(size_t gpu, const std::string& parent, const TypeSpec& type) const;
  // Mixed-size mode: the lowest start of `type` whose slots are free; nullopt when none.
  std::optional<uint32_t> LowestPlacement(size_t gpu, const TypeSpec& type) const;
  // How many more vGPUs of `type` the free slots hold, each at the lowest creatable placement.
  uint32_t FreePlacements(size_t gpu, const TypeSpec& type) const;
  // MIG: the GPU instance a new vGPU of `type` goes to (the lowest id with room); nullopt: none.
  std::optional<uint32_t> FittingGpuInstance(size_t gpu, const TypeSpec& type) const;
  uint32_t GpuInstanceRoom(size_t gpu, const TypeSpec& type) const;
  uint32_t RoomInGpuInstance(size_t gpu, uint32_t gi, const TypeSpec& type) const;
  bool GpuHasVgpu(size_t gpu) const;
  void Place(size_t gpu, const TypeSpec& type, Vgpu& vgpu) const;
  Status WriteModes();
  const TypeSpec* FindType(size_t gpu, std::string_view type_id) const;
  Status Refresh(size_t gpu);
  Status WriteCreate(const Attribute& attr, const fs::path& path, std::string_view data);
  Status WriteRemove(const Attribute& attr, const fs::path& path, std::string_view data);
  Status WriteCurrentType(const Attribute& attr, const fs::path& path, std::string_view data);
  Status TakeFault(Op op, const fs::path& path);
  // CheckOpen with the lock held; on success `real` is the path with links resolved.
  Status CheckOpenLocked(const fs::path& path, bool for_write, fs::path* real) const;
  std::optional<size_t> GpuByAddress(const std::string& address) const;

  fs::path root_;
  fs::path real_root_;  // root_ with symlinks resolved: what canonical paths start with
  NodeProfile profile_;

  mutable std::mutex mutex_;
  std::vector<GpuState> gpus_;
  std::map<std::string, Vgpu> vgpus_;
  std::map<fs::path, Attribute> attributes_;  // canonical path -> what a write does
  // Driver outputs computed at read time: vendor VFIO's nvidia/{placement_id,gpu_instance_id}
  // (ENXIO while the VF has no vGPU) and an mdev's nvidia/placement_id ("Not Applicable" until the
  // vGPU is in use). Canonical path -> what it shows.
  struct Output {
    std::string vgpu;       // the VF address (vendor VFIO) or the mdev's UUID
    bool placement = true;  // false: gpu_instance_id
    bool mdev = false;
  };
  std::map<fs::path, Output> outputs_;
  Result<std::string> ReadOutput(const Output& output) const;
  std::vector<Fault> faults_;
  RemovalHook removal_hook_;
};

}  // namespace kvgpu::sim
