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

extern char** environ;

namespace kvgpu::vmtest {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

constexpr int kMttyVendor = 0x4348;
constexpr int kMttyDevice = 0x3253;

// A QEMU process and its QMP socket: one JSON object per line each way.
class Qemu {
 public:
  explicit Qemu(std::vector<std::string> devices) {
    socket_path_ = "/tmp/kvgpu-qmp-" + std::to_string(::getpid()) + ".sock";
    fs::remove(socket_path_);
    std::vector<std::string> argv = {"qemu-system-x86_64",
                                     "-accel",
                                     "tcg",
                                     "-machine",
                                     "q35",
                                     "-m",
                                     "128",
                                     "-nodefaults",
                                     "-display",
                                     "none",
                                     "-qmp",
                                     "unix:" + socket_path_ + ",server=on,wait=off"};
    for (const auto& device : devices) {
      argv.push_back("-device");
      argv.push_back(device);
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, LogPath().c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> args;
    for (auto& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    int spawned = ::posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) {
      ADD_FAILURE() << "cannot start qemu-system-x86_64: " << std::strerror(spawned);
      pid_ = -1;
    }
  }

  ~Qemu() {
    if (fd_ >= 0) ::close(fd_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Qemu(const Qemu&) = delete;
  Qemu& operator=(const Qemu&) = delete;

  // QEMU's stdout and stderr; in $KVGPU_VM_OUT, so `run-in-vm.sh --out DIR` brings it home.
  static std::string LogPath() {
    const char* out = std::getenv("KVGPU_VM_OUT");
    return std::string(out != nullptr ? out : "/tmp") + "/qemu.log";
  }
  static std::string Log() {
    std::ifstream in(LogPath());
    std::stringstream content;
    content << in.rdbuf();
    return content.str();
  }

  // Connects and negotiates capabilities; QEMU creates the socket while it starts up.
  bool Connect(seconds timeout) {
    auto deadline = steady_clock::now() + timeout;
    while (steady_clock::now() < deadline) {
      fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      socket_path_.copy(address.sun_path, sizeof address.sun_path - 1);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
        json greeting = ReadMessage();
        if (!greeting.contains("QMP")) return false;
        return Execute("qmp_capabilities").contains("return");
      }
      ::close(fd_);
      fd_ = -1;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return false;
  }

  // Sends one command and returns its answer ({"return": ...} or {"error": ...}).
  json Execute(const std::string& command, json arguments = json::object()) {
    json request = {{"execute", command}};
    if (!arguments.empty()) request["arguments"] = std::move(arguments);
    std::string line = request.dump() + "\n";
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return {{"error", "write to QMP failed"}};
    }
    while (true) {
      json answer = ReadMessage();
      if (!answer.contains("event")) return answer;
    }
  }

  // Every PCI function QEMU's guest can see, with its bus and qdev id.
  std::vector<json> PciDevices() {
    std::vector<json> found;
    std::function<void(const json&)> walk = [&](const json& devices) {
      for (const auto& device : devices) {
        found.push_back(device);
        if (device.contains("pci_bridge") && device["pci_bridge"].contains("devices")) {
          walk(device["pci_bridge"]["devices"]);
        }
      }
    };
    json answer = Execute("query-pci");
    for (const auto& bus : answer.value("return", json::array())) walk(bus.at("devices"));
    return found;
  }

  // Polls query-pci until the device with this qdev id shows; the secondary bus of a root port
  // is numbered only once the guest's firmware has enumerated it.
  std::optional<json> WaitForPciDevice(const std::string& id, seconds timeout) {
    auto deadline = steady_clock::now() + timeout;
    while (steady_clock::now() < deadline) {
      for (const auto& device : PciDevices()) {
        if (device.value("qdev_id", "") == id) return device;
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
    return std::nullopt;
  }

  bool Realized(const std::string& id) {
    json answer =
        Execute("qom-get", {{"path", "/machine/peripheral/" + id}, {"property", "realized"}});
    return answer.value("return", false);
  }

  // Asks QEMU to quit and reaps it; returns its exit code.
  int Quit(seconds timeout) {
    Execute("quit");
    auto deadline = steady_clock::now() + timeout;
    while (steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    return -1;
  }

 private:
  json ReadMessage() {
    while (true) {
      auto newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return json::parse(line, nullptr, false);
      }
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 30000) <= 0) return {{"error", "QMP timed out"}};
      char chunk[4096];
      ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return {{"error", "QMP closed"}};
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string socket_path_;
  std::string buffer_;
};

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
