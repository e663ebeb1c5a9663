// Whether every vGPU resource the nodes advertise reaches the extender. kube-scheduler calls an
// extender only for pods asking for one of its `managedResources` (exact names); a pod asking for
// a vGPU resource missing there is placed on kubelet's counts alone, and time-sliced GPUs then make
// kubelet fail pods. Given the scheduler's configuration (--scheduler-config), the extender
// counts, per such resource, the nodes that advertise it, as a metric an alert fires on, and says
// so in its log when a resource first shows up.
#pragma once

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "kube/list_watch.h"

namespace kvgpu::extender {

// The names under every extender's managedResources in a KubeSchedulerConfiguration (YAML).
Result<std::set<std::string>> ManagedResources(const std::string& scheduler_config);

// The resources starting with `prefix` that a Node object advertises (status.allocatable).
std::set<std::string> AdvertisedResources(const nlohmann::json& node, const std::string& prefix);

class Coverage {
 public:
  Coverage(std::set<std::string> managed, std::string prefix, prometheus::Registry& registry);

  void SyncNodes(const std::vector<nlohmann::json>& nodes);
  void NodeChanged(kube::WatchEventType type, const nlohmann::json& node);
  // Resource -> nodes advertising it that kube-scheduler does not send to the extender.
  std::map<std::string, std::set<std::string>> Unmanaged() const;

 private:
  void Record(const nlohmann::json& node);  // with mutex_ held
  void Publish();                           // with mutex_ held

  const std::set<std::string> managed_;
  const std::string prefix_;
  prometheus::Family<prometheus::Gauge>& gauge_;
  mutable std::mutex mutex_;
  std::map<std::string, std::set<std::string>> unmanaged_by_node_;  // node -> resources
  std::set<std::string> reported_;                                  // resources logged once
  std::set<std::string> labelled_;                                  // gauges made so far
};

}  // namespace kvgpu::extender
