// The doctor's kernel checks: IOMMU, interrupt remapping, VFIO, the NVIDIA host driver and vGPU
// manager, and the vGPU parents (mdev types, SR-IOV VFs, vendor-VFIO VFs). Sources of each rule
// are beside it; docs/vgpuctl.md lists them.
#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "doctor/doctor_internal.h"

namespace kvgpu::doctor::internal {

namespace {

// The words of /proc/cmdline that decide the IOMMU and interrupt remapping.
std::vector<std::string> CmdlineWords(NodeView& node, const std::vector<std::string>& prefixes) {
  std::vector<std::string> hits;
  std::istringstream words(node.Read("/proc/cmdline").value_or(""));
  for (std::string word; words >> word;) {
    for (const auto& prefix : prefixes) {
      if (word.rfind(prefix, 0) == 0) hits.push_back(word);
    }
  }
  return hits;
}

std::string Joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words) out += (out.empty() ? "" : " ") + word;
  return out.empty() ? "(none of them)" : out;
}

// Docs/install.md step 1: VFIO refuses devices without an IOMMU. Seen in sysfs as the IOMMU
// class (dmar* on Intel, ivhd* on AMD; drivers/iommu/iommu-sysfs.c) and the groups.
void CheckIommu(NodeView& node, std::vector<Finding>& out) {
  auto units = node.ListSys("class/iommu");
  std::string flags = Joined(CmdlineWords(node, {"intel_iommu=", "amd_iommu=", "iommu="}));
  if (units.empty()) {
    out.push_back({"iommu.off", Severity::kError,
                   "no IOMMU in " + node.Sys("class/iommu").string() +
                       "; IOMMU words on /proc/cmdline: " + flags,
                   "VFIO attaches a vGPU to a VM only through an IOMMU: no vGPU can be used",
                   "enable VT-d (Intel) or AMD-Vi/IOMMU in the firmware setup, add "
                   "'intel_iommu=on iommu=pt' (Intel) or 'amd_iommu=on iommu=pt' (AMD) to "
                   "GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot"});
    return;
  }
  if (node.ListSys("kernel/iommu_groups").empty()) {
    out.push_back({"iommu.no-groups", Severity::kError,
                   "IOMMU units " + Joined(units) + " but no group in " +
                       node.Sys("kernel/iommu_groups").string() +
                       "; IOMMU words on /proc/cmdline: " + flags,
                   "without IOMMU groups there is no /dev/vfio/<group> to hand to a Kata VM",
                   "remove 'iommu=off' or '*_iommu=off' from the kernel command line "
                   "(/etc/default/grub), run update-grub and reboot"});
  }
}

// Interrupt remapping keeps a VM's device from injecting arbitrary interrupts; VFIO type1 refuses
// devices without it unless allow_unsafe_interrupts is set (drivers/vfio/vfio_iommu_type1.c).
// Intel: ECAP bit 3 (IR, ecap_ir_support in drivers/iommu/intel/iommu.h) is the hardware's
// support; "intremap=off"/"nointremap" turn it off (Documentation/admin-guide/kernel-parameters).
// Whether the kernel enabled it is only in dmesg; these are what sysfs and the command line show.
void CheckInterruptRemapping(NodeView& node, std::vector<Finding>& out) {
  auto units = node.ListSys("class/iommu");
  if (units.empty()) return Skipped(out, "no IOMMU (the iommu check)");
  auto off = CmdlineWords(node, {"intremap=off", "intremap=nosid", "nointremap"});
  if (!off.empty()) {
    out.push_back(
        {"irq-remap.disabled", Severity::kError, "/proc/cmdline has " + Joined(off),
         "without interrupt remapping VFIO refuses the vGPU (or, with "
         "allow_unsafe_interrupts, a guest can inject interrupts into the host)",
         "remove " + Joined(off) +
             " from GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot"});
  }
  for (const auto& unit : units) {
    auto ecap = node.ReadSys("class/iommu" / fs::path(unit) / "intel-iommu/ecap");
    if (!ecap) continue;  // AMD units: no such register in sysfs
    unsigned long long bits = 0;
    try {
      bits = std::stoull(*ecap, nullptr, 16);
    } catch (const std::exception&) {
      continue;
    }
    if ((bits >> 3 & 1) == 0) {
      out.push_back({"irq-remap.unsupported", Severity::kError,
                     unit + " ECAP " + *ecap + " (" +
                         node.Sys("class/iommu" / fs::path(unit) / "intel-iommu/ecap").string() +
                         "): bit 3, interrupt remapping, is clear",
                     "this IOMMU cannot remap interrupts, so VFIO refuses to assign devices",
                     "enable interrupt remapping (often 'X2APIC' or 'Interrupt Remapping') in the "
                     "firmware setup, or use a server whose IOMMU supports it"});
    }
  }
  auto unsafe = node.ReadSys("module/vfio_iommu_type1/parameters/allow_unsafe_interrupts");
  if (unsafe && *unsafe == "Y") {
    out.push_back({"irq-remap.unsafe-allowed", Severity::kWarning,
                   "vfio_iommu_type1 allow_unsafe_interrupts=Y",
                   "a VM's device may raise interrupts the host never granted it (MSI attacks)",
                   "remove 'allow_unsafe_interrupts=1' from /etc/modprobe.d/*.conf and reload "
                   "vfio_iommu_type1 (or reboot), after enabling interrupt remapping"});
  }
}

