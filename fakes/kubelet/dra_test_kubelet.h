// kubelet's side of DRA, written from upstream's protos and kubelet's rules alone (not from our
// server): the plugin watcher finds registration sockets in <root>/plugins_registry, calls
// GetInfo, accepts type "DRAPlugin", picks the first of the plugin's supported_versions it knows
// ("v1.DRAPlugin", then "v1beta1.DRAPlugin": pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go
// validateSupportedServices), reports with NotifyRegistrationStatus, then calls
// NodePrepareResources / NodeUnprepareResources on the endpoint of the chosen version.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvgpu::testing {

struct DraClaim {
  std::string ns;
  std::string uid;
  std::string name;
};

struct DraDeviceAnswer {
  std::vector<std::string> request_names;
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_device_ids;
};

struct DraClaimAnswer {
  std::vector<DraDeviceAnswer> devices;
  std::string error;
};

struct DraRegistration {
  std::string socket;  // the registration socket found
  std::string type;
  std::string driver;
  std::string endpoint;
  std::vector<std::string> supported_versions;
  std::string chosen;  // the service kubelet would call
};

class DraTestKubelet {
 public:
  explicit DraTestKubelet(std::filesystem::path kubelet_root) : root_(std::move(kubelet_root)) {}

  // Waits for a registration socket of `driver` to answer GetInfo (as the plugin watcher does on
  // a socket's creation) and registers it; nullopt on timeout or a plugin kubelet would refuse.
  std::optional<DraRegistration> Register(
      const std::string& driver, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Uses `service` ("v1.DRAPlugin" or "v1beta1.DRAPlugin") instead of the chosen one, as an older
  // kubelet would.
  void ForceService(std::string service) { forced_ = std::move(service); }

  // The gRPC status message in `rpc_error` when the call itself failed.
  std::map<std::string, DraClaimAnswer> Prepare(const std::vector<DraClaim>& claims,
                                                std::string* rpc_error = nullptr);
  std::map<std::string, std::string> Unprepare(const std::vector<DraClaim>& claims,
                                               std::string* rpc_error = nullptr);

 private:
  std::filesystem::path root_;
  std::optional<DraRegistration> registered_;
  std::string forced_;
};

}  // namespace kvgpu::testing
