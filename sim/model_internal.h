// Pieces the model's .cpp files share. Private to sim/.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvgpu::sim {

// Where the model writes files before renaming them into place: inside the root, so the rename
// stays on one file system, and outside sys/, so no reader listing sysfs meets a temp file.
inline constexpr const char* kScratchDir = ".sim-scratch";

// The first line of `creatable_vgpu_types`, all of it when the card has no room.
inline constexpr const char* kCreatableHeader = "ID    : vGPU Name\n";

struct GpuSpec;

struct PciAddress {
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t devfn = 0;  // device << 3 | function
};

// "0000:41:00.4" -> fields; nullopt unless exactly DDDD:BB:DD.F in lower-case hex.
std::optional<PciAddress> ParsePciAddress(std::string_view text);

// A GPU whose VFs carry its vGPUs, one each (SR-IOV mdev parents, vendor VFIO): the profile check
// (kernel_model.cpp), the capacity rules (kernel_capacity.cpp) and the MIG switch
// (kernel_controls.cpp) ask it.
bool IsSriov(const GpuSpec& gpu);

}  // namespace kvgpu::sim