// The VFIO modules Kata's QEMU needs (docs/install.md step 1; /sys/module/<name> is there once a
// module is loaded, and for built-in ones that have parameters).
void CheckVfio(NodeView& node, std::vector<Finding>& out) {
  for (const char* module : {"vfio", "vfio_pci", "vfio_iommu_type1"}) {
    if (node.SysExists(fs::path("module") / module)) continue;
    out.push_back({"vfio.module-missing", Severity::kError,
                   std::string(module) + " is not loaded (" +
                       node.Sys(fs::path("module") / module).string() + " absent)",
                   "QEMU attaches vGPUs through VFIO; without it no vGPU reaches a VM",
                   std::string("modprobe ") + module + " and add '" + module +
                       "' to /etc/modules-load.d/kata-vgpu.conf so it loads at boot"});
  }
  // The mdev core carries the mdev bus; vendor-VFIO-only nodes (vGPU 17+) do not need it.
  bool vf_only =
      node.HasFlavour(mdev::Flavour::kVendorVfio) && !node.HasFlavour(mdev::Flavour::kMdev);
  if (!vf_only && !node.SysExists("module/mdev") && !node.SysExists("bus/mdev")) {
    out.push_back({"vfio.mdev-missing", Severity::kError,
                   "the mdev core is not loaded (" + node.Sys("module/mdev").string() + " and " +
                       node.Sys("bus/mdev").string() + " absent)",
                   "mdev vGPUs exist only on the mdev bus; the device plugin can create none",
                   "modprobe mdev (the NVIDIA vGPU manager's nvidia_vgpu_vfio normally loads it) "
                   "and add 'mdev' to /etc/modules-load.d/kata-vgpu.conf"});
  }
}

// Kata runs every pod as a KVM guest and talks to its agent over vsock: the same two device
// nodes the device plugin's readiness gate requires (deviceplugin/publish/node_readiness.cpp).
void CheckKvm(NodeView& node, std::vector<Finding>& out) {
  struct Need {
    const char* path;
    const char* why;
    const char* fix;
  };
  for (const auto& need : {
           Need{"/dev/kvm", "Kata starts every pod as a KVM virtual machine",
                "enable VT-x/AMD-V in the firmware and 'modprobe kvm_intel' (or kvm_amd); add it "
                "to /etc/modules-load.d/kata-vgpu.conf"},
           Need{"/dev/vhost-vsock", "the Kata runtime reaches its agent in the VM over vsock",
                "modprobe vhost_vsock and add it to /etc/modules-load.d/kata-vgpu.conf"},
       }) {
    std::error_code ec;
    if (fs::exists(node.Path(need.path), ec)) continue;
    out.push_back({"kvm.device-missing", Severity::kError,
                   node.Path(need.path).string() + " is missing", need.why, need.fix});
  }
}

// docs/install.md step 2: NVIDIA's vGPU host driver; nouveau must not hold the GPUs.
void CheckNvidiaDriver(NodeView& node, std::vector<Finding>& out) {
  if (node.SysExists("module/nouveau")) {
    out.push_back({"nvidia.nouveau-loaded", Severity::kError,
                   "nouveau is loaded (" + node.Sys("module/nouveau").string() + ")",
                   "nouveau binds the GPUs first, and NVIDIA's vGPU manager then cannot",
                   "echo 'blacklist nouveau' > /etc/modprobe.d/blacklist-nouveau.conf; "
                   "update-initramfs -u; reboot"});
  }
  auto version = node.HostDriverVersion();
  if (!version) {
    out.push_back({"nvidia.driver-missing", Severity::kError,
                   "the NVIDIA host driver is not loaded (" +
                       node.Sys("module/nvidia/version").string() + " absent)",
                   "without NVIDIA's vGPU manager the GPUs offer no vGPU types",
                   "install the NVIDIA vGPU manager (host driver) for your GPUs from the NVIDIA "
                   "Licensing Portal (NVIDIA-Linux-x86_64-<version>-vgpu-kvm.run) and reboot"});
    return;
  }
  if (ParseVersion(*version).size() < 2) {
    out.push_back({"nvidia.version-unreadable", Severity::kWarning,
                   "/sys/module/nvidia/version is '" + *version + "'",
                   "the guest driver's branch cannot be matched against the host's",
                   "check the driver with 'modinfo nvidia'; reinstall the vGPU manager"});
  }
}

