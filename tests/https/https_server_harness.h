// The HTTPS server (https/http_server.h) on loopback for its own tests: a throw-away certificate
// (and, when asked, a client CA), the handler and limits each test chooses, served on a thread of
// its own until the test ends; a TLS client (tests/webhook/tls_client.h) and bare TCP sockets to
// talk to it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "fakes/common/eventually.h"
#include "fakes/common/temp_dir.h"
#include "fakes/common/test_pki.h"
#include "https/http_server.h"
#include "https/tls_files.h"
#include "tests/webhook/tls_client.h"

namespace kvgpu::https::testing {

using kvgpu::testing::CertAndKey;
using kvgpu::testing::Eventually;
using kvgpu::testing::kEventDeadline;
using kvgpu::testing::TempDir;
using kvgpu::testing::TestAuthority;
using kvgpu::testing::WriteFileAtomically;
using webhook::testing::ClientOptions;
using webhook::testing::HttpResult;
using webhook::testing::TlsConnection;

// A TCP connection to 127.0.0.1:port without TLS, or -1.
inline int RawConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed a raw connection (end of file or reset) before the deadline.
inline bool ClosedByServer(int fd, std::chrono::milliseconds deadline = kEventDeadline) {
  timeval slice{0, 200 * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof(slice));
  const auto until = std::chrono::steady_clock::now() + deadline;
  char byte = 0;
  while (std::chrono::steady_clock::now() < until) {
    const ssize_t n = ::recv(fd, &byte, 1, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n > 0) continue;  // nothing the server says to a bare socket matters here
  }
  return false;
}

class HttpsServerTest : public ::testing::Test {
 protected:
  void TearDown() override { StopServing(); }

  // Serves `handler` with `options`; with `client_ca`, client certificates of ca() are checked.
  void Serve(HttpsServer::Handler handler, HttpsServerOptions options, bool client_ca = false) {
    const CertAndKey pair = ca_.Issue("localhost", true);
    const std::string cert = (dir_.path() / "tls.crt").string();
    const std::string key = (dir_.path() / "tls.key").string();
    const std::string ca = (dir_.path() / "ca.crt").string();
    WriteFileAtomically(cert, pair.cert_pem);
    WriteFileAtomically(key, pair.key_pem);
    WriteFileAtomically(ca, ca_.cert_pem());
    auto files = TlsFiles::Load(cert, key, client_ca ? ca : "");
    ASSERT_TRUE(files.ok()) << files.status().message();
    files_ = std::move(files).value();
    std::string error;
    SSL_CTX* ctx = files_->NewServerContext(&error);
    ASSERT_NE(ctx, nullptr) << error;
    server_ = std::make_unique<HttpsServer>(ctx, std::move(handler), std::move(options));
    auto port = server_->Listen("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = port.value();
    thread_ = std::thread([server = server_.get()] { server->Run(); });
  }

  void StopServing() {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  // Stopped and destroyed: the destructor lets the handlers still queued finish, which closes the
  // listening socket and every connection.
  void DestroyServer() {
    StopServing();
    server_.reset();
  }

  std::unique_ptr<TlsConnection> Connect(const ClientOptions& client = {}) {
    std::string error;
    auto connection = TlsConnection::Open(port_, client, &error);
    EXPECT_NE(connection, nullptr) << error;
    return connection;
  }

  HttpsServer& server() { return *server_; }
  int port() const { return port_; }
  const TestAuthority& ca() const { return ca_; }

 private:
  TestAuthority ca_{"kvgpu-https-test-ca"};
  TempDir dir_;
  std::unique_ptr<TlsFiles> files_;  // before server_: its store outlives the server's context
  std::unique_ptr<HttpsServer> server_;
  std::thread thread_;
  int port_ = 0;
};

// Answers every request with what it was: "<method> <path>|<content type>|<body>".
inline HttpResponse Echo(const HttpRequest& request) {
  return {200, "text/plain",
          request.method + " " + request.path + "|" + request.content_type + "|" + request.body};
}

}  // namespace kvgpu::https::testing
