// One plain HTTP/1.1 request over TCP to 127.0.0.1:port, for tests of the daemons' metrics and
// health endpoints; returns the whole answer (the request asks the server to close).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace kvgpu::testing {

inline std::string HttpRequest(int port, const std::string& method, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "socket failed";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
    std::string request =
        method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n = 0;
      while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) {
        answer.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  return answer;
}

}  // namespace kvgpu::testing
