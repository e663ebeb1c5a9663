// The durations the daemons' configs and flags take: "500ms", "5s", "2m".
#pragma once

#include <chrono>
#include <string_view>

#include "common/status.h"

namespace kvgpu {

// kInvalid, quoting the text, for anything but digits (at most 9) followed by ms, s or m.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);

}  // namespace kvgpu
