// The plain-HTTP listener for Prometheus on --metrics-addr. prometheus-cpp's Exposer (civetweb)
// gives each connection a thread from a pool of two, so two idle connections made every scrape
// time out. Here connections are asynchronous on one event loop: an idle one costs a
// descriptor and a timer, never the scrape's turn. Each request is answered and the connection
// closed; at most `max_connections` are open, a new one evicting the oldest.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace kvgpu::https {

class MetricsListener {
 public:
  struct Options {
    size_t max_connections = 64;
    // A request not complete this long after the connection opened is cut off.
    std::chrono::seconds request_timeout{5};
    // When set, GET or HEAD /healthz answers 200 "ok" while it returns true, else 503
    // "unhealthy". It runs on the listener's thread: it must be quick.
    std::function<bool()> health;
  };

  // Binds `host:port` ("" host: every address) and serves GET /metrics with `text()` (and
  // /healthz with `options.health`) on its own thread until destroyed.
  static Result<std::unique_ptr<MetricsListener>> Start(const std::string& host, int port,
                                                        std::function<std::string()> text,
                                                        Options options);
  ~MetricsListener();
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;

  int port() const;

 private:
  struct Impl;
  explicit MetricsListener(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvgpu::https
