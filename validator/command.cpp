#include "validator/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace kvgpu::validator {

namespace {

// Reads the child's stdout until it closes or the deadline passes; false on the deadline.
bool ReadUntil(int fd, std::chrono::steady_clock::time_point deadline, std::string* out) {
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    out->append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace

Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout) {
  if (argv.empty()) return Status::Error(ErrorCode::kInvalid, "no program to run");
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    return Status::FromErrno(spawned, "cannot run " + argv[0] + ": " + std::strerror(spawned));
  }
  CommandResult result;
  const bool finished =
      ReadUntil(pipe_fds[0], std::chrono::steady_clock::now() + timeout, &result.out);
  ::close(pipe_fds[0]);
  if (!finished) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished) {
    return Status::Error(ErrorCode::kTimeout,
                         argv[0] + " ran longer than " + std::to_string(timeout.count()) + " ms");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace kvgpu::validator
