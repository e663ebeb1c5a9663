// Wall-clock milliseconds since the Unix epoch: the time base of what outlives a process (the
// device plugin's records, kubelet-restart bookkeeping). Intervals use steady_clock instead.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvgpu {

inline int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace kvgpu
