// The lifecycle's metrics, on the daemon's registry. kvgpu_deviceplugin_vgpus_without_pod is the
// one to alert on: vGPUs of ours that no live pod holds. It rises for the grace period after
// every pod deletion; staying up longer means removals fail (docs/operations.md has the alert).
#pragma once

#include <memory>

#include "deviceplugin/lifecycle/lifecycle.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace kvgpu::deviceplugin {

class LifecycleMetrics : public LifecycleObserver {
 public:
  explicit LifecycleMetrics(prometheus::Registry& registry);
  ~LifecycleMetrics() override;

  void OnPass(const PassPlan& plan, size_t foreign, std::chrono::nanoseconds took) override;
  void OnRemoval(const std::string& resource, const Status& result) override;
  void OnSources(bool kubelet, bool api) override;

 private:
  struct Families;
  std::unique_ptr<Families> families_;
};

}  // namespace kvgpu::deviceplugin
