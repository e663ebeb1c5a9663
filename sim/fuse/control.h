// The simulator's control channel: what a scenario driver writes to <mount>/sim/control and
// reads from <mount>/sim/state. Kept apart from FUSE so it is tested without a mount.
//
// Commands, one per line (a write may carry several; they run in order and stop at the first
// that fails, whose errno the write returns):
//   busy <vgpu-id>        hold a vGPU as a running VM does: removing it fails with EBUSY
//   release <vgpu-id>     let it go again
//   unplug <gpu-address>  the GPU, its VFs and vGPUs leave sysfs (hot-unplug, driver unbind)
//   restore <gpu-address> bring it back, empty
//   fault <read|write|list|readlink> <path-suffix> <errno> [times]
//                         the next `times` (default 1, -1 = until cleared) such operations on
//                         paths ending in the suffix fail with errno (a name such as EIO, or a
//                         number)
//   clear-faults          drop every injected fault
#pragma once

#include <string>
#include <string_view>

#include "sim/kernel_model.h"

namespace kvgpu::sim {

// Runs the commands in `text`. The Status carries the errno the control write answers:
// EINVAL for a command that does not parse, ENOENT for an unknown vGPU or GPU, EALREADY for
// unplugging an unplugged GPU or restoring a present one.
Status ApplyControl(KernelModel& model, std::string_view text);

// What <mount>/sim/state shows:
//   profile <name>
//   gpu <address> present|unplugged          one line per GPU of the profile
//   vgpu <id> <parent> <type> busy|idle      one line per existing vGPU
std::string StateText(const KernelModel& model);

}  // namespace kvgpu::sim
