// What the HTTPS server (http_server.h) and its handler exchange, a request and its answer, and
// the limits the server keeps (http_server.h's opening comment says what each defends). Apart
// from the server itself, so the server's private core (http_server_internal.h), shared by the
// listener (http_server.cpp) and the connections (http_connection.cpp), can hold them without
// including http_server.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace kvgpu::https {

struct HttpRequest {
  std::string method;
  std::string path;  // without the query string
  std::string content_type;
  std::string body;
  // The client presented a certificate that the verify store accepted (always false when the
  // server does not ask for one).
  bool client_certificate = false;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpsServerOptions {
  size_t worker_threads = 2;
  size_t max_header_bytes = 64 * 1024;
  size_t max_body_bytes = 3 * 1024 * 1024;
  // The server-wide budget of request memory: body bytes held (counted as they arrive), what
  // handlers may spend (handler_bytes, reserved before each runs) and answers not yet written.
  size_t max_buffered_body_bytes = 32 * 1024 * 1024;
  // A request whose Content-Length is above small_body_bytes is large: all large bodies together
  // hold at most max_large_body_bytes (0: three quarters of the budget), the rest is the small
  // requests' reserve.
  size_t small_body_bytes = 256 * 1024;
  size_t max_large_body_bytes = 0;
  // What the handler may spend for a body of this many bytes besides the body itself (parsed
  // document, answer); reserved from the budget before it runs. Empty: twice the body + 64 KiB.
  std::function<size_t(size_t body_bytes)> handler_bytes;
  std::chrono::seconds idle_timeout{10};     // waiting for the next request to begin
  std::chrono::seconds request_timeout{10};  // handshake, or a request begun but not complete
  std::chrono::seconds write_timeout{10};    // an answer the client does not take
  // Each open connection holds ~70 KiB before its first byte (Asio's TLS record buffers and
  // OpenSSL's): 256 of them ~18 MiB, inside the memory limit beside the body budget.
  size_t max_connections = 256;
  // After accept fails for lack of file descriptors.
  std::chrono::milliseconds accept_backoff{100};
};

}  // namespace kvgpu::https
