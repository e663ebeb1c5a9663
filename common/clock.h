// Wall-clock milliseconds since the Unix epoch: the time base of what outlives a process (the
// device plugin's records, kubelet-restart bookkeeping). Intervals use steady_clock instead.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace kvgpu {

inline int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Clocks a component takes in place of the real ones (empty: the real one), so that a test can
// run its time on what the test does rather than on how fast the machine is. One of each kind:
// a component that reads both takes both, so that a test can keep them in step.
using SteadyClock = std::function<std::chrono::steady_clock::time_point()>;
using UnixMsClock = std::function<int64_t()>;

}  // namespace kvgpu
