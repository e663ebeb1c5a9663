// Listen addresses as flags write them: "HOST:PORT", ":PORT" or "[v6]:PORT". One parser for every
// daemon's --listen and --metrics-addr.
#pragma once

#include <string>

#include "common/status.h"

namespace kvgpu {

struct HostPort {
  std::string host;  // "" means every IPv4 address
  int port = 0;
};
// Port 0 asks for any free port (tests). kInvalid, naming the text, when it is not an address.
Result<HostPort> ParseHostPort(const std::string& text);

}  // namespace kvgpu
