// The HTTPS/1.1 server of the webhook and the scheduler extender, on Boost.Beast (Asio + OpenSSL):
// the parser, framing and timeouts are Beast's, fuzzed and kept upstream; what this file adds are
// the limits a webhook that fails closed needs against clients that try to stall it
// (docs/webhook.md, "Limits"):
//
// - one request at a time per connection: the next is not read until the answer is written, so
//   a client that pipelines and never reads its answers stops being read (TCP pushes back);
// - per connection: header bytes, body bytes (from Content-Length, before the body is read),
//   handshake/request, idle and write timeouts;
// - server-wide: one memory budget for everything a request costs (docs/webhook.md, "Memory"):
//   body bytes as they arrive, what the handler may spend (reserved before it runs), and the
//   answer until it is written. Large requests together hold at most a part of it, so small
//   ones always have a reserve; when a request does not fit, an older slow body is evicted
//   rather than the newcomer refused (beyond that: 503);
// - a connection cap: a new connection sheds the one silent longest, one in its first moments
//   or speaking (its handshake, a prompt first request) only when every other is too, one being
//   handled never; the shed one leaves the count at once; accept pauses while nothing can be
//   shed; out of descriptors (EMFILE), a spare one is given up to accept and a connection that
//   has not finished its handshake is shed by the same rule;
// - an exception in a handler (bad_alloc included) ends that connection, not the process.
//
// HTTP subset: bodies by Content-Length only (Transfer-Encoding is refused with 411, as the API
// server always sends a length), keep-alive, pipelining, `Expect: 100-continue`.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

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

class HttpsServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  // Takes ownership of `ctx`.
  HttpsServer(SSL_CTX* ctx, Handler handler, HttpsServerOptions options);
  ~HttpsServer();
  HttpsServer(const HttpsServer&) = delete;
  HttpsServer& operator=(const HttpsServer&) = delete;

  // Binds and listens; returns the port (useful with port 0).
  Result<int> Listen(const std::string& host, int port);
  // Serves on the worker threads until Stop(); returns when they have finished.
  void Run();
  void Stop();
  bool running() const;
  // Connections open now (tests, metrics).
  size_t connections() const;
  // Bytes held now against max_buffered_body_bytes (bodies, handler reserves, answers).
  size_t buffered_body_bytes() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The server's request framing (Beast's parser with the limits above) applied to one buffer:
// the fuzzer's entry point. Returns the HTTP status the server would answer a malformed or
// refused request with, 0 for a complete acceptable request, -1 when more bytes are needed.
int FrameRequestForFuzzing(std::string_view bytes, size_t max_header_bytes, size_t max_body_bytes);

}  // namespace kvgpu::https
