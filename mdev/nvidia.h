// Parsing of NVIDIA vGPU type names and descriptions. Pure functions: no sysfs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "mdev/model.h"

namespace kvgpu::mdev {

// "GRID T4-1Q" / "NVIDIA A10-24Q" / "NVIDIA H200X-1-18C" -> profile. nullopt when the last token
// does not look like <gpu>-<size><series>.
std::optional<NvidiaProfile> ParseNvidiaProfile(std::string_view type_name);

// "num_heads=4, frl_config=45, framebuffer=1024M, ..." -> fields. Unknown keys are ignored;
// a known key with a garbage value is an error (kInvalid) naming the key.
Result<NvidiaDescription> ParseNvidiaDescription(std::string_view description);

// The vendor-VFIO `creatable_vgpu_types` file: a header line "ID : vGPU Name", then
// "<id> : <name>" per type. Returns (id, name) pairs; only the header -> empty list.
Result<std::vector<std::pair<std::string, std::string>>> ParseCreatableVgpuTypes(
    std::string_view content);

// True for an mdev type id of the NVIDIA driver: "nvidia-<digits>".
bool IsNvidiaMdevType(std::string_view type_id);

// Fills `nvidia` and `profile` of an NVIDIA mdev type from its name and description, where they
// parse; other types are left as they are. One rule for every backend that reads types.
void FillNvidiaDetails(VgpuType& type);

}  // namespace kvgpu::mdev
