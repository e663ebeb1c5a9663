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

// H200 SXM 141 GB (0x2335) under vGPU 17+ on kernel >= 6.8: vendor-specific VFIO, no mdev bus.
// The full-GPU time-sliced type and the 1-slice MIG-backed type (7 slices per GPU). 16 VFs and
// the device id are ours; the type ids and names are from the published sysfs listing.
GpuSpec H200VendorVfio(std::string address) {
  GpuSpec gpu;
  gpu.address = std::move(address);
  gpu.kind = GpuKind::kVendorVfio;
  gpu.device_id = "0x2335";
  gpu.num_vfs = 16;
  gpu.types = {Plain("1428", "NVIDIA H200X-141C", 1), Plain("1414", "NVIDIA H200X-1-18C", 7)};
  // No mdev type directory, so no device_api file either.
  for (TypeSpec& type : gpu.types) type.device_api.clear();
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
  return {"t4x2", "t4x2-equal-size", "a100-sriov", "h200-vfio", "mtty", "mixed"};
}

Result<NodeProfile> ProfileByName(std::string_view name) {
  if (name == "t4x2") {
    return NodeProfile{"t4x2",
                       "two Tesla T4, time-sliced vGPU on the mdev bus",
                       {TeslaT4("0000:3b:00.0"), TeslaT4("0000:af:00.0")},
                       kHostDriver};
  }
  if (name == "t4x2-equal-size") {
    return NodeProfile{"t4x2-equal-size",
                       "two Tesla T4 in equal-size mode: types of one framebuffer size share a GPU",
                       {TeslaT4EqualSize("0000:3b:00.0"), TeslaT4EqualSize("0000:af:00.0")},
                       kCurrentHostDriver};
  }
  if (name == "a100-sriov") {
    return NodeProfile{"a100-sriov",
                       "one A100 80GB with SR-IOV VFs as mdev parents",
                       {A100Sriov("0000:41:00.0")},
                       kHostDriver};
  }
  if (name == "h200-vfio") {
    return NodeProfile{"h200-vfio",
                       "one H200 with vendor-specific VFIO VFs, no mdev bus",
                       {H200VendorVfio("0000:41:00.0")},
                       kHostDriver};
  }
  if (name == "mtty") {
    return NodeProfile{"mtty", "the kernel's mtty sample driver", {Mtty()}, ""};
  }
  if (name == "mixed") {
    return NodeProfile{"mixed",
                       "a T4, an A100 with SR-IOV VFs and the mtty sample",
                       {TeslaT4("0000:3b:00.0"), A100Sriov("0000:41:00.0"), Mtty()},
                       kHostDriver};
  }
  std::string known;
  for (const auto& profile : ProfileNames()) known += (known.empty() ? "" : ", ") + profile;
  return Status::Error(ErrorCode::kInvalid,
                       "unknown node profile '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace kvgpu::sim
