// How many event loops the webhook runs by default.
#pragma once

#include <cstddef>
#include <filesystem>

namespace kvgpu::webhook {

// The CPUs this process may use: its affinity mask, capped by the cgroup v2 CPU limit in
// `cpu_max` (a pod's `limits.cpu`, "<quota> <period>" or "max <period>"), which
// hardware_concurrency() knows nothing of. An unreadable or odd limit file counts as no limit.
// Never less than 1.
size_t UsableCpus(const std::filesystem::path& cpu_max = "/sys/fs/cgroup/cpu.max");

}  // namespace kvgpu::webhook
