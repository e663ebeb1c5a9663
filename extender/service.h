// The extender process: the API server's nodes and assigned pods followed into the cluster view,
// the verbs served over HTTPS (https/http_server.h, the webhook's hardened server), and the TLS
// pair reloaded when its files change.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "extender/extender.h"

namespace kvgpu::extender {

struct ServiceOptions {
  std::string listen = ":8888";
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string client_ca_file;  // empty: no client certificate asked for
  std::string metrics_addr;    // plain-HTTP Prometheus HOST:PORT; empty: none
  // The API server: a kubeconfig file, or in-cluster when empty.
  std::string kubeconfig;
  bool bind = false;  // serve the bind verb (binds through the API server)
  ExtenderOptions extender;
  size_t worker_threads = 2;
  std::chrono::milliseconds reload_interval{1000};
  // The API server for the watches and bind; nullptr: from `kubeconfig`/in-cluster (tests pass
  // their own).
  kube::ApiTransport* api = nullptr;
};

class Service {
 public:
  static Result<std::unique_ptr<Service>> Create(ServiceOptions options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  int port() const;
  // Text exposition of the metrics (tests).
  std::string Metrics() const;
  // Serves until Stop().
  void Run();
  void Stop();
  ClusterView& view();

 private:
  struct Impl;
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgpu::extender
