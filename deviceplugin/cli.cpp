#include "deviceplugin/cli.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <vector>

#include "common/host_port.h"
#include "deviceplugin/config.h"

namespace kvgpu::deviceplugin {
namespace {

// Flags whose values are checked before they reach the command line (paths that must not be
// empty, a licensing dir that must be absolute when used).
struct Pending {
  std::string sysfs_root;
  std::string kubelet_dir;
  std::string state_dir;
  std::string config_file;
  std::string kubeconfig;
  std::string licensing_source;
  std::string licensing_dir;
};

void AddFlags(CLI::App& app, CommandLine& args, Pending& pending) {
  app.add_option("--sysfs-root", pending.sysfs_root,
                 "the node's root as seen here: sys/ is read and written under it, dev/ read for "
                 "the readiness check (a test tree or /)")
      ->capture_default_str();
  app.add_option("--kubelet-dir", pending.kubelet_dir,
                 "kubelet's root: device-plugins/ (kubelet.sock, our sockets) and pod-resources/ "
                 "live under it")
      ->capture_default_str();
  app.add_option("--state-dir", pending.state_dir,
                 "where the record of vGPUs this plugin created is kept "
                 "(device-plugin-state.json)")
      ->capture_default_str();
  app.add_option("--node-name", args.node_name, "this node's name (default: $NODE_NAME)");
  app.add_option("--config", pending.config_file, "YAML config file, keys below (optional)");
  app.add_option(
      "--metrics-addr", args.metrics_addr,
      "HOST:PORT to serve Prometheus metrics on /metrics and the health check on /healthz "
      "(default: none)");
  app.add_option("--kubeconfig", pending.kubeconfig,
                 "kubeconfig for the API server (pods on this node, Events); default: the "
                 "in-cluster service account when $KUBERNETES_SERVICE_HOST is set, else none");
  app.add_option("--licensing-source", pending.licensing_source,
                 "directory holding gridd.conf and the NLS client configuration token(s) (the "
                 "DaemonSet mounts the kvgpu-gridd-conf ConfigMap and kvgpu-client-token Secret "
                 "there); published to --licensing-dir for the pods' nvidia-gridd (default: none, "
                 "nothing published)");
  app.add_option("--licensing-dir", pending.licensing_dir,
                 "root-only node directory the injected nvidia-gridd mounts read-only")
      ->capture_default_str();
  app.add_option("--node-readiness-check", args.node_readiness_check,
                 "advertise no vGPUs while the node lacks /dev/kvm, /dev/vhost-vsock, IOMMU "
                 "groups or a vGPU-capable GPU (false: advertise regardless)")
      ->capture_default_str();
}

// Checks what the parser could not and moves it into `args`; the exit code (2) and the message
// on `err` when a value is bad, 0 otherwise.
int Settle(const Pending& pending, CommandLine& args, std::ostream& err) {
  if (!args.metrics_addr.empty() && !ParseHostPort(args.metrics_addr).ok()) {
    err << "--metrics-addr \"" << args.metrics_addr << "\" is not HOST:PORT (e.g. 0.0.0.0:9402)\n";
    return 2;
  }
  if (pending.sysfs_root.empty() || pending.kubelet_dir.empty() || pending.state_dir.empty()) {
    err << "--sysfs-root, --kubelet-dir and --state-dir must not be empty\n";
    return 2;
  }
  if (!pending.licensing_source.empty() &&
      (pending.licensing_dir.empty() || pending.licensing_dir[0] != '/')) {
    err << "--licensing-dir \"" << pending.licensing_dir << "\" must be an absolute path\n";
    return 2;
  }
  args.sysfs_root = pending.sysfs_root;
  args.kubelet_dir = pending.kubelet_dir;
  args.state_dir = pending.state_dir;
  if (!pending.config_file.empty()) args.config_file = pending.config_file;
  if (!pending.kubeconfig.empty()) args.kubeconfig = pending.kubeconfig;
  if (!pending.licensing_source.empty()) {
    args.licensing_source = pending.licensing_source;
    args.licensing_dir = pending.licensing_dir;
  }
  return 0;
}

}  // namespace

ParsedCommandLine ParseCommandLine(int argc, const char* const* argv, std::ostream& out,
                                   std::ostream& err) {
  ParsedCommandLine parsed;
  CommandLine& args = parsed.args;
  if (const char* env = std::getenv("NODE_NAME")) args.node_name = env;

  CLI::App app{
      "kvgpu-device-plugin: offers the node's NVIDIA vGPU types to kubelet as extended resources\n"
      "(device plugin API v1beta1) and creates a vGPU (mdev or vendor-VFIO) for every device\n"
      "kubelet allocates.",
      "kvgpu-device-plugin"};
  app.get_formatter()->column_width(30);
  Pending pending{
      args.sysfs_root.string(),   args.kubelet_dir.string(), args.state_dir.string(), "", "", "",
      args.licensing_dir.string()};
  AddFlags(app, args, pending);
  app.footer(ConfigKeysHelp());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    parsed.exit_code = app.exit(e, out, err);
    return parsed;
  }
  if (int code = Settle(pending, args, err); code != 0) parsed.exit_code = code;
  return parsed;
}

Result<std::optional<kube::Config>> ApiServerConfig(const CommandLine& args) {
  if (args.kubeconfig) {
    auto loaded = kube::LoadKubeconfig(*args.kubeconfig);
    if (!loaded.ok()) {
      return Status::Error(loaded.status().code(), "--kubeconfig " + args.kubeconfig->string() +
                                                       ": " + loaded.status().message());
    }
    return std::optional<kube::Config>(*loaded);
  }
  if (std::getenv("KUBERNETES_SERVICE_HOST") == nullptr) return std::optional<kube::Config>();
  auto loaded = kube::LoadInCluster(kube::InClusterFromEnvironment());
  if (!loaded.ok()) {
    return Status::Error(loaded.status().code(), "in-cluster config: " + loaded.status().message());
  }
  return std::optional<kube::Config>(*loaded);
}

}  // namespace kvgpu::deviceplugin
