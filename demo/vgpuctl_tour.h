// The walk-through of the first demo: the mdev layer alone, with vgpuctl on an in-process
// kernel model (no FUSE, no daemons): create, the type lock on a time-sliced GPU, the kernel's
// refusal, remove.
#pragma once

#include <string>

namespace kvgpu::demo {

// `root` empty: a fresh temp dir, removed at the end. Returns the exit code.
int RunVgpuctlTour(const std::string& profile_name, std::string root);

}  // namespace kvgpu::demo
