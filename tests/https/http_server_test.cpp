// The HTTPS server's listener (https/http_server.cpp) over real TLS on loopback: binding, the
// connection count, the cap's choice of whom to shed, the memory budget a request is charged to,
// and a stop that ends the serving threads and the open connections.
#include "https/http_server.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "tests/https/https_server_harness.h"

namespace kvgpu::https::testing {
namespace {

// A server that is never run: binding needs no TLS set-up.
std::unique_ptr<HttpsServer> Unserved() {
  return std::make_unique<HttpsServer>(SSL_CTX_new(TLS_server_method()), Echo,
                                       HttpsServerOptions{});
}

TEST(HttpsListenTest, PortZeroBindsAFreePortAndSaysWhich) {
  auto server = Unserved();
  auto port = server->Listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status().message();
  EXPECT_GT(port.value(), 0);
  const int fd = RawConnect(port.value());
  EXPECT_GE(fd, 0) << "the port listens before Run";
  if (fd >= 0) ::close(fd);
}

TEST(HttpsListenTest, AHostThatIsNotAnIpAddressIsRefused) {
  auto server = Unserved();
  auto port = server->Listen("webhook.example", 0);
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), ErrorCode::kInvalid);
  EXPECT_NE(port.status().message().find("'webhook.example' is not an IP address"),
            std::string::npos)
      << port.status().message();
}

TEST(HttpsListenTest, APortAnotherServerListensOnIsAnError) {
  auto first = Unserved();
  auto port = first->Listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status().message();
  auto second = Unserved();
  auto again = second->Listen("127.0.0.1", port.value());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), ErrorCode::kIo);
}

TEST_F(HttpsServerTest, ConnectionsCountsTheOpenOnes) {
  ASSERT_NO_FATAL_FAILURE(Serve(Echo, {}));
  EXPECT_EQ(server().connections(), 0u);
  const int a = RawConnect(port());
  const int b = RawConnect(port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_TRUE(Eventually([&] { return server().connections() == 2; })) << server().connections();
  ::close(a);
  ::close(b);
  // A bare socket that goes away is noticed when the server reads it (its first byte, or none).
  EXPECT_TRUE(Eventually([&] { return server().connections() == 0; })) << server().connections();
}

TEST_F(HttpsServerTest, AtTheCapANewClientShedsTheConnectionSilentLongest) {
  HttpsServerOptions options;
  options.max_connections = 2;
  ASSERT_NO_FATAL_FAILURE(Serve(Echo, options));
  const int oldest = RawConnect(port());
  ASSERT_GE(oldest, 0);
  ASSERT_TRUE(Eventually([&] { return server().connections() == 1; }));
  const int younger = RawConnect(port());
  ASSERT_GE(younger, 0);
  ASSERT_TRUE(Eventually([&] { return server().connections() == 2; }));
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto answer = client->Request("GET", "/healthz", "", "");
  ASSERT_TRUE(answer.has_value()) << "a client that speaks is served at the cap";
  EXPECT_EQ(answer->status, 200);
  EXPECT_TRUE(ClosedByServer(oldest)) << "the silent socket accepted first made the room";
  EXPECT_LE(server().connections(), 2u);
  ::close(oldest);
  ::close(younger);
}

TEST_F(HttpsServerTest, ABodyIsChargedToTheBudgetUntilItsAnswerIsWritten) {
  ASSERT_NO_FATAL_FAILURE(Serve(
      [](const HttpRequest& request) {
        return HttpResponse{200, "text/plain", std::to_string(request.body.size())};
      },
      {}));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  const std::string half(32 * 1024, 'x');
  ASSERT_TRUE(connection->Send("POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Length: " +
                               std::to_string(2 * half.size()) + "\r\n\r\n" + half));
  EXPECT_TRUE(Eventually([&] { return server().buffered_body_bytes() >= half.size(); }))
      << server().buffered_body_bytes();
  ASSERT_TRUE(connection->Send(half));
  auto answer = connection->Receive();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->body, std::to_string(2 * half.size()));
  EXPECT_TRUE(Eventually([&] { return server().buffered_body_bytes() == 0; }))
      << server().buffered_body_bytes() << " bytes still held";
}

TEST_F(HttpsServerTest, ARequestWhoseHandlerCannotBeGivenItsShareIsRefused503) {
  HttpsServerOptions options;
  options.max_buffered_body_bytes = 1 << 20;
  options.handler_bytes = [](size_t) -> size_t { return 2 << 20; };  // more than the whole budget
  std::atomic<int> handled{0};
  ASSERT_NO_FATAL_FAILURE(Serve(
      [&](const HttpRequest& request) {
        ++handled;
        return Echo(request);
      },
      options));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  auto answer = connection->Request("POST", "/mutate", "{}");
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 503);
  EXPECT_NE(answer->body.find("memory for requests"), std::string::npos) << answer->body;
  EXPECT_EQ(handled.load(), 0);
  EXPECT_TRUE(Eventually([&] { return server().buffered_body_bytes() == 0; }));
}

TEST_F(HttpsServerTest, StopEndsRunAndTheServerLetsGoOfItsPortAndConnections) {
  ASSERT_NO_FATAL_FAILURE(Serve(Echo, {}));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  ASSERT_TRUE(connection->Request("GET", "/healthz", "", "").has_value());
  ASSERT_TRUE(Eventually([&] { return server().running(); }));
  StopServing();  // returns once Run has returned on every worker thread
  EXPECT_FALSE(server().running());
  DestroyServer();
  EXPECT_FALSE(connection->Request("GET", "/healthz", "", "").has_value());
  const int fd = RawConnect(port());
  EXPECT_LT(fd, 0) << "nothing listens any more";
  if (fd >= 0) ::close(fd);
}

}  // namespace
}  // namespace kvgpu::https::testing
