#include "deviceplugin/cli.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <vector>

#include "deviceplugin/config.h"

namespace kvgpu::deviceplugin {
namespace {

bool ValidHostPort(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return false;
  std::string port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  return std::stoi(port) <= 65535;
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
  std::string sysfs_root = args.sysfs_root;
  std::string kubelet_dir = args.kubelet_dir;
  std::string state_dir = args.state_dir;
  std::string config_file;
  app.add_option("--sysfs-root", sysfs_root,
                 "the node's root as seen here: sys/ is read and written under it, dev/ read for "
                 "the readiness check (a test tree or /)")
      ->capture_default_str();
  app.add_option("--kubelet-dir", kubelet_dir,
                 "kubelet's root: device-plugins/ (kubelet.sock, our sockets) and pod-resources/ "
                 "live under it")
      ->capture_default_str();
  app.add_option("--state-dir", state_dir,
                 "where the record of vGPUs this plugin created is kept "
                 "(device-plugin-state.json)")
      ->capture_default_str();
  app.add_option("--node-name", args.node_name, "this node's name (default: $NODE_NAME)");
  app.add_option("--config", config_file, "YAML config file, keys below (optional)");
  app.add_option(
      "--metrics-addr", args.metrics_addr,
      "HOST:PORT to serve Prometheus metrics on /metrics and the health check on /healthz "
      "(default: none)");
  std::string kubeconfig;
  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig for the API server (pods on this node, Events); default: the "
                 "in-cluster service account when $KUBERNETES_SERVICE_HOST is set, else none");
  std::string licensing_source;
  std::string licensing_dir = args.licensing_dir;
  app.add_option("--licensing-source", licensing_source,
                 "directory holding gridd.conf and the NLS client configuration token(s) (the "
                 "DaemonSet mounts the kvgpu-gridd-conf ConfigMap and kvgpu-client-token Secret "
                 "there); published to --licensing-dir for the pods' nvidia-gridd (default: none, "
                 "nothing published)");
  app.add_option("--licensing-dir", licensing_dir,
                 "root-only node directory the injected nvidia-gridd mounts read-only")
      ->capture_default_str();
  app.add_option("--node-readiness-check", args.node_readiness_check,
                 "advertise no vGPUs while the node lacks /dev/kvm, /dev/vhost-vsock, IOMMU "
                 "groups or a vGPU-capable GPU (false: advertise regardless)")
      ->capture_default_str();
  app.footer(ConfigKeysHelp());

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    parsed.exit_code = app.exit(e, out, err);
    return parsed;
  }
  if (!args.metrics_addr.empty() && !ValidHostPort(args.metrics_addr)) {
    err << "--metrics-addr \"" << args.metrics_addr << "\" is not HOST:PORT (e.g. 0.0.0.0:9402)\n";
    parsed.exit_code = 2;
    return parsed;
  }
  if (sysfs_root.empty() || kubelet_dir.empty() || state_dir.empty()) {
    err << "--sysfs-root, --kubelet-dir and --state-dir must not be empty\n";
    parsed.exit_code = 2;
    return parsed;
  }
  args.sysfs_root = sysfs_root;
  args.kubelet_dir = kubelet_dir;
  args.state_dir = state_dir;
  if (!config_file.empty()) args.config_file = config_file;
  if (!kubeconfig.empty()) args.kubeconfig = kubeconfig;
  if (!licensing_source.empty()) {
    if (licensing_dir.empty() || licensing_dir[0] != '/') {
      err << "--licensing-dir \"" << licensing_dir << "\" must be an absolute path\n";
      parsed.exit_code = 2;
      return parsed;
    }
    args.licensing_source = licensing_source;
    args.licensing_dir = licensing_dir;
  }
  return parsed;
}

}  // namespace kvgpu::deviceplugin
