// The HTTPS server around HandleReview: POST /mutate, GET /healthz, /readyz, /metrics; a second
// plain-HTTP listener for Prometheus on --metrics-addr; a watcher that reloads the TLS pair and
// the config when their files change. HTTPS by https/http_server.h with OpenSSL configured
// by https/tls.h.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "https/daemon_shell.h"
#include "kube/api_client.h"
#include "webhook/config.h"

namespace kvgpu::webhook {

// The shell's options (https/daemon_shell.h: listen, TLS files, client CA, metrics, workers,
// reload interval) and the webhook's own.
struct ServerOptions : https::ShellOptions {
  ServerOptions() { listen = ":8443"; }
  std::string config_file;  // empty: built-in defaults
  // The API server for DRA claim lookups (claim_lookup.h): a kubeconfig, or with `in_cluster`
  // the pod's service account. Neither: claims are not looked at (the webhook reads nothing
  // from the API server). `api` stands in for both (tests).
  std::string kubeconfig;
  bool in_cluster = false;
  std::shared_ptr<kube::ApiTransport> api;
  std::chrono::seconds idle_timeout{10};
  // A handshake or request not complete this long after it began is cut off (slow clients).
  std::chrono::seconds request_timeout{10};
  // Beyond this a connection is evicted for a new one, silent and idle ones first
  // (http_server.h).
  // Each open connection holds ~70 KiB before its first byte (Asio's TLS record buffers and
  // OpenSSL's): 256 of them ~18 MiB, inside the memory limit beside the body budget.
  size_t max_connections = 256;
};

class Server {
 public:
  // Loads the TLS pair and config and binds both listeners; any failure is returned, nothing
  // is left running.
  static Result<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  int metrics_port() const;  // 0 when there is no metrics listener
  // Serves until Stop() (from another thread or a signal handler's helper thread).
  void Run();
  void Stop();
  // The config in force (reloads replace it atomically for new requests).
  std::shared_ptr<const Config> config() const;
  // Checks the watched files once now instead of waiting for the next tick (tests).
  void ReloadNow();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgpu::webhook
