// What the validator reads from `nvidia-smi -q` in the guest: how many GPUs the driver sees and
// the vGPU licence state. The format is NVIDIA's documented one ("Verifying the License Status of
// a Licensed NVIDIA vGPU for Compute Guest VM", docs.nvidia.com/ai-enterprise/release-8/8.0/
// infra-software/vgpu/licensing.html): "Key : Value" lines indented under their section, the
// licence in the "vGPU Software Licensed Product" section near the end:
//
//   Attached GPUs                             : 1
//   GPU 00000000:02:01.0
//       Product Name                          : NVIDIA H100-80C
//       ...
//       vGPU Software Licensed Product
//           Product Name                      : NVIDIA Virtual Compute Server
//           License Status                    : Licensed (Expiry: 2025-6-18 16:49:5 GMT)
//
// nvidia-smi's text output is not promised to stay the same across releases, so anything the
// parser cannot find is reported as missing, never guessed.
#pragma once

#include <optional>
#include <string>

namespace kvgpu::validator {

struct SmiQuery {
  std::optional<int> attached_gpus;  // "Attached GPUs : N"
  std::string gpu_product;           // the first GPU's "Product Name"
  std::string driver_version;        // "Driver Version"
  std::string licensed_product;      // "Product Name" in the licensed product section
  std::string license_status;        // "Licensed (Expiry: ...)", "Unlicensed (Restricted)"

  // "Licensed", with or without the expiry NVIDIA's newer drivers add.
  bool Licensed() const;
};

SmiQuery ParseSmiQuery(const std::string& text);

}  // namespace kvgpu::validator
