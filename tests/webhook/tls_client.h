// A deliberately plain HTTPS/1.1 client on OpenSSL for the server tests: the test chooses the
// protocol versions and the client certificate, and sees the server certificate it was given.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <optional>
#include <string>

namespace kvgpu::webhook::testing {

struct ClientOptions {
  int min_version = TLS1_2_VERSION;
  int max_version = 0;  // 0: the newest
  std::string cert_pem, key_pem;
  std::shared_ptr<SSL_SESSION> resume = nullptr;  // offer this session from an earlier connection
};

struct HttpResult {
  int status = 0;
  std::string body;
};

class TlsConnection {
 public:
  // Connects to 127.0.0.1:port and completes the handshake; nullopt + `error` on failure.
  static std::unique_ptr<TlsConnection> Open(int port, const ClientOptions& options,
                                             std::string* error);
  ~TlsConnection();
  // One request on the kept-alive connection; nullopt when the connection failed.
  std::optional<HttpResult> Request(const std::string& method, const std::string& path,
                                    const std::string& body,
                                    const std::string& content_type = "application/json");
  // The two halves of Request, for pipelining and raw protocol tests.
  bool Send(const std::string& bytes);
  std::optional<HttpResult> Receive();
  std::string PeerCertificatePem() const;
  std::string Protocol() const { return SSL_get_version(ssl_); }
  // The session to offer next time (TLS 1.3: after a Receive, when tickets have come).
  std::shared_ptr<SSL_SESSION> Session() const {
    return std::shared_ptr<SSL_SESSION>(SSL_get1_session(ssl_), SSL_SESSION_free);
  }
  bool Resumed() const { return SSL_session_reused(ssl_) == 1; }

 private:
  TlsConnection() = default;
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string buffer_;
};

}  // namespace kvgpu::webhook::testing
