// Built-in node profiles. Type ids, names and GPU ids are NVIDIA's own (sources below); where a
// value is not published, the choice is marked as ours.
//
// Sources: kubevirt tests (nvidia-222 "GRID T4-1B" and its description line), Kata's NVIDIA GPU
// passthrough doc (A100 0000:41:00.0, VF 0000:41:00.4, nvidia-692..698 "GRID A100D-*C"),
// NVIDIA/kubevirt-gpu-device-plugin PR #192 (H200 vendor VFIO: 1428 "NVIDIA H200X-141C",
// 1414 "NVIDIA H200X-1-18C"), vgpuConfig.xml of driver 510.47.03 as tabulated by the
// vgpu_unlock community (the other T4 type ids, frame buffers, heads, resolutions, frame-rate
// limits), and the kernel's samples/vfio-mdev/mtty.c (mtty types and their port pool).
#include <string>

#include "sim/kernel_model.h"

namespace kvgpu::sim {

namespace {

// A vGPU 17.x (R550) manager's version: its branch is what the doctor matches the guest driver to.
constexpr const char* kHostDriver = "550.90.05";
// A vGPU 19.0 (R580) manager: the release notes' Manager version.
constexpr const char* kCurrentHostDriver = "580.65.05";

// A type without a description (mtty, vendor VFIO).
TypeSpec Plain(std::string id, std::string name, uint32_t max_instances, uint32_t cost = 1) {
  TypeSpec type;
  type.id = std::move(id);
  type.name = std::move(name);
  type.max_instances = max_instances;
  type.cost = cost;
  return type;
}

// One NVIDIA mdev type with its description in the driver's own format.
TypeSpec Nvidia(int number, std::string name, int heads, int frl, uint32_t framebuffer_mib,
                std::string resolution, uint32_t max_instance) {
  TypeSpec type;
  type.id = "nvidia-" + std::to_string(number);
  type.name = std::move(name);
  type.description = "num_heads=" + std::to_string(heads) + ", frl_config=" + std::to_string(frl) +
                     ", framebuffer=" + std::to_string(framebuffer_mib) +
                     "M, max_resolution=" + resolution +
                     ", max_instance=" + std::to_string(max_instance);
  type.framebuffer_mib = framebuffer_mib;
  type.max_instances = max_instance;
  return type;
}

// Tesla T4 (16 GB, device 0x1eb8): B, A, Q and C series, as the vGPU 11..16 drivers list them.
GpuSpec TeslaT4(std::string address) {
  GpuSpec gpu;
  gpu.address = std::move(address);
  gpu.kind = GpuKind::kMdevPci;
  gpu.device_id = "0x1eb8";
  gpu.types = {
      Nvidia(222, "GRID T4-1B", 4, 45, 1024, "5120x2880", 16),
      Nvidia(223, "GRID T4-2B", 4, 45, 2048, "5120x2880", 8),
      Nvidia(225, "GRID T4-1A", 1, 60, 1024, "1280x1024", 16),
      Nvidia(228, "GRID T4-8A", 1, 60, 8192, "1280x1024", 2),
      Nvidia(230, "GRID T4-1Q", 4, 60, 1024, "5120x2880", 16),
      Nvidia(231, "GRID T4-2Q", 4, 60, 2048, "7680x4320", 8),
      Nvidia(232, "GRID T4-4Q", 4, 60, 4096, "7680x4320", 4),
      Nvidia(233, "GRID T4-8Q", 4, 60, 8192, "7680x4320", 2),
      Nvidia(234, "GRID T4-16Q", 4, 60, 16384, "7680x4320", 1),
      Nvidia(319, "GRID T4-4C", 1, 60, 4096, "4096x2160", 4),
      Nvidia(320, "GRID T4-8C", 1, 60, 8192, "4096x2160", 2),
      Nvidia(321, "GRID T4-16C", 1, 60, 16384, "4096x2160", 1),
  };
  return gpu;
}

// The same T4 under a current vGPU manager in equal-size mode, NVIDIA's default: the first vGPU
// locks the GPU to its framebuffer size and any type of that size may join (T4-1B beside T4-1Q,
// up to 16 of 1024 MiB in all). Sources: NVIDIA's user guide text on equal-size mode, seen through
// a mirror, and DC-3Q beside DC-3A measured on an RTX PRO 6000 Blackwell with driver 580.x
// (bigstack-oss/cubecos#1316) [measured there]; that a T4 under R580 mixes series of one size the
// same way is our inference [unverified]. Each type's count is its max_instance less the vGPUs of
// its size, which holds for the T4's types: max_instance is 16 GiB over the size for every one.
GpuSpec TeslaT4EqualSize(std::string address) {
  GpuSpec gpu = TeslaT4(std::move(address));
  gpu.lock = GpuSpec::Lock::kFramebuffer;
  return gpu;
}

// A100 80GB PCIe (0x20b5) with SR-IOV enabled by sriov-manage: every VF an mdev parent for the
// time-sliced A100D C-series types. 20 VFs: enough for 20 x A100D-4C (ours: the VF count).
GpuSpec A100Sriov(std::string address) {
  GpuSpec gpu;
  gpu.address = std::move(address);
  gpu.kind = GpuKind::kSriovMdev;
  gpu.device_id = "0x20b5";
  gpu.num_vfs = 20;
  gpu.types = {
      Nvidia(692, "GRID A100D-4C", 1, 60, 4096, "4096x2160", 20),
      Nvidia(693, "GRID A100D-8C", 1, 60, 8192, "4096x2160", 10),
      Nvidia(694, "GRID A100D-10C", 1, 60, 10240, "4096x2160", 8),
      Nvidia(695, "GRID A100D-16C", 1, 60, 16384, "4096x2160", 5),
      Nvidia(696, "GRID A100D-20C", 1, 60, 20480, "4096x2160", 4),
      Nvidia(697, "GRID A100D-40C", 1, 60, 40960, "4096x2160", 2),
      Nvidia(698, "GRID A100D-80C", 1, 60, 81920, "4096x2160", 1),
  };
  return gpu;
}

// A vendor-VFIO type with the fields the driver's listing lacks (framebuffer, counts) filled in.
TypeSpec Vfio(std::string id, std::string name, uint64_t framebuffer_mib, uint32_t max_instances) {
  TypeSpec type = Plain(std::move(id), std::move(name), max_instances);
  type.device_api.clear();  // no mdev type directory, so no device_api file
  type.framebuffer_mib = framebuffer_mib;
  return type;
}

TypeSpec MigBacked(std::string id, std::string name, uint64_t framebuffer_mib,
                   uint32_t max_instances, uint32_t gi_profile, uint32_t max_per_gi) {
  TypeSpec type = Vfio(std::move(id), std::move(name), framebuffer_mib, max_instances);
  type.gi_profile = gi_profile;
  type.max_per_gi = max_per_gi;
  return type;
}

// The H200's MIG facts, shared by both H200 profiles (tags as in docs/gpu-shapes.md): GPU-instance
// profiles 1g.18gb (7 per GPU, 1 compute slice) and 2g.35gb (3 per GPU, 2 slices) of 7 slices:
// NVIDIA's MIG user guide, "Supported MIG Profiles", H200 table [doc]; their ids 19 and 14 are
// those `nvidia-smi mig -lgip` gives the 1g/2g profiles on A100/H100 [unverified].
void H200MigFacts(GpuSpec& gpu) {
  gpu.gi_profiles = {{19, "1g.18gb", 18432, 7, 1}, {14, "2g.35gb", 35840, 3, 2}};
  gpu.gpu_slices = 7;
}

// H200 SXM 141 GB (0x2335) under vGPU 17+ on kernel >= 6.8: vendor-specific VFIO, no mdev bus,
// MIG off. The full-GPU time-sliced type (1 per GPU) and the 1-slice MIG-backed type, which a GPU
// offers only with MIG on: a GPU runs time-sliced or MIG-backed vGPUs, never both (vSphere's
// per-GPU vGPU mode is one of sameSize, mixedSize, multiInstanceGpu; NVIDIA AI Enterprise,
// "MIG-Backed vGPU": each such vGPU runs in a GPU instance) [doc], and with MIG off no GPU
// instance exists. 16 VFs and the device id are ours; the type ids and names are from the
// published sysfs listing (NVIDIA/kubevirt-gpu-device-plugin PR #192).
GpuSpec H200VendorVfio(std::string address) {
  GpuSpec gpu;
  gpu.address = std::move(address);
  gpu.kind = GpuKind::kVendorVfio;
  gpu.device_id = "0x2335";
  gpu.num_vfs = 16;
  H200MigFacts(gpu);
  gpu.types = {Vfio("1428", "NVIDIA H200X-141C", 144384, 1),
               MigBacked("1414", "NVIDIA H200X-1-18C", 18432, 7, 19, 1)};
  return gpu;
}

// H200 141 GB in MIG mode, vendor VFIO, with GPU instances made before the node's daemons run.
// Sources (tags as in docs/gpu-shapes.md):
//  - 1414 "NVIDIA H200X-1-18C", 1428 "NVIDIA H200X-141C": the published VF listing
//    (NVIDIA/kubevirt-gpu-device-plugin PR #192) [claim];
//  - GPU-instance profiles and slices: H200MigFacts;
//  - one MIG-backed vGPU per GPU instance for C-series types (vgpu-device-manager maps
//    "A100-1-5C: 7" to seven 1g.5gb GIs) [code]; H200X-2-35C and its id 1415 are ours
//    [unverified];
//  - time-sliced types offered nothing while MIG is on [measured, cubecos; claim on mdev];
//  - 16 VFs, the device id and the GIs made (four 1g.18gb, one 2g.35gb) are ours.
GpuSpec H200Mig(std::string address) {
  GpuSpec gpu;
  gpu.address = std::move(address);
  gpu.kind = GpuKind::kVendorVfio;
  gpu.device_id = "0x2335";
  gpu.num_vfs = 16;
  H200MigFacts(gpu);
  gpu.mig = true;
  gpu.initial_gpu_instances = {19, 19, 19, 19, 14};
  gpu.types = {
      Vfio("1428", "NVIDIA H200X-141C", 144384, 1),
      MigBacked("1414", "NVIDIA H200X-1-18C", 18432, 7, 19, 1),
      MigBacked("1415", "NVIDIA H200X-2-35C", 35840, 3, 14, 1),
  };
  return gpu;
}

// L40S 48 GB (no MIG) under vendor VFIO, mixed-size capable. Sources:
//  - no MIG on L40S/L4: NVIDIA's MIG user guide, supported GPUs [doc];
//  - equal-size mode by default, series of one size mixing (L40S-4Q beside L40S-4A) [doc, through
//    a mirror; measured as DC-3Q + DC-3A on an RTX PRO 6000];
//  - placements as fixed start slots, NVML's placementSize / placementIds [doc]; the numbers here
//    (48 slots, one per GiB, each type starting at multiples of its size) are ours: NVIDIA does not
//    publish the L40S table [unverified];
//  - type ids 1700.. and 16 VFs per GPU are ours [unverified]; max counts are 48 GiB over the size.
GpuSpec L40sVfio(std::string address, bool heterogeneous) {
  GpuSpec gpu;
  gpu.address = std::move(address);
  gpu.kind = GpuKind::kVendorVfio;
  gpu.device_id = "0x26b9";
  gpu.num_vfs = 16;
  gpu.lock = GpuSpec::Lock::kFramebuffer;
  gpu.heterogeneous_capable = true;
  gpu.heterogeneous = heterogeneous;
  auto sized = [](std::string id, std::string name, uint32_t gib) {
    TypeSpec type = Vfio(std::move(id), std::move(name), uint64_t{gib} * 1024, 48 / gib);
    type.placement_size = gib;
    for (uint32_t start = 0; start + gib <= 48; start += gib) type.placement_ids.push_back(start);
    return type;
  };
  gpu.types = {
      sized("1700", "NVIDIA L40S-4Q", 4),   sized("1701", "NVIDIA L40S-4A", 4),
      sized("1702", "NVIDIA L40S-8Q", 8),   sized("1703", "NVIDIA L40S-12Q", 12),
      sized("1704", "NVIDIA L40S-24Q", 24),
  };
  return gpu;
}

// RTX PRO 6000 Blackwell (96 GB) in MIG mode with time-sliced MIG-backed vGPUs, vendor VFIO.
// Sources: bigstack-oss/cubecos `core/modules/config_gpu.cpp` and PRs #1223/#1338, driver
// 580.105.06 [measured]:
//  - GPU-instance profile 47 (1g.24gb, made with +gfx); four per GPU (the MIG user guide lists
//    RTX PRO 6000 Blackwell with 4 GIs [doc]);
//  - DC-1-24Q: GI profile 47, 1 per GI, 4 per card; DC-1-2Q: 12 per GI, 48 per card; DC-1-3Q with
//    DC-1-3A in one GI works, a 6 GiB type into that GI is refused [measured];
//  - DC-1-3Q/3A 8 per GI and DC-1-6Q 4 per GI are 24 GiB over the size [unverified];
//  - DC-3Q 1519, DC-3A 1520 (time-sliced, 32 per card: the measured single-size ceiling) offered
//    nothing while MIG is on [measured]; the MIG-backed ids 1560.. are ours [unverified];
//  - a write with no fitting GI fails EIO [measured];
//  - 48 VFs (enough for 48 DC-1-2Q) and the device id are ours [unverified].
GpuSpec RtxPro6000Mig(std::string address) {
  GpuSpec gpu;
  gpu.address = std::move(address);
  gpu.kind = GpuKind::kVendorVfio;
  gpu.device_id = "0x2bb5";
  gpu.num_vfs = 48;
  gpu.lock = GpuSpec::Lock::kFramebuffer;
  gpu.gi_profiles = {{47, "1g.24gb", 24576, 4, 1}};
  gpu.gpu_slices = 4;
  gpu.mig = true;
  gpu.initial_gpu_instances = {47, 47, 47, 47};
  const char* prefix = "NVIDIA RTX Pro 6000 Blackwell ";
  auto name = [&](const char* type) { return std::string(prefix) + type; };
  gpu.types = {
      Vfio("1519", name("DC-3Q"), 3072, 32),
      Vfio("1520", name("DC-3A"), 3072, 32),
      MigBacked("1560", name("DC-1-2Q"), 2048, 48, 47, 12),
      MigBacked("1561", name("DC-1-3Q"), 3072, 32, 47, 8),
      MigBacked("1562", name("DC-1-3A"), 3072, 32, 47, 8),
      MigBacked("1563", name("DC-1-6Q"), 6144, 16, 47, 4),
      MigBacked("1564", name("DC-1-24Q"), 24576, 4, 47, 1),
  };
  return gpu;
}

// The kernel's mtty sample: a virtual parent, 24 serial ports shared by both types, no
// `description` file, and no one-type rule.
GpuSpec Mtty() {
  GpuSpec gpu;
  gpu.address = "mtty";
  gpu.kind = GpuKind::kVirtual;
  gpu.vendor_id.clear();
  gpu.driver = "mtty";
  gpu.pool = 24;
  gpu.lock = GpuSpec::Lock::kNone;
  gpu.types = {
      Plain("mtty-1", "Single port serial", 24, 1),
      Plain("mtty-2", "Dual port serial", 12, 2),
  };
  return gpu;
}

}  // namespace

std::vector<std::string> ProfileNames() {
  return {"t4x2",      "t4x2-equal-size", "a100-sriov", "h200-vfio", "h200-mig",
          "l40s-vfio", "rtxpro6000-mig",  "mtty",       "mixed"};
}

// Two-socket servers put the PCIe buses of each socket in one half of the bus range; the
// profiles' GPUs at bus 0x3b/0x41 are on socket 0 and those at 0xaf on socket 1 (the layout of
// the dual-socket hosts these addresses come from; a single-socket host would report 0 or -1).
GpuSpec OnNode(GpuSpec gpu, int32_t node) {
  gpu.numa_node = node;
  return gpu;
}

Result<NodeProfile> ProfileByName(std::string_view name) {
  if (name == "t4x2") {
    return NodeProfile{"t4x2",
                       "two Tesla T4, time-sliced vGPU on the mdev bus",
                       {OnNode(TeslaT4("0000:3b:00.0"), 0), OnNode(TeslaT4("0000:af:00.0"), 1)},
                       kHostDriver};
  }
  if (name == "t4x2-equal-size") {
    return NodeProfile{
        "t4x2-equal-size",
        "two Tesla T4 in equal-size mode: types of one framebuffer size share a GPU",
        {OnNode(TeslaT4EqualSize("0000:3b:00.0"), 0), OnNode(TeslaT4EqualSize("0000:af:00.0"), 1)},
        kCurrentHostDriver};
  }
  if (name == "a100-sriov") {
    return NodeProfile{"a100-sriov",
                       "one A100 80GB with SR-IOV VFs as mdev parents",
                       {OnNode(A100Sriov("0000:41:00.0"), 0)},
                       kHostDriver};
  }
  if (name == "h200-vfio") {
    return NodeProfile{"h200-vfio",
                       "one H200 with vendor-specific VFIO VFs, no mdev bus",
                       {OnNode(H200VendorVfio("0000:41:00.0"), 0)},
                       kHostDriver};
  }
  if (name == "h200-mig") {
    return NodeProfile{"h200-mig",
                       "one H200 in MIG mode with GPU instances, vendor-specific VFIO",
                       {OnNode(H200Mig("0000:41:00.0"), 0)},
                       kCurrentHostDriver};
  }
  if (name == "l40s-vfio") {
    return NodeProfile{
        "l40s-vfio",
        "two L40S, vendor-specific VFIO: one equal-size, one in mixed-size mode",
        {OnNode(L40sVfio("0000:3b:00.0", false), 0), OnNode(L40sVfio("0000:af:00.0", true), 1)},
        kCurrentHostDriver};
  }
  if (name == "rtxpro6000-mig") {
    return NodeProfile{"rtxpro6000-mig",
                       "one RTX PRO 6000 Blackwell in MIG mode, time-sliced MIG-backed vGPUs",
                       {OnNode(RtxPro6000Mig("0000:41:00.0"), 0)},
                       kCurrentHostDriver};
  }
  if (name == "mtty") {
    return NodeProfile{"mtty", "the kernel's mtty sample driver", {Mtty()}, ""};
  }
  if (name == "mixed") {
    return NodeProfile{
        "mixed",
        "a T4, an A100 with SR-IOV VFs and the mtty sample",
        {OnNode(TeslaT4("0000:3b:00.0"), 0), OnNode(A100Sriov("0000:41:00.0"), 0), Mtty()},
        kHostDriver};
  }
  std::string known;
  for (const auto& profile : ProfileNames()) known += (known.empty() ? "" : ", ") + profile;
  return Status::Error(ErrorCode::kInvalid,
                       "unknown node profile '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace kvgpu::sim
