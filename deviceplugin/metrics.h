// Prometheus metrics (prometheus-cpp), served at --metrics-addr on /metrics.
#pragma once

#include <memory>
#include <string>

#include "deviceplugin/resource_manager.h"
#include "mdev/status.h"

namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace kvgpu::deviceplugin {

class Metrics : public ManagerObserver {
 public:
  Metrics();
  ~Metrics() override;

  // Starts the HTTP endpoint; a busy or malformed address is an error.
  mdev::Status Serve(const std::string& host_port);

  void OnVgpuCreated(const std::string& resource, std::chrono::nanoseconds took, bool ok) override;
  void OnVgpuRemoved(const std::string& resource, std::chrono::nanoseconds took, bool ok) override;
  void OnAllocation(const std::string& resource, const Status& result) override;
  void OnDevices(const std::map<std::string, DeviceCounts>& per_resource) override;
  void OnRegistration(const std::string& resource, bool ok);
  void OnPush(const std::string& resource, std::chrono::nanoseconds took);

  // Text exposition of everything, for tests.
  std::string Render() const;
  // Where other parts of the daemon (the lifecycle) add their families.
  prometheus::Registry& registry() { return *registry_; }

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace kvgpu::deviceplugin
