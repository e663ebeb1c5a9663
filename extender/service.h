// The extender process: the API server's nodes and assigned pods followed into the cluster view,
// the verbs served over HTTPS (https/http_server.h, the webhook's hardened server), and the TLS
// pair reloaded when its files change.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "extender/extender.h"
#include "https/daemon_shell.h"

namespace kvgpu::extender {

// The shell's options (https/daemon_shell.h: listen, TLS files, client CA, metrics, workers,
// reload interval) and the extender's own.
struct ServiceOptions : https::ShellOptions {
  ServiceOptions() { listen = ":8888"; }
  // The API server: a kubeconfig file, or in-cluster when empty.
  std::string kubeconfig;
  bool bind = false;  // serve the bind verb (binds through the API server)
  // kube-scheduler's configuration (--scheduler-config): when given, nodes advertising a vGPU
  // resource its managedResources leaves out are counted and reported (coverage.h).
  std::string scheduler_config;
  ExtenderOptions extender;
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
  int metrics_port() const;  // 0 without --metrics-addr
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
