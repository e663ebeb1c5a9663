// The one retry delay of every loop that waits for something to come back (the API server,
// kubelet's registration socket, a VM letting go of a vGPU): the initial delay, doubled per
// failure up to a cap, optionally scaled by a random factor so that many nodes do not all return
// at once. Not thread-safe; each retrying loop owns its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace kvgpu {

class Backoff {
 public:
  // jitter: each delay is the base times a random factor in [1 - jitter, 1]; 0 is exact.
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, double jitter = 0.0,
          std::uint32_t seed = std::random_device{}());
  // The delay before the next try; counts one more failure.
  std::chrono::milliseconds Next();
  // The thing came back: the next failure starts again from the initial delay.
  void Reset() { failures_ = 0; }
  int failures() const { return failures_; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  double jitter_;
  std::minstd_rand random_;
  int failures_ = 0;
};

}  // namespace kvgpu
