// The monitor delivers real kernel uevents. mdev events need the VM lab (tests/vm); here a
// "change" event of the loopback interface, which any Linux host can raise, proves the plumbing.
#include "mdev/udev_monitor.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>

#include "fakes/common/eventually.h"

namespace kvgpu::mdev {
namespace {

TEST(UdevMonitor, DeliversKernelEventsOfTheWatchedSubsystems) {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<DeviceEvent> events;
  UdevMonitor monitor({.source = "kernel", .subsystems = {"net"}}, [&](const DeviceEvent& e) {
    std::lock_guard lock(mutex);
    events.push_back(e);
    cv.notify_all();
  });
  Status started = monitor.Start();
  ASSERT_TRUE(started.ok()) << started.ToString();

  std::ofstream("/sys/class/net/lo/uevent") << "change\n";

  std::unique_lock lock(mutex);
  bool seen = cv.wait_for(lock, kvgpu::testing::kEventDeadline, [&] {
    for (const auto& e : events) {
      if (e.sysname == "lo" && e.action == "change") return true;
    }
    return false;
  });
  ASSERT_TRUE(seen) << "no change event for lo";
  for (const auto& e : events) EXPECT_EQ(e.subsystem, "net");
}

TEST(UdevMonitor, RejectsAnUnknownSource) {
  UdevMonitor monitor({.source = "bogus", .subsystems = {"mdev"}}, [](const DeviceEvent&) {});
  Status started = monitor.Start();
  EXPECT_EQ(started.code(), ErrorCode::kInvalid);
}

TEST(UdevMonitor, StopsPromptlyWithNoEvents) {
  UdevMonitor monitor({.source = "kernel", .subsystems = {"mdev"}}, [](const DeviceEvent&) {});
  ASSERT_TRUE(monitor.Start().ok());
  auto begin = std::chrono::steady_clock::now();
  monitor.Stop();
  // Not woken by Stop, the monitor's poll waits for an event for good: the bound only has to lie
  // far above the milliseconds a prompt Stop takes.
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(10));
}

}  // namespace
}  // namespace kvgpu::mdev
