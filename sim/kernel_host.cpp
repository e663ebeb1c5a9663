// The kernel around the GPUs, as a prepared vGPU host shows it: the modules VFIO and the NVIDIA
// vGPU manager load (/sys/module), an Intel IOMMU with interrupt remapping (/sys/class/iommu) and
// the command line that turned it on (/proc/cmdline). `vgpuctl doctor` reads these; each file
// holds what the real kernel's does, so a test can break one and see only that finding.
#include <string>
#include <utility>

#include "sim/kernel_model.h"
#include "sim/model_internal.h"
#include "sim/tree.h"

namespace kvgpu::sim {

namespace {

// An Intel VT-d unit's capability registers as Linux 6.1 prints them (drivers/iommu/intel/
// iommu.c, cap_show/ecap_show: "%llx"). ECAP bit 3 (IR, ecap_ir_support in iommu.h) says the unit
// can remap interrupts; these values are shaped like a server's and have it set.
constexpr const char* kDmarCap = "d2008c40660462";
constexpr const char* kDmarEcap = "f050da";

}  // namespace

Status KernelModel::LayoutHostKernel(bool any_mdev) {
  fs::path sys = SysDir();
  fs::path scratch = real_root_ / kScratchDir;
  auto put = [&](const fs::path& file, const std::string& content) {
    if (Status s = tree::MakeDirs(file.parent_path()); !s.ok()) return s;
    return tree::PutFile(file, content, tree::kReadOnly, scratch);
  };
  // VFIO: the core, the PCI driver and the type1 IOMMU backend (parameters as the module has them).
  std::vector<std::pair<std::string, std::string>> files = {
      {"module/vfio/parameters/enable_unsafe_noiommu_mode", "N\n"},
      {"module/vfio_pci/parameters/disable_idle_d3", "N\n"},
      {"module/vfio_iommu_type1/parameters/allow_unsafe_interrupts", "N\n"},
  };
  // The IOMMU unit whose groups the PCI GPUs sit in; a node of only virtual parents (the mtty
  // sample, as in the VM lab) has none.
  bool any_pci = false;
  for (const auto& gpu : profile_.gpus) any_pci |= gpu.kind != GpuKind::kVirtual;
  if (any_pci) {
    files.emplace_back("class/iommu/dmar0/intel-iommu/cap", std::string(kDmarCap) + "\n");
    files.emplace_back("class/iommu/dmar0/intel-iommu/ecap", std::string(kDmarEcap) + "\n");
    files.emplace_back("class/iommu/dmar0/intel-iommu/version", "1:0\n");
  }
  // The mdev core; vGPU 17 hosts without any mdev parent do not load it.
  if (any_mdev) files.emplace_back("module/mdev/refcnt", "1\n");
  if (!profile_.host_driver_version.empty()) {
    files.emplace_back("module/nvidia/version", profile_.host_driver_version + "\n");
    files.emplace_back("module/nvidia_vgpu_vfio/refcnt", "0\n");
  }
  for (const auto& [relative, content] : files) {
    if (Status s = put(sys / relative, content); !s.ok()) return s;
  }
  return put(real_root_ / "proc" / "cmdline",
             "BOOT_IMAGE=/boot/vmlinuz-6.1.0-27-amd64 root=/dev/sda1 ro intel_iommu=on iommu=pt\n");
}

}  // namespace kvgpu::sim
