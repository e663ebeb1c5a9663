// vgpuctl: a node engineer's view of the node's vGPUs. The program is this function, so tests and
// the demo run it against any SysfsIo (the simulator's kernel model included).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "mdev/sysfs_io.h"

namespace kvgpu::vgpuctl {

// args excludes the program name. Returns the process exit code: 0 ok, 1 the operation failed,
// 2 the command line is wrong.
int Run(const std::vector<std::string>& args, mdev::SysfsIo& io, std::ostream& out,
        std::ostream& err);

}  // namespace kvgpu::vgpuctl
