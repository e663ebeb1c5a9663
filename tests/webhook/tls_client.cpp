#include "tests/webhook/tls_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kvgpu::webhook::testing {
namespace {

bool UsePem(SSL_CTX* ctx, const std::string& cert_pem, const std::string& key_pem) {
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  bool ok = cert != nullptr && key != nullptr && SSL_CTX_use_certificate(ctx, cert) == 1 &&
            SSL_CTX_use_PrivateKey(ctx, key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  return ok;
}

}  // namespace

std::unique_ptr<TlsConnection> TlsConnection::Open(int port, const ClientOptions& options,
                                                   std::string* error) {
  // A server that closed the connection must show up as a failed write, not kill the test.
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<TlsConnection> conn(new TlsConnection());
  conn->ctx_ = SSL_CTX_new(TLS_client_method());
  // Level 0 lets this client offer TLS 1.0/1.1, so a refusal can only come from the server.
  SSL_CTX_set_security_level(conn->ctx_, 0);
  SSL_CTX_set_min_proto_version(conn->ctx_, options.min_version);
  SSL_CTX_set_max_proto_version(conn->ctx_, options.max_version);
  if (!options.cert_pem.empty() && !UsePem(conn->ctx_, options.cert_pem, options.key_pem)) {
    *error = "bad client certificate";
    return nullptr;
  }
  conn->fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(conn->fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *error = "connect failed";
    return nullptr;
  }
  int one = 1;
  setsockopt(conn->fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval timeout{5, 0};
  setsockopt(conn->fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  conn->ssl_ = SSL_new(conn->ctx_);
  SSL_set_fd(conn->ssl_, conn->fd_);
  if (options.resume) SSL_set_session(conn->ssl_, options.resume.get());
  ERR_clear_error();
  if (SSL_connect(conn->ssl_) != 1) {
    char text[256];
    ERR_error_string_n(ERR_get_error(), text, sizeof(text));
    *error = std::string("handshake failed: ") + text;
    return nullptr;
  }
  return conn;
}

TlsConnection::~TlsConnection() {
  if (ssl_ != nullptr) {
    SSL_shutdown(ssl_);
    SSL_free(ssl_);
  }
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  if (fd_ >= 0) ::close(fd_);
}

std::optional<HttpResult> TlsConnection::Request(const std::string& method, const std::string& path,
                                                 const std::string& body,
                                                 const std::string& content_type) {
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!content_type.empty()) request += "Content-Type: " + content_type + "\r\n";
  request += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (!Send(request)) return std::nullopt;
  return Receive();
}

bool TlsConnection::Send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    int n = SSL_write(ssl_, bytes.data() + sent, static_cast<int>(bytes.size() - sent));
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::optional<HttpResult> TlsConnection::Receive() {
  auto fill = [this]() {
    char chunk[16384];
    int n = SSL_read(ssl_, chunk, sizeof(chunk));
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  };
  size_t header_end;
  while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos)
    if (!fill()) return std::nullopt;
  std::string head = buffer_.substr(0, header_end);
  HttpResult result;
  if (head.size() < 12) return std::nullopt;
  result.status = std::stoi(head.substr(9, 3));
  size_t length = 0;
  for (const char* name : {"\r\nContent-Length: ", "\r\ncontent-length: "}) {
    auto at = head.find(name);
    if (at != std::string::npos) length = std::stoul(head.substr(at + std::string(name).size()));
  }
  while (buffer_.size() < header_end + 4 + length)
    if (!fill()) return std::nullopt;
  result.body = buffer_.substr(header_end + 4, length);
  buffer_.erase(0, header_end + 4 + length);
  return result;
}

std::string TlsConnection::PeerCertificatePem() const {
  X509* cert = SSL_get1_peer_certificate(ssl_);
  if (cert == nullptr) return "";
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(size));
  BIO_free(bio);
  X509_free(cert);
  return out;
}

}  // namespace kvgpu::webhook::testing
