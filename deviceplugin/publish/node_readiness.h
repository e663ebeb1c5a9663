// Whether this node can run the VMs of vGPU pods at all, judged per front end. A node labelled
// for vGPUs but missing KVM, vsock, the IOMMU or a vGPU-capable GPU would take pods that then fail
// one by one inside the Kata runtime; the device plugin advertises nothing there instead. A node
// whose GPUs serve DRA is reached through its ResourceSlices and kubelet's DRA plugin
// registration, not through device plugin resources, so those are what its DRA front end needs.
// Each change is told once (log, an Event on the Node) and the gauges kvgpu_node_ready,
// kvgpu_frontend_ready{frontend} and kvgpu_node_prerequisite_missing{frontend,item} stay current.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kube/events.h"

namespace prometheus {
class Gauge;
class Registry;
}  // namespace prometheus

namespace kvgpu::deviceplugin {

// The `frontend` label: what a missing item keeps from serving vGPUs.
inline constexpr const char* kWholeNode = "node";  // every front end
inline constexpr const char* kDevicePluginFrontEnd = "device-plugin";
inline constexpr const char* kDraFrontEnd = "dra";

struct MissingPrerequisite {
  std::string frontend;  // kWholeNode, kDevicePluginFrontEnd or kDraFrontEnd
  std::string item;  // stable, a metric label: kvm, vhost-vsock, iommu, vgpu, registration, slices
  std::string reason;  // what is missing and what to do about it

  bool operator==(const MissingPrerequisite&) const = default;
};

// What the DRA front end shows of itself.
struct DraFacts {
  bool offers_vgpus = false;  // its GPUs offer at least one vGPU type
  // Whether the first registration and publication are still awaited (just started): not yet
  // judged, so that a start is not reported as a failure.
  bool settling = false;
  std::optional<bool> registered;  // kubelet's last NotifyRegistrationStatus; none yet: nullopt
  std::string registration_error;  // what kubelet said when it refused
  std::string registration_socket;
  bool published = false;  // the pool's last write (or check) succeeded
  std::string driver;
};

// Which front ends this node runs, and what each shows.
struct FrontEndFacts {
  // The device plugin serves some GPU (or DRA is off); `offers` whether it advertises a type.
  std::optional<bool> device_plugin_offers;
  std::optional<DraFacts> dra;  // DRA serves some GPU
};

// Every (frontend, item) the gauges can report, in the order they are reported, for the front
// ends `facts` runs.
std::vector<std::pair<std::string, std::string>> NodePrerequisiteItems(const FrontEndFacts& facts);

// `root` is the node's root as the plugin sees it (--sysfs-root): dev/ and sys/ are read under it.
// Presence is what is checked: on the host these are device nodes, and a node whose module is not
// loaded has none. The facts come from the front ends' own views (no second scan).
std::vector<MissingPrerequisite> CheckNodeReadiness(const std::filesystem::path& root,
                                                    const FrontEndFacts& facts);

// Whether `frontend` can serve with `missing`: nothing of the whole node or of it is missing.
bool FrontEndReady(const std::vector<MissingPrerequisite>& missing, const std::string& frontend);

// "device-plugin: vgpu (…); dra: registration (…); node: kvm (…)": for logs and the Event.
std::string DescribeMissing(const std::vector<MissingPrerequisite>& missing);

// Tells of the check's outcome when it changes: a log line, a Warning Event on the Node when a
// front end becomes not ready (Normal when all are ready again), and the gauges, which it keeps
// current on every update.
class NodeReadinessReporter {
 public:
  // `events` may be null (no API server); so may `node` be empty (no Event then). `runs`: the
  // front ends this node runs (their gauges are made now; the facts' values do not matter).
  NodeReadinessReporter(prometheus::Registry& registry, kube::EventRecorder* events,
                        std::string node, const FrontEndFacts& runs);

  // Returns whether the device plugin front end may advertise (the whole node and it are ready).
  bool Update(const std::vector<MissingPrerequisite>& missing);
  // The check is switched off: ready, said once.
  void Disabled();

 private:
  kube::EventRecorder* events_;
  std::string node_;
  prometheus::Gauge* ready_;
  std::map<std::string, prometheus::Gauge*> frontend_ready_;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> missing_;
  std::optional<std::vector<MissingPrerequisite>> last_;
};

}  // namespace kvgpu::deviceplugin
