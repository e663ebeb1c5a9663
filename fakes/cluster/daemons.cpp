#include "fakes/cluster/daemons.h"

#include <fstream>

namespace kvgpu::testing {

namespace fs = std::filesystem;

PluginProcess::PluginProcess(const fs::path& binary, const fs::path& sysfs_root,
                             const fs::path& dir, const FakeNode& node, const std::string& config)
    : dir_(dir),
      process_({binary.string(), "--sysfs-root", sysfs_root.string(), "--kubelet-dir",
                node.kubelet_dir().string(), "--state-dir", (dir / "state").string(), "--node-name",
                node.node_name(), "--config", (dir / "plugin.yaml").string(), "--kubeconfig",
                (dir / "kubeconfig").string()},
               dir / "plugin.log") {
  fs::create_directories(dir / "state");
  std::ofstream(dir / "plugin.yaml") << config;
  node.WriteKubeconfig(dir / "kubeconfig");
}

std::optional<std::string> PluginProcess::Start(FakeNode& node, size_t resources,
                                                std::chrono::milliseconds timeout) {
  const auto registrations = node.kubelet().Registrations().size();
  if (!process_.Start()) return process_.error();
  // A fresh registration of every resource, not the streams of a process that died.
  const bool ready = WaitFor(
      [&] {
        return !process_.Running() ||
               (node.kubelet().Registrations().size() >= registrations + resources &&
                node.WaitForResources(resources, std::chrono::milliseconds(0)));
      },
      timeout);
  if (ready && process_.Running()) return std::nullopt;
  size_t streaming = 0;
  for (const auto& resource : node.kubelet().ConnectedResources()) {
    if (node.kubelet().Updates(resource) > 0) ++streaming;
  }
  return "kvgpu-device-plugin did not register " + std::to_string(resources) + " resources (" +
         std::to_string(node.kubelet().Registrations().size() - registrations) +
         " registrations, " + std::to_string(streaming) + " streaming):\n" + process_.Log();
}

WebhookProcess::WebhookProcess(const fs::path& binary, const fs::path& dir)
    : binary_(binary), dir_(dir), process_({}, dir / "webhook.log") {
  fs::create_directories(dir);
  const CertAndKey serving = ca_.Issue("kvgpu-webhook.kata-vgpu.svc", true);
  std::ofstream(dir / "ca.crt") << ca_.cert_pem();
  std::ofstream(dir / "tls.crt") << serving.cert_pem;
  std::ofstream(dir / "tls.key") << serving.key_pem;
}

std::optional<std::string> WebhookProcess::Start(std::chrono::milliseconds timeout) {
  const std::string log_before = process_.Log();
  std::vector<std::string> argv = {binary_.string(),
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(port_),
                                   "--tls-cert-file",
                                   (dir_ / "tls.crt").string(),
                                   "--tls-key-file",
                                   (dir_ / "tls.key").string()};
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  process_.set_argv(std::move(argv));
  if (!process_.Start()) return process_.error();
  if (port_ == 0) {
    // The port it bound, from its start-up line "... serving HTTPS on 127.0.0.1:0 (port N)".
    const std::string marker = "(port ";
    WaitFor(
        [&] {
          const std::string log = process_.Log().substr(log_before.size());
          const auto at = log.find(marker);
          if (at != std::string::npos) port_ = std::atoi(log.c_str() + at + marker.size());
          return port_ > 0 || !process_.Running();
        },
        timeout);
  }
  const bool ready =
      port_ > 0 && WaitFor([&] { return !process_.Running() || client().Healthy(); }, timeout);
  if (ready && process_.Running()) return std::nullopt;
  return "kvgpu-webhook did not answer /healthz:\n" + process_.Log();
}

}  // namespace kvgpu::testing
