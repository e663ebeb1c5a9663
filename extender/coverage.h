// Whether every vGPU resource the nodes advertise reaches the extender. kube-scheduler calls an
// extender only for pods asking for one of its `managedResources` (exact names); a pod asking for
// a vGPU resource missing there is placed on kubelet's counts alone, and time-sliced GPUs then make
// kubelet fail pods. Given the scheduler's configuration (--scheduler-config), the extender
// counts, per such resource, the nodes that advertise it, as a metric an alert fires on, says so
// in its log when a resource first shows up, and puts a Warning Event on the Node
// (VgpuResourceBypassesExtender) when a node starts advertising one - once per appearance, and no
// faster than the event budget allows, so a cluster of thousands of such nodes, or a node whose
// resource comes and goes, cannot flood the API server.
#pragma once

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "kube/events.h"
#include "kube/list_watch.h"

namespace kvgpu::extender {

// The names under every extender's managedResources in a KubeSchedulerConfiguration (YAML).
Result<std::set<std::string>> ManagedResources(const std::string& scheduler_config);

// The resources starting with `prefix` that a Node object advertises (status.allocatable).
std::set<std::string> AdvertisedResources(const nlohmann::json& node, const std::string& prefix);

inline constexpr const char* kBypassReason = "VgpuResourceBypassesExtender";

// How many Events Coverage may post: `burst` at once, then one per `every`. An appearance the
// budget has no room for is told at a later change of the nodes, when it has.
struct EventBudget {
  int burst = 20;
  std::chrono::milliseconds every{std::chrono::seconds(6)};
};

class Coverage {
 public:
  using Clock = SteadyClock;
  // `events`: where the Node Events go; nullptr for none.
  Coverage(std::set<std::string> managed, std::string prefix, prometheus::Registry& registry,
           kube::EventRecorder* events = nullptr, EventBudget budget = {}, Clock now = nullptr);

  void SyncNodes(const std::vector<nlohmann::json>& nodes);
  void NodeChanged(kube::WatchEventType type, const nlohmann::json& node);
  // Resource -> nodes advertising it that kube-scheduler does not send to the extender.
  std::map<std::string, std::set<std::string>> Unmanaged() const;

 private:
  struct Pending {
    std::string node;
    std::string resource;
  };
  void Record(const nlohmann::json& node);  // with mutex_ held
  // With mutex_ held; returns the Events to post once it is released.
  std::vector<Pending> Publish();
  void Post(const std::vector<Pending>& pending);
  bool TakeToken();  // with mutex_ held

  const std::set<std::string> managed_;
  const std::string prefix_;
  prometheus::Family<prometheus::Gauge>& gauge_;
  mutable std::mutex mutex_;
  std::map<std::string, std::set<std::string>> unmanaged_by_node_;  // node -> resources
  std::set<std::string> reported_;                                  // resources logged once
  std::set<std::string> labelled_;                                  // gauges made so far
  kube::EventRecorder* events_;
  EventBudget budget_;
  Clock now_;
  // (node, resource) appearances told by an Event; one that goes is forgotten, so its return is
  // told again.
  std::set<std::pair<std::string, std::string>> told_;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point refilled_{};
};

}  // namespace kvgpu::extender
