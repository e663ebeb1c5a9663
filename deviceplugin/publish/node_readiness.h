// Whether this node can run the VMs of vGPU pods at all. A node labelled for vGPUs but missing
// KVM, vsock, the IOMMU or a vGPU-capable GPU would take pods that then fail one by one inside
// the Kata runtime; the plugin advertises nothing there instead, and says why once per change
// (log, a Warning Event on the Node, kvgpu_node_ready / kvgpu_node_prerequisite_missing).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kube/events.h"

namespace prometheus {
class Gauge;
class Registry;
}  // namespace prometheus

namespace kvgpu::deviceplugin {

struct MissingPrerequisite {
  std::string item;    // stable, a metric label: kvm, vhost-vsock, iommu, vgpu
  std::string reason;  // what is missing and what to do about it

  bool operator==(const MissingPrerequisite&) const = default;
};

// Every prerequisite item, in the order they are reported.
const std::vector<std::string>& NodePrerequisiteItems();

// `root` is the node's root as the plugin sees it (--sysfs-root): dev/ and sys/ are read under it.
// `offers_vgpus`: discovery found at least one vGPU type to offer (the resource manager's view, so
// no second scan). Presence is what is checked: on the host these are device nodes, and a node
// whose module is not loaded has none.
std::vector<MissingPrerequisite> CheckNodeReadiness(const std::filesystem::path& root,
                                                    bool offers_vgpus);

// "kvm (…); iommu (…)": for logs and the Event.
std::string DescribeMissing(const std::vector<MissingPrerequisite>& missing);

// Tells of the check's outcome when it changes: a log line, a Warning Event on the Node when it
// becomes not ready (Normal when it recovers), and the gauges kvgpu_node_ready and
// kvgpu_node_prerequisite_missing{item}, which it keeps current on every update.
class NodeReadinessReporter {
 public:
  // `events` may be null (no API server); so may `node` be empty (no Event then).
  NodeReadinessReporter(prometheus::Registry& registry, kube::EventRecorder* events,
                        std::string node);

  // Returns whether the node is ready.
  bool Update(const std::vector<MissingPrerequisite>& missing);
  // The check is switched off: ready, said once.
  void Disabled();

 private:
  kube::EventRecorder* events_;
  std::string node_;
  prometheus::Gauge* ready_;
  std::map<std::string, prometheus::Gauge*> missing_;
  std::optional<std::vector<MissingPrerequisite>> last_;
};

}  // namespace kvgpu::deviceplugin
