// A small HTTPS/1.1 server for the webhook: N worker threads, each with its own epoll set,
// sharing one listening socket; non-blocking OpenSSL; one request handled to completion on the
// thread that read it (handlers here are short, CPU-only). It replaced cpp-httplib, whose
// thread per connection cost a third of the CPU in context switches at 64 connections
// (docs/bench-webhook.md).
//
// HTTP subset: request line + headers up to 64 KiB, bodies by Content-Length only (chunked is
// refused with 411, as the API server always sends a length), keep-alive by default for 1.1,
// pipelining, `Expect: 100-continue`. Idle and slow connections are closed after timeouts.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "webhook/expected.h"

namespace kvgpu::webhook {

struct HttpRequest {
  std::string method;
  std::string path;  // without the query string
  std::string content_type;
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpsServerOptions {
  size_t worker_threads = 2;
  size_t max_body_bytes = 3 * 1024 * 1024;
  std::chrono::seconds idle_timeout{10};     // no request in flight
  std::chrono::seconds request_timeout{10};  // handshake or request started but not complete
  size_t max_connections = 4096;
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
  Expected<int> Listen(const std::string& host, int port);
  // Serves on the worker threads until Stop(); returns when they have finished.
  void Run();
  void Stop();
  bool running() const { return running_; }

 private:
  struct Worker;
  void Serve(Worker& worker);

  SSL_CTX* ctx_;
  Handler handler_;
  HttpsServerOptions options_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: wakes every worker on Stop()
  std::atomic<bool> stopping_{false};
  std::atomic<bool> running_{false};
  std::atomic<size_t> connections_{0};
};

}  // namespace kvgpu::webhook
