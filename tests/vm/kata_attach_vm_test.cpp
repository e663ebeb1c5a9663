// Kata's attach path, for real: an mdev made by vgpuctl is handed to a QEMU (nested, TCG) the way
// the Kata runtime does it — `-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/<uuid>` at start,
// or QMP `device_add` onto a pcie-root-port after start (hot_plug_vfio = "root-port") — and the
// guest's PCI bus must show the mtty card (vendor 0x4348, device 0x3253). Then what the kernel
// does when the mdev is removed while QEMU still holds it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "mdev/sysfs_backend.h"
#include "tests/vm/lab_support.h"
#include "tests/vm/qemu_qmp.h"

namespace kvgpu::vmtest {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// The scheduler state letter of a process: "S" sleeping, "D" uninterruptible, ...
std::string ProcessState(pid_t pid) {
  std::string status = ReadAttr(fs::path("/proc") / std::to_string(pid) / "status");
  auto at = status.find("State:");
  if (at == std::string::npos) return "?";
  auto letter = status.find_first_not_of(" \t", at + 6);
  return letter == std::string::npos ? "?" : status.substr(letter, 1);
}

class KataAttachVmTest : public LabTest {
 protected:
  void SetUp() override {
    LabTest::SetUp();
    // As the device plugin would: vgpuctl makes the mdev the runtime then attaches.
    ProcessResult run =
        RunProcess({VgpuctlPath(), "create", "--parent", "mtty", "--type", "mtty-2"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    uuid_ = run.out.substr(0, run.out.find('\n'));
    sysfsdev_ = (kMdevDevices / uuid_).string();
    ASSERT_TRUE(fs::exists(sysfsdev_));
  }

  static void ExpectMttyCard(const std::optional<json>& device) {
    ASSERT_TRUE(device.has_value()) << "the mdev never showed on the guest's PCI bus";
    EXPECT_EQ(device->at("id").at("vendor").get<int>(), kMttyVendor);
    EXPECT_EQ(device->at("id").at("device").get<int>(), kMttyDevice);
  }

  std::string uuid_;
  std::string sysfsdev_;
};

TEST_F(KataAttachVmTest, ColdPlugRealizesTheMdevAsAPciDevice) {
  auto start = steady_clock::now();
  Qemu qemu({"vfio-pci,sysfsdev=" + sysfsdev_ + ",id=vgpu0"});
  ASSERT_TRUE(qemu.Connect(seconds(60))) << "QMP never answered; QEMU said:\n" << Qemu::Log();
  EXPECT_TRUE(qemu.Realized("vgpu0"));
  ExpectMttyCard(qemu.WaitForPciDevice("vgpu0", seconds(60)));
  std::cout << "cold plug: mtty card on the bus " << MillisecondsSince(start)
            << " ms after QEMU started\n";
  EXPECT_EQ(qemu.Quit(seconds(30)), 0);

  ProcessResult removed = RunProcess({VgpuctlPath(), "remove", uuid_});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_FALSE(fs::exists(sysfsdev_));
}

TEST_F(KataAttachVmTest, HotPlugThroughQmpOntoAPcieRootPort) {
  Qemu qemu({"pcie-root-port,id=rp0,bus=pcie.0,chassis=1,slot=1",
             "pcie-root-port,id=rp1,bus=pcie.0,chassis=2,slot=2"});
  ASSERT_TRUE(qemu.Connect(seconds(60))) << "QMP never answered; QEMU said:\n" << Qemu::Log();
  for (const auto& device : qemu.PciDevices()) {
    EXPECT_NE(device.at("id").at("vendor").get<int>(), kMttyVendor) << "card there before plug";
  }
  auto start = steady_clock::now();
  json added = qemu.Execute(
      "device_add",
      {{"driver", "vfio-pci"}, {"sysfsdev", sysfsdev_}, {"id", "vgpu0"}, {"bus", "rp0"}});
  ASSERT_TRUE(added.contains("return")) << added.dump();
  EXPECT_TRUE(qemu.Realized("vgpu0"));
  std::optional<json> device = qemu.WaitForPciDevice("vgpu0", seconds(60));
  ExpectMttyCard(device);
  if (device) {
    EXPECT_NE(device->at("bus").get<int>(), 0) << "not behind the root port";
  }
  std::cout << "hot plug: device_add to card on the bus " << MillisecondsSince(start) << " ms\n";

  // A second attach of the same mdev, onto a free port, must fail: the device is taken.
  json again = qemu.Execute(
      "device_add",
      {{"driver", "vfio-pci"}, {"sysfsdev", sysfsdev_}, {"id", "vgpu1"}, {"bus", "rp1"}});
  EXPECT_TRUE(again.contains("error")) << again.dump();
  if (again.contains("error")) std::cout << "second device_add: " << again["error"] << "\n";
  EXPECT_EQ(qemu.Quit(seconds(30)), 0);
}

// The kernel's answer to removing an mdev a VM holds, recorded: on 6.1 the write to `remove`
// does not fail with EBUSY; it blocks (vfio_unregister_group_dev waits for the last close) while
// the device already vanished from sysfs, and completes once QEMU lets go.
TEST_F(KataAttachVmTest, RemoveWhileQemuHoldsTheMdevBlocksUntilQemuLetsGo) {
  Qemu qemu({"vfio-pci,sysfsdev=" + sysfsdev_ + ",id=vgpu0"});
  ASSERT_TRUE(qemu.Connect(seconds(60))) << "QMP never answered; QEMU said:\n" << Qemu::Log();
  ASSERT_TRUE(qemu.Realized("vgpu0"));

  // The removal runs in a child: a blocked sysfs write cannot be abandoned by a thread, and a
  // child whose write never returns still lets this test report.
  int result_pipe[2];
  ASSERT_EQ(::pipe(result_pipe), 0);
  auto start = steady_clock::now();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(result_pipe[0]);
    // A handler (not SIG_IGN) so that a signal is delivered and interrupts the wait, as it
    // would for a daemon being stopped.
    struct sigaction action {};
    action.sa_handler = [](int) {};
    ::sigaction(SIGUSR1, &action, nullptr);
    mdev::PosixSysfsIo io;
    mdev::SysfsBackend node("/", io);
    Status status = node.Remove(uuid_);
    std::string report = std::to_string(static_cast<int>(status.code())) + " " +
                         std::to_string(status.sys_errno()) + " " + status.ToString();
    ssize_t ignored = ::write(result_pipe[1], report.data(), report.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(result_pipe[1]);

  pollfd pfd{result_pipe[0], POLLIN, 0};
  int ready = ::poll(&pfd, 1, 3000);
  EXPECT_EQ(ready, 0) << "remove returned while QEMU held the device";
  bool visible_while_blocked = fs::exists(sysfsdev_);
  std::cout << "remove while held: still blocked after 3 s: " << (ready == 0 ? "yes" : "no")
            << "; /sys/bus/mdev/devices/<uuid> while blocked: "
            << (visible_while_blocked ? "present" : "gone") << "\n";
  EXPECT_FALSE(visible_while_blocked);
  EXPECT_TRUE(qemu.Realized("vgpu0")) << "QEMU lost the device before it let go";

  // A signal does not free the writer: the kernel keeps waiting, uninterruptibly from then on.
  std::string state_before = ProcessState(child);
  ::kill(child, SIGUSR1);
  // Waited for, not slept: under TCG on a loaded host the signal takes a while to land.
  std::string state_after = ProcessState(child);
  for (auto until = steady_clock::now() + seconds(20);
       state_after != "D" && steady_clock::now() < until; state_after = ProcessState(child)) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  std::cout << "remove while held: writer state " << state_before << ", after a signal "
            << state_after << "\n";
  EXPECT_EQ(state_before, "S");
  EXPECT_EQ(state_after, "D");
  EXPECT_EQ(::poll(&pfd, 1, 0), 0) << "the signal ended the blocked remove";

  EXPECT_EQ(qemu.Quit(seconds(30)), 0);
  ready = ::poll(&pfd, 1, 20000);
  ASSERT_EQ(ready, 1) << "remove still blocked 20 s after QEMU quit";
  char buffer[512] = {};
  ssize_t n = ::read(result_pipe[0], buffer, sizeof buffer - 1);
  ::close(result_pipe[0]);
  ::waitpid(child, nullptr, 0);
  ASSERT_GT(n, 0);
  std::string report(buffer, static_cast<size_t>(n));
  std::cout << "remove while held: Node::Remove returned after " << MillisecondsSince(start)
            << " ms: " << report << "\n";
  EXPECT_EQ(report.rfind("0 0 ", 0), 0u) << report;
  EXPECT_TRUE(MdevUuids().empty());
}

}  // namespace
}  // namespace kvgpu::vmtest
