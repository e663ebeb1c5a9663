// mdev::UdevMonitor on the real kernel's uevents: the device plugin relies on it to learn that
// mdevs came and went, whoever made them.
#include <condition_variable>
#include <mutex>

#include "fakes/common/eventually.h"
#include "mdev/sysfs_backend.h"
#include "mdev/udev_monitor.h"
#include "mdev/uuid.h"
#include "tests/vm/lab_support.h"

namespace kvgpu::vmtest {
namespace {

class EventLog {
 public:
  void Add(const mdev::DeviceEvent& event) {
    std::lock_guard lock(mutex_);
    events_.push_back(event);
    changed_.notify_all();
  }

  // Waits for an event with this action and sysname; returns it.
  std::optional<mdev::DeviceEvent> WaitFor(const std::string& action, const std::string& sysname,
                                           std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    std::optional<mdev::DeviceEvent> found;
    changed_.wait_for(lock, timeout, [&] {
      for (const auto& event : events_) {
        if (event.action == action && event.sysname == sysname) found = event;
      }
      return found.has_value();
    });
    return found;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<mdev::DeviceEvent> events_;
};

class UdevMonitorVmTest : public LabTest {
 protected:
  void SetUp() override {
    LabTest::SetUp();
    monitor_ = std::make_unique<mdev::UdevMonitor>(
        mdev::UdevMonitorOptions{"kernel", {"mdev"}},
        [this](const mdev::DeviceEvent& event) { log_.Add(event); });
    Status started = monitor_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  void TearDown() override {
    monitor_->Stop();
    LabTest::TearDown();
  }

  EventLog log_;
  std::unique_ptr<mdev::UdevMonitor> monitor_;
  mdev::PosixSysfsIo io_;
  mdev::SysfsBackend node_{"/", io_};
};

constexpr std::chrono::milliseconds kEventTimeout = kvgpu::testing::kLabEventDeadline;

TEST_F(UdevMonitorVmTest, SeesAddAndRemoveOfAnMdevMadeByTheLibrary) {
  auto created = node_.Create({"mtty", "mtty-2", std::nullopt});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto added = log_.WaitFor("add", created->id, kEventTimeout);
  ASSERT_TRUE(added.has_value()) << "no add event for " << created->id;
  EXPECT_EQ(added->subsystem, "mdev");
  EXPECT_EQ(fs::path(added->syspath).filename(), created->id);
  EXPECT_TRUE(fs::exists(added->syspath)) << added->syspath;

  ASSERT_TRUE(node_.Remove(created->id).ok());
  auto removed = log_.WaitFor("remove", created->id, kEventTimeout);
  ASSERT_TRUE(removed.has_value()) << "no remove event for " << created->id;
  EXPECT_EQ(removed->subsystem, "mdev");
}

TEST_F(UdevMonitorVmTest, SeesMdevsMadeBehindTheLibrarysBack) {
  // Another tool (mdevctl, an admin's echo) writes sysfs directly: the plugin must still hear.
  const std::string uuid = mdev::NewUuid();
  ASSERT_EQ(RawWrite(CreateFile("mdpy", "mdpy-vga"), uuid), 0);
  EXPECT_TRUE(log_.WaitFor("add", uuid, kEventTimeout).has_value());
  ASSERT_EQ(RawWrite(kMdevDevices / uuid / "remove", "1"), 0);
  EXPECT_TRUE(log_.WaitFor("remove", uuid, kEventTimeout).has_value());
}

TEST_F(UdevMonitorVmTest, DeliversNothingAfterStop) {
  monitor_->Stop();
  auto created = node_.Create({"mtty", "mtty-1", std::nullopt});
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE(log_.WaitFor("add", created->id, std::chrono::milliseconds(500)).has_value());
}

}  // namespace
}  // namespace kvgpu::vmtest
