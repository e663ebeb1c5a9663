// Runs a program of the node (vgpuctl) as the validator's child, its output captured and its time
// bounded: a hung program is killed, not waited for.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgpu::validator {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;     // stdout; stderr goes to the validator's own
};

// argv[0] is the program (a path, or a name looked up in PATH). kTimeout when it ran longer than
// `timeout` (it is killed); kIo when it cannot be started.
Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout);

}  // namespace kvgpu::validator
