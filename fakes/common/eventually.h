// Waits for something another thread or process makes true, polling, with a deadline: the
// alternative to fixed sleeps, which are either too short on a loaded machine or slow always.
#pragma once

#include <chrono>
#include <thread>

namespace kvgpu::testing {

// The deadline of every wait for something that is to happen (docs/development.md, "Timing in
// tests"). What the tests wait for takes milliseconds to a few seconds on a quiet machine; two
// loaded cores, a sanitizer or QEMU's TCG stretch that many times over, and a test must not fail
// for it. A wait returns as soon as its condition holds, so only a test that fails anyway pays
// the deadline. Waits that are meant to time out (a negative check) never use it: how long they
// watch is reasoned where they stand.
inline constexpr std::chrono::milliseconds kEventDeadline = std::chrono::seconds(30);
// The same inside the VM lab (tests/vm), whose kernel runs under QEMU's TCG emulation: several
// times slower than the host before any load.
inline constexpr std::chrono::milliseconds kLabEventDeadline = std::chrono::seconds(90);

template <typename Predicate>
bool Eventually(Predicate done, std::chrono::milliseconds timeout = kEventDeadline,
                std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace kvgpu::testing
