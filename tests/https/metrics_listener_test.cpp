// The plain-HTTP metrics listener (https/metrics_listener.h) over loopback: /metrics and /healthz
// answered and the connection closed, and idle connections never taking a scrape's turn (why it
// replaced prometheus-cpp's two-thread exposer).
#include "https/metrics_listener.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

namespace kvgpu::https {
namespace {

int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// The whole answer to one GET: the listener closes the connection after it.
std::string ListenerGet(int port, const std::string& path) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;)
    answer.append(buffer, static_cast<size_t>(n));
  close(fd);
  return answer;
}

TEST(MetricsListenerTest, MetricsAreAnsweredWithTheTextOfTheMoment) {
  std::atomic<int> scrapes{0};
  auto listener = MetricsListener::Start(
      "127.0.0.1", 0, [&] { return "kvgpu_scrapes " + std::to_string(++scrapes) + "\n"; }, {});
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const int port = (*listener)->port();
  ASSERT_GT(port, 0);
  const std::string first = ListenerGet(port, "/metrics");
  EXPECT_EQ(first.rfind("HTTP/1.1 200", 0), 0u) << first;
  EXPECT_NE(first.find("kvgpu_scrapes 1\n"), std::string::npos) << first;
  EXPECT_NE(ListenerGet(port, "/metrics").find("kvgpu_scrapes 2\n"), std::string::npos);
}

TEST(MetricsListenerTest, HealthzSaysWhatTheHealthCallbackSays) {
  std::atomic<bool> healthy{true};
  MetricsListener::Options options;
  options.health = [&] { return healthy.load(); };
  auto listener = MetricsListener::Start(
      "127.0.0.1", 0, [] { return std::string(); }, options);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const int port = (*listener)->port();
  EXPECT_EQ(ListenerGet(port, "/healthz").rfind("HTTP/1.1 200", 0), 0u);
  healthy = false;
  EXPECT_EQ(ListenerGet(port, "/healthz").rfind("HTTP/1.1 503", 0), 0u);
}

TEST(MetricsListenerTest, IdleConnectionsDoNotHoldUpAScrape) {
  auto listener = MetricsListener::Start("127.0.0.1", 0, [] { return std::string("up 1\n"); }, {});
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const int port = (*listener)->port();
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(ConnectLoopback(port));
  for (int fd : idle) ASSERT_GE(fd, 0);
  EXPECT_NE(ListenerGet(port, "/metrics").find("up 1\n"), std::string::npos);
  for (int fd : idle) close(fd);
}

}  // namespace
}  // namespace kvgpu::https
