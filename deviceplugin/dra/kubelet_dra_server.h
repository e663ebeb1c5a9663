// The DRA front end on kubelet's sockets (docs/dra-kubelet-plugin.md):
//   <kubelet-root>/plugins/<driver>/dra.sock                the DRAPlugin service, v1 and v1beta1
//   <kubelet-root>/plugins_registry/<driver>-reg.sock       pluginregistration.Registration
// laid out as upstream's helper does (kubernetes/kubernetes
// staging/src/k8s.io/dynamic-resource-allocation/kubeletplugin: KubeletPluginsDir,
// KubeletRegistryDir, "dra.sock", "<driver>-reg.sock"). kubelet's plugin watcher finds the
// registration socket, calls GetInfo (type "DRAPlugin", name = driver, endpoint = dra.sock,
// supported_versions = the services served, newest first: kubelet takes the first it knows,
// pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go validateSupportedServices) and reports with
// NotifyRegistrationStatus. A restarted kubelet rescans the directory on its own; a socket removed
// (kubelet's directory wiped or recreated) is served again within `recheck`.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/background_worker.h"
#include "common/status.h"
#include "deviceplugin/dra/dra_plugin.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace kvgpu::deviceplugin::dra {

// pluginregistration v1 PluginInfo.type of a DRA plugin (k8s.io/kubelet/pkg/apis/
// pluginregistration/v1 constants.go: DRAPlugin = "DRAPlugin").
inline constexpr const char* kDraPluginType = "DRAPlugin";
// The DRAPluginService constants of k8s.io/kubelet/pkg/apis/dra/v1 and v1beta1.
inline constexpr const char* kDraServiceV1 = "v1.DRAPlugin";
inline constexpr const char* kDraServiceV1beta1 = "v1beta1.DRAPlugin";
// More claims than this in one call is no pod's request: refused whole (INVALID_ARGUMENT).
inline constexpr size_t kMaxClaimsPerCall = 256;

// Which of kubelet's calls a claim went through.
enum class DraCall { kPrepare, kUnprepare };
const char* DraCallName(DraCall call);  // "prepare", "unprepare"

struct DraServerOptions {
  std::filesystem::path kubelet_root = "/var/lib/kubelet";
  std::string driver;
  // How often the sockets are checked to still be there (a removal also wakes the check).
  std::chrono::milliseconds recheck{1000};
  // Told after each claim of a call (metrics): how long the plugin took and whether it failed.
  // Runs on gRPC's thread; must be quick.
  std::function<void(DraCall, std::chrono::nanoseconds took, bool ok)> on_claim = nullptr;
};

std::filesystem::path DraPluginDir(const DraServerOptions& options);        // plugins/<driver>
std::filesystem::path DraPluginSocket(const DraServerOptions& options);     // .../dra.sock
std::filesystem::path DraRegistrationDir(const DraServerOptions& options);  // plugins_registry
std::filesystem::path DraRegistrationSocket(const DraServerOptions& options);

// What kubelet said in its last NotifyRegistrationStatus.
struct RegistrationReport {
  bool registered = false;
  std::string error;
};

class KubeletDraServer {
 public:
  KubeletDraServer(DraPlugin& plugin, DraServerOptions options);
  ~KubeletDraServer();
  KubeletDraServer(const KubeletDraServer&) = delete;
  KubeletDraServer& operator=(const KubeletDraServer&) = delete;

  // Serves the DRA socket first, then the registration socket (kubelet must never learn of an
  // endpoint that does not answer), and starts the thread that serves them again when removed.
  Status Start();
  // Stops both servers and removes both sockets (kubelet then deregisters the plugin).
  void Stop();

  std::optional<RegistrationReport> LastReport() const;
  // How many times the sockets were served again after a removal (for tests and logs).
  int reserved() const { return reserved_.load(); }

 private:
  Status ServeDra();
  Status ServeRegistration();
  void Watch(BackgroundWorker::Handle& worker);

  DraPlugin& plugin_;
  DraServerOptions options_;
  std::unique_ptr<grpc::Service> v1_;
  std::unique_ptr<grpc::Service> v1beta1_;
  std::unique_ptr<grpc::Service> registration_;
  std::unique_ptr<grpc::Server> dra_server_;
  std::unique_ptr<grpc::Server> registration_server_;
  mutable std::mutex mutex_;
  std::optional<RegistrationReport> report_;
  std::atomic<int> reserved_{0};
  BackgroundWorker worker_;  // the sockets' recheck; last: stopped before what it uses goes
};

}  // namespace kvgpu::deviceplugin::dra
