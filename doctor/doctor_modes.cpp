// The doctor's check of what sysfs does not show: each NVIDIA GPU's MIG mode and GPU instances,
// read through the mode probe (mdev/gpu_mode_probe.h). GPU instances are node configuration made
// before the device plugin runs (docs/gpu-shapes.md, "MIG and mixed-size mode are node
// configuration"); a MIG GPU without a fitting one offers no vGPU, and a create there fails EIO
// (cubecos on an RTX PRO 6000, shared/docs/NVIDIA-VGPU-SHAPES.md section 2) [measured].
#include <set>

#include "doctor/doctor_internal.h"

namespace kvgpu::doctor::internal {

namespace {

constexpr const char* kNvidiaVendor = "0x10de";

std::string Ids(const std::set<uint32_t>& ids) {
  std::string out;
  for (uint32_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

// The GI profiles the GPU's MIG-backed types run in, as the probe tells them.
std::set<uint32_t> WantedProfiles(const mdev::GpuShapeFacts& facts) {
  std::set<uint32_t> wanted;
  for (const auto& [id, type] : facts.types) {
    if (type.gi_profile) wanted.insert(*type.gi_profile);
  }
  return wanted;
}

// Whether the kernel offers any vGPU on the GPU: a type with room, or a vGPU already there.
bool OffersAnything(const mdev::Inventory& inventory, const std::string& gpu) {
  for (const mdev::Parent& parent : inventory.parents) {
    if (parent.physical_gpu != gpu) continue;
    for (const mdev::VgpuType& type : parent.types) {
      if (type.available_instances > 0) return true;
    }
  }
  for (const mdev::Vgpu& vgpu : inventory.vgpus) {
    if (vgpu.physical_gpu == gpu) return true;
  }
  return false;
}

std::string Fix(const std::string& gpu, const std::set<uint32_t>& wanted) {
  const std::string profiles = wanted.empty() ? "<GI profile ids>" : Ids(wanted);
  return "make the GPU instances before the device plugin starts, after the VFs are enabled: "
         "deploy/node-setup/vgpu-modes.sh --mode mig --pf " +
         gpu + " --gi-profiles " + profiles + " (or nvidia-smi mig -i " + gpu + " -cgi " +
         profiles +
         "); every sriov-manage run destroys them, so run it again after one "
         "(docs/gpu-shapes.md)";
}

void CheckGpuModes(NodeView& node, std::vector<Finding>& out) {
  if (!node.HostDriverVersion()) return Skipped(out, "no NVIDIA driver (the nvidia-driver check)");
  const mdev::Inventory* inventory = node.Inventory();
  if (inventory == nullptr) return Skipped(out, "the parents cannot be read (vgpu-parents)");
  const mdev::GpuModeProbe* probe = node.ModeProbe();
  if (probe == nullptr) return Skipped(out, "--gpu-mode-probe none");
  std::set<std::string> gpus;
  for (const mdev::Parent& parent : inventory->parents) {
    if (parent.vendor_id == kNvidiaVendor) gpus.insert(parent.physical_gpu);
  }
  const char* probe_name = mdev::GpuModeProbeChoiceName(node.options().gpu_mode_probe);
  for (const std::string& gpu : gpus) {
    const std::optional<mdev::GpuShapeFacts> facts =
        probe->Probe(gpu, mdev::SysfsTypesOf(*inventory, gpu));
    if (!facts || (!facts->mig && !facts->heterogeneous)) {
      out.push_back({"gpu-mode.unknown", Severity::kInfo,
                     gpu + ": the " + std::string(probe_name) +
                         " probe cannot tell its MIG or mixed-size mode",
                     "the device plugin then goes by the kernel's counts alone", ""});
      continue;
    }
    if (facts->mig != true) continue;
    if (!facts->gpu_instances_known) {
      out.push_back({"gpu-mode.unknown", Severity::kInfo,
                     gpu + ": MIG mode on; the " + std::string(probe_name) +
                         " probe cannot list its GPU instances",
                     "the device plugin then goes by the kernel's counts alone", ""});
      continue;
    }
    const std::set<uint32_t> wanted = WantedProfiles(*facts);
    if (facts->gpu_instances.empty()) {
      out.push_back({"gpu-mode.mig-no-instances", Severity::kError,
                     gpu + ": MIG mode on and no GPU instance",
                     "MIG-backed vGPUs run only in GPU instances made before them: this GPU "
                     "offers no vGPU, and a create on it fails (EIO on vendor VFIO)",
                     Fix(gpu, wanted)});
      continue;
    }
    std::set<uint32_t> made;
    for (const auto& gi : facts->gpu_instances) made.insert(gi.profile);
    bool fits = false;
    for (uint32_t profile : made) fits = fits || wanted.contains(profile);
    // Without the types' profiles (a probe that could tie none of them), the kernel's word: a
    // GPU that offers nothing and carries no vGPU has no fitting instance either.
    if (fits || (wanted.empty() && OffersAnything(*inventory, gpu))) continue;
    out.push_back(
        {"gpu-mode.mig-instances-unfit", Severity::kError,
         gpu + ": MIG mode on, GPU instances of profile " + Ids(made) +
             (wanted.empty() ? std::string("; no vGPU type offered")
                             : "; its vGPU types run in profile " + Ids(wanted)),
         "no vGPU type fits the GPU instances made: this GPU offers no vGPU",
         "destroy the instances (nvidia-smi mig -i " + gpu + " -dgi) and " + Fix(gpu, wanted)});
  }
}

}  // namespace

std::vector<Check> ModeChecks() {
  return {{"gpu-modes", CheckGpuModes}};
}

}  // namespace kvgpu::doctor::internal
