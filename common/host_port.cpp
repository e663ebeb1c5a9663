#include "common/host_port.h"

namespace kvgpu {

Result<HostPort> ParseHostPort(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos)
    return Status::Error(ErrorCode::kInvalid, "address '" + text + "' must be HOST:PORT");
  HostPort out;
  out.host = text.substr(0, colon);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2);
  std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return Status::Error(ErrorCode::kInvalid, "address '" + text + "' has no valid port (0-65535)");
  out.port = std::stoi(port);
  return out;
}

}  // namespace kvgpu
