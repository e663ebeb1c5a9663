// The command line: a contract the tests, the DaemonSet and operators rely on.
#pragma once

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>

#include "common/cross_program.h"
#include "common/status.h"
#include "kube/config.h"

namespace kvgpu::deviceplugin {

struct CommandLine {
  std::filesystem::path sysfs_root = "/";
  std::filesystem::path kubelet_dir = "/var/lib/kubelet";
  std::filesystem::path state_dir = "/var/lib/kata-vgpu";
  std::string node_name;  // default: $NODE_NAME
  std::optional<std::filesystem::path> config_file;
  std::string metrics_addr;  // HOST:PORT; empty: no metrics endpoint
  // The API server: this kubeconfig; none: in-cluster when $KUBERNETES_SERVICE_HOST is set.
  std::optional<std::filesystem::path> kubeconfig;
  // Licence once per cluster (licensing_publisher.h): the mounted ConfigMap + Secret; none: off.
  std::optional<std::filesystem::path> licensing_source;
  std::filesystem::path licensing_dir{kLicensingDir};
  // Advertise nothing on a node that lacks what vGPU pods need (node_readiness.h).
  bool node_readiness_check = true;

  std::filesystem::path PodResourcesSocket() const {
    return kubelet_dir / "pod-resources" / "kubelet.sock";
  }

  std::filesystem::path DevicePluginDir() const { return kubelet_dir / "device-plugins"; }
  std::filesystem::path KubeletSocket() const { return DevicePluginDir() / "kubelet.sock"; }
};

struct ParsedCommandLine {
  CommandLine args;
  // Set when the program should end now (after --help: 0; after a usage error: non-zero).
  std::optional<int> exit_code;
};

// The API server the command line names: --kubeconfig, else the in-cluster one when
// $KUBERNETES_SERVICE_HOST is set, else none. An error names where the config came from.
Result<std::optional<kube::Config>> ApiServerConfig(const CommandLine& args);

// Prints help or usage errors to `out` / `err`.
ParsedCommandLine ParseCommandLine(int argc, const char* const* argv, std::ostream& out,
                                   std::ostream& err);

}  // namespace kvgpu::deviceplugin
