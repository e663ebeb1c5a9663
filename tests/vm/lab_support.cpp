#include "tests/vm/lab_support.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace kvgpu::vmtest {

namespace {

// Registered at start-up so that every lab binary checks where it runs before any case.
[[maybe_unused]] const ::testing::Environment* const kLabEnvironment =
    ::testing::AddGlobalTestEnvironment(new LabEnvironment);

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

void LabEnvironment::SetUp() {
  ASSERT_TRUE(fs::exists(kMdevBus / "mtty") && fs::exists(kMdevBus / "mdpy"))
      << "no mtty/mdpy parent under " << kMdevBus
      << ": this test runs inside the VM lab, e.g. tests/vm/run-in-vm.sh <this binary>";
}

fs::path CreateFile(const std::string& parent, const std::string& type) {
  return kMdevBus / parent / "mdev_supported_types" / type / "create";
}

int RawWrite(const fs::path& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t written = ::write(fd, data.data(), data.size());
  int error = written < 0 ? errno : 0;
  ::close(fd);
  return error;
}

std::string ReadAttr(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream content;
  content << in.rdbuf();
  return Trim(content.str());
}

int AvailableInstances(const std::string& parent, const std::string& type) {
  return std::stoi(
      ReadAttr(kMdevBus / parent / "mdev_supported_types" / type / "available_instances"));
}

std::vector<std::string> MdevUuids() {
  std::vector<std::string> uuids;
  for (const auto& entry : fs::directory_iterator(kMdevDevices)) {
    uuids.push_back(entry.path().filename().string());
  }
  std::sort(uuids.begin(), uuids.end());
  return uuids;
}

void RemoveAllMdevs() {
  for (const auto& uuid : MdevUuids()) {
    int error = RawWrite(kMdevDevices / uuid / "remove", "1");
    EXPECT_EQ(error, 0) << "cannot remove leftover mdev " << uuid;
  }
}

ProcessResult RunProcess(const std::vector<std::string>& argv) {
  ProcessResult result;
  std::array<int, 2> out_pipe{};
  std::array<int, 2> err_pipe{};
  if (::pipe2(out_pipe.data(), O_CLOEXEC) != 0 || ::pipe2(err_pipe.data(), O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2 failed";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int spawned = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (spawned != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(spawned);
    return result;
  }
  std::array<pollfd, 2> fds = {pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
  std::array<std::string*, 2> sinks = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      std::array<char, 4096> buffer{};
      ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
      if (n > 0) {
        sinks[i]->append(buffer.data(), static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::set<std::string> VirshMdevs(const std::string& uri) {
  ProcessResult run = RunProcess({"virsh", "-q", "-c", uri, "nodedev-list", "--cap", "mdev"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::set<std::string> out;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("mdev_", 0) != 0 || line.size() < 5 + 36) continue;
    std::string uuid = line.substr(5, 36);
    std::replace(uuid.begin(), uuid.end(), '_', '-');
    out.insert(uuid);
  }
  return out;
}

std::string VgpuctlPath() {
  return KVGPU_VGPUCTL_PATH;
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace kvgpu::vmtest
