// The real daemons as a node runs them, each a separate process on a FakeNode: the device plugin
// against a sysfs root (a kvgpu-sim mount), the webhook with a certificate made at start.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fakes/cluster/admission_client.h"
#include "fakes/cluster/fake_node.h"
#include "fakes/common/child_process.h"
#include "fakes/common/test_pki.h"

namespace kvgpu::testing {

// kvgpu-device-plugin with its files under `dir`: plugin.yaml (`config` as given), state/,
// kubeconfig (the node's API server), plugin.log.
class PluginProcess {
 public:
  PluginProcess(const std::filesystem::path& binary, const std::filesystem::path& sysfs_root,
                const std::filesystem::path& dir, const FakeNode& node, const std::string& config);

  // Spawns it and waits until `resources` resources are registered with the node's kubelet and
  // streaming; the log when they are not.
  std::optional<std::string> Start(FakeNode& node, size_t resources,
                                   std::chrono::milliseconds timeout = kEventDeadline);
  ChildProcess& process() { return process_; }
  std::filesystem::path state_file() const { return dir_ / "state" / "device-plugin-state.json"; }

 private:
  std::filesystem::path dir_;
  ChildProcess process_;
};

// kvgpu-webhook on 127.0.0.1 with a CA and a serving certificate made at start (the CA is what
// the webhook configuration's caBundle would carry). The first start takes a free port, later
// starts the same one, as a restarted pod behind a Service.
class WebhookProcess {
 public:
  WebhookProcess(const std::filesystem::path& binary, const std::filesystem::path& dir);

  // Spawns it and waits until /healthz answers over verified TLS; the log when it does not.
  std::optional<std::string> Start(std::chrono::milliseconds timeout = kEventDeadline);
  // Flags added to every later start (e.g. --metrics-addr).
  void set_extra_args(std::vector<std::string> args) { extra_args_ = std::move(args); }
  ChildProcess& process() { return process_; }
  int port() const { return port_; }
  AdmissionClient client() const { return AdmissionClient("127.0.0.1", port_, dir_ / "ca.crt"); }
  std::filesystem::path ca_file() const { return dir_ / "ca.crt"; }

 private:
  std::filesystem::path binary_;
  std::filesystem::path dir_;
  TestAuthority ca_{"kata-vgpu-demo-ca"};
  ChildProcess process_;
  int port_ = 0;
  std::vector<std::string> extra_args_;
};

}  // namespace kvgpu::testing