// The vGPU manager proper: NVIDIA's nvidia_vgpu_vfio module serves both mdev types and the
// vendor-specific VFIO VFs (docs/mdev-library.md).
void CheckVgpuManager(NodeView& node, std::vector<Finding>& out) {
  if (!node.HostDriverVersion()) return Skipped(out, "no NVIDIA driver (the nvidia-driver check)");
  if (node.SysExists("module/nvidia_vgpu_vfio")) return;
  out.push_back({"nvidia.vgpu-manager-missing", Severity::kError,
                 "nvidia is loaded but nvidia_vgpu_vfio is not (" +
                     node.Sys("module/nvidia_vgpu_vfio").string() + " absent)",
                 "the plain (non-vGPU) NVIDIA driver, or a vGPU manager that failed to start, "
                 "offers no vGPU types",
                 "install the vGPU manager package (…-vgpu-kvm.run, not the data-center driver), "
                 "then 'modprobe nvidia_vgpu_vfio' and 'systemctl status nvidia-vgpu-mgr'"});
}

struct PhysicalFunction {
  std::string address;
  std::string total, enabled;
};

// NVIDIA PCI functions that can have SR-IOV VFs (sriov_totalvfs > 0), with sriov_numvfs.
std::vector<PhysicalFunction> NvidiaSriovFunctions(NodeView& node) {
  std::vector<PhysicalFunction> out;
  for (const auto& address : node.ListSys("bus/pci/devices")) {
    fs::path dir = "bus/pci/devices" / fs::path(address);
    if (node.ReadSys(dir / "vendor").value_or("") != "0x10de") continue;
    auto total = node.ReadSys(dir / "sriov_totalvfs");
    if (!total || *total == "0") continue;
    out.push_back({address, *total, node.ReadSys(dir / "sriov_numvfs").value_or("0")});
  }
  return out;
}

// docs/install.md step 2: the vGPU types the node offers; on SR-IOV GPUs (Ampere and later) only
// once NVIDIA's sriov-manage enabled the VFs; vendor-VFIO VFs take their type through a writable
// nvidia/current_vgpu_type (NVIDIA/kubevirt-gpu-device-plugin PR #192, docs/mdev-library.md).
void CheckParents(NodeView& node, std::vector<Finding>& out) {
  if (!node.HostDriverVersion()) return Skipped(out, "no NVIDIA driver (the nvidia-driver check)");
  bool disabled = false;
  for (const auto& pf : NvidiaSriovFunctions(node)) {
    if (pf.enabled != "0") continue;
    disabled = true;
    out.push_back({"sriov.vfs-disabled", Severity::kError,
                   pf.address + ": sriov_numvfs 0 of sriov_totalvfs " + pf.total,
                   "on SR-IOV GPUs every vGPU lives on a VF; with none enabled the GPU offers "
                   "no vGPU types",
                   "/usr/lib/nvidia/sriov-manage -e " + pf.address +
                       " (or -e ALL), and run it at every boot from a systemd unit ordered "
                       "before kubelet: VFs do not survive a reboot"});
  }
  const mdev::Inventory* inventory = node.Inventory();
  if (inventory == nullptr) {
    out.push_back({"parents.unreadable", Severity::kError,
                   "the vGPU parents under " + node.Sys("").string() + " could not be read",
                   "the device plugin reads the same files and would fail the same way",
                   "run 'vgpuctl types' for the kernel's exact answer"});
    return;
  }
  if (inventory->parents.empty() && !disabled) {
    out.push_back({"parents.none", Severity::kError,
                   "no mdev parent in " + node.Sys("class/mdev_bus").string() +
                       " and no VF with nvidia/creatable_vgpu_types",
                   "the device plugin has no vGPU type to advertise",
                   "check 'systemctl status nvidia-vgpu-mgr' and that the GPU is one NVIDIA's "
                   "vGPU release supports; 'vgpuctl types' lists what the kernel offers"});
  }
  for (const auto& parent : inventory->parents) {
    if (parent.flavour != mdev::Flavour::kVendorVfio) continue;
    fs::path file =
        node.Sys("bus/pci/devices" / fs::path(parent.name) / "nvidia/current_vgpu_type");
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && (st.st_mode & S_IWUSR) != 0) continue;
    out.push_back({"vfio-vf.type-not-writable", Severity::kError,
                   file.string() + " is missing or not writable",
                   "the device plugin makes a vGPU by writing its type id there",
                   "reload the vGPU manager (the attribute is the driver's: never chmod it); "
                   "check that kernel and manager are vGPU 17+ on Linux 6.8 or later"});
  }
}

}  // namespace

std::vector<Check> KernelChecks() {
  return {{"iommu", CheckIommu},
          {"interrupt-remapping", CheckInterruptRemapping},
          {"vfio", CheckVfio},
          {"kvm", CheckKvm},
          {"nvidia-driver", CheckNvidiaDriver},
          {"vgpu-manager", CheckVgpuManager},
          {"vgpu-parents", CheckParents}};
}

}  // namespace kvgpu::doctor::internal
