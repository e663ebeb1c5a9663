// Waits for something another thread or process makes true, polling, with a deadline: the
// alternative to fixed sleeps, which are either too short on a loaded machine or slow always.
#pragma once

#include <chrono>
#include <thread>

namespace kvgpu::testing {

template <typename Predicate>
bool Eventually(Predicate done, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace kvgpu::testing
