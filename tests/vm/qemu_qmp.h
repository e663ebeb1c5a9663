// A QEMU (TCG, no OS) driven over QMP, for the VM lab's attach tests: Kata's attach path is a
// `-device` at start or a QMP `device_add` after it, and `query-pci` shows what the guest sees.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kvgpu::vmtest {

// The mtty sample's PCI identity, as the guest sees an mtty mdev.
inline constexpr int kMttyVendor = 0x4348;
inline constexpr int kMttyDevice = 0x3253;

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
  bool Connect(std::chrono::seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      socket_path_.copy(address.sun_path, sizeof address.sun_path - 1);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
        nlohmann::json greeting = ReadMessage();
        if (!greeting.contains("QMP")) return false;
        return Execute("qmp_capabilities").contains("return");
      }
      ::close(fd_);
      fd_ = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Sends one command and returns its answer ({"return": ...} or {"error": ...}).
  nlohmann::json Execute(const std::string& command,
                         nlohmann::json arguments = nlohmann::json::object()) {
    nlohmann::json request = {{"execute", command}};
    if (!arguments.empty()) request["arguments"] = std::move(arguments);
    std::string line = request.dump() + "\n";
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return {{"error", "write to QMP failed"}};
    }
    while (true) {
      nlohmann::json answer = ReadMessage();
      if (!answer.contains("event")) return answer;
    }
  }

  // Every PCI function QEMU's guest can see, with its bus and qdev id.
  std::vector<nlohmann::json> PciDevices() {
    std::vector<nlohmann::json> found;
    std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& devices) {
      for (const auto& device : devices) {
        found.push_back(device);
        if (device.contains("pci_bridge") && device["pci_bridge"].contains("devices")) {
          walk(device["pci_bridge"]["devices"]);
        }
      }
    };
    nlohmann::json answer = Execute("query-pci");
    for (const auto& bus : answer.value("return", nlohmann::json::array())) walk(bus.at("devices"));
    return found;
  }

  // Polls query-pci until the device with this qdev id shows; the secondary bus of a root port
  // is numbered only once the guest's firmware has enumerated it.
  std::optional<nlohmann::json> WaitForPciDevice(const std::string& id,
                                                 std::chrono::seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      for (const auto& device : PciDevices()) {
        if (device.value("qdev_id", "") == id) return device;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return std::nullopt;
  }

  bool Realized(const std::string& id) {
    nlohmann::json answer =
        Execute("qom-get", {{"path", "/machine/peripheral/" + id}, {"property", "realized"}});
    return answer.value("return", false);
  }

  // Asks QEMU to quit and reaps it; returns its exit code.
  int Quit(std::chrono::seconds timeout) {
    Execute("quit");
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

 private:
  nlohmann::json ReadMessage() {
    while (true) {
      auto newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return nlohmann::json::parse(line, nullptr, false);
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

}  // namespace kvgpu::vmtest
