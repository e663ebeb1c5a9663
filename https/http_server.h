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
//
// The listener, the accept loop, the connection cap and the memory budget's evictions are in
// http_server.cpp; one connection's state machine (handshake, reading a request, the handler, the
// answer) in http_connection.cpp; what both share in http_server_internal.h.
#pragma once

#include <openssl/ssl.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "https/http_server_types.h"

namespace kvgpu::https {

struct HttpsServerImpl;  // http_server_internal.h

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
  std::shared_ptr<HttpsServerImpl> impl_;
};

// The server's request framing (Beast's parser with the limits above) applied to one buffer:
// the fuzzer's entry point. Returns the HTTP status the server would answer a malformed or
// refused request with, 0 for a complete acceptable request, -1 when more bytes are needed.
int FrameRequestForFuzzing(std::string_view bytes, size_t max_header_bytes, size_t max_body_bytes);

}  // namespace kvgpu::https
