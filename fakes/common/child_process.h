// A program run as a separate process, the way a node runs a daemon: argv as given, stdin from
// /dev/null, stdout and stderr appended to one log file (kept across restarts, so a test can show
// the whole story), signals by pid, and the exit status as a shell reports it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fakes/common/eventually.h"

namespace kvgpu::testing {

class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, std::filesystem::path log);
  // A process still running is killed with SIGKILL and reaped.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Spawns the program; false (with the reason in error()) when it cannot be started.
  // posix_spawn rather than fork: the caller runs gRPC and HTTP threads.
  bool Start();
  // Sends `signal`; true when the process was running to receive it.
  bool Signal(int signal);
  // Exit code, or 128 + signal when killed; nullopt while it still runs after `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`; the exit status.
  int Stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  // SIGKILL, as `kill -9` or the OOM killer: no chance to clean up. The exit status.
  int Kill();
  bool Running();

  pid_t pid() const { return pid_; }
  const std::vector<std::string>& argv() const { return argv_; }
  void set_argv(std::vector<std::string> argv) { argv_ = std::move(argv); }
  // In a process group of its own, a terminal's Ctrl-C reaches only the caller, which then stops
  // the process itself, in its own order.
  void set_own_process_group(bool own) { own_process_group_ = own; }
  // Stderr to a file of its own instead of the log (before Start).
  void set_stderr_log(std::filesystem::path path) { stderr_log_ = std::move(path); }
  const std::filesystem::path& log_path() const { return log_; }
  std::string Log() const;
  const std::string& error() const { return error_; }
  // How many times Start() spawned the program.
  int starts() const { return starts_; }

 private:
  std::vector<std::string> argv_;
  std::filesystem::path log_;
  std::filesystem::path stderr_log_;  // empty: stderr goes to the log
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string error_;
  int starts_ = 0;
  bool own_process_group_ = false;
};

// Polls `done` every 10 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout = kEventDeadline);

// A free TCP port on 127.0.0.1 at the time of the call (bound, read back, closed).
int FreeTcpPort();

}  // namespace kvgpu::testing
