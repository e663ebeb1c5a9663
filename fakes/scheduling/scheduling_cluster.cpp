#include "fakes/scheduling/scheduling_cluster.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/cross_program.h"
#include "fakes/common/eventually.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::testing {

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr const char* kNodesPath = "/api/v1/nodes";
constexpr std::string_view kPodsPath = "/api/v1/namespaces/";

size_t HealthyCount(const std::map<std::string, std::string>& devices) {
  return static_cast<size_t>(std::count_if(devices.begin(), devices.end(),
                                           [](const auto& d) { return d.second == "Healthy"; }));
}

}  // namespace

Result<json> NodeObjects::Get(const std::string& path, kube::Canceller*) {
  const std::string prefix = std::string(kNodesPath) + "/";
  if (path.starts_with(kPodsPath) && pods_.get) return pods_.get(path.substr(kPodsPath.size()));
  std::lock_guard lock(mutex_);
  if (path.starts_with(prefix)) {
    auto it = nodes_.find(path.substr(prefix.size()));
    if (it == nodes_.end()) return Status::Remote(ErrorCode::kHttp, "node not found", 404);
    return it->second;
  }
  if (path != kNodesPath) return Status::Remote(ErrorCode::kHttp, "not found", 404);
  json items = json::array();
  for (const auto& [name, node] : nodes_) items.push_back(node);
  return json{{"kind", "NodeList"},
              {"metadata", {{"resourceVersion", std::to_string(version_)}}},
              {"items", items}};
}

Result<json> NodeObjects::Post(const std::string& path, const json& body, kube::Canceller*) {
  if (path.starts_with(kPodsPath) && path.ends_with("/binding") && pods_.bind) {
    return pods_.bind(path.substr(kPodsPath.size(), path.size() - kPodsPath.size() - 8), body);
  }
  return Status::Remote(ErrorCode::kHttp, "method not allowed", 405);
}

Result<json> NodeObjects::Patch(const std::string& path, const json& body,
                                const std::string& content_type, kube::Canceller*) {
  const std::string prefix = std::string(kNodesPath) + "/";
  if (!path.starts_with(prefix) || content_type != "application/merge-patch+json") {
    return Status::Remote(ErrorCode::kHttp, "unsupported patch", 415);
  }
  const std::string name = path.substr(prefix.size());
  std::lock_guard lock(mutex_);
  json& node = nodes_[name];
  if (node.is_null())
    node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
  json patch = body;
  // The API server's optimistic concurrency: a resourceVersion in the patch is a precondition.
  if (patch.contains("metadata") && patch["metadata"].contains("resourceVersion")) {
    if (patch["metadata"]["resourceVersion"] != node["metadata"].value("resourceVersion", "")) {
      return Status::Remote(
          ErrorCode::kHttp,
          "Operation cannot be fulfilled on nodes \"" + name + "\": the object has been modified",
          409);
    }
    patch["metadata"].erase("resourceVersion");
  }
  node.merge_patch(patch);
  node["metadata"]["resourceVersion"] = std::to_string(++version_);
  return node;
}

Status NodeObjects::Stream(const std::string&, std::chrono::milliseconds,
                           const std::function<void()>&,
                           const std::function<bool(std::string_view)>&, kube::Canceller*) {
  return Status::Error(ErrorCode::kTransport, "watches are not served here");
}

std::vector<json> NodeObjects::Nodes() const {
  std::lock_guard lock(mutex_);
  // A copy per node: the caller reads it while the plugins go on patching.
  std::vector<json> out;
  for (const auto& [name, node] : nodes_) out.push_back(node);
  return out;
}

std::optional<std::string> NodeObjects::Annotation(const std::string& node) const {
  std::lock_guard lock(mutex_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  const json* annotations = &(*it).second["metadata"];
  if (!annotations->contains("annotations")) return std::nullopt;
  const json& all = (*annotations)["annotations"];
  auto found = all.find(scheduling::kNodeStateAnnotation);
  if (found == all.end() || !found->is_string()) return std::nullopt;
  return found->get<std::string>();
}

json ClusterPod::Object() const {
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", uid()}}},
      {"spec",
       {{"runtimeClassName", "kata"},
        {"containers",
         {{{"name", "main"}, {"resources", {{"limits", {{resource, std::to_string(count)}}}}}}}}}},
      {"status",
       {{"phase", state == State::kFailed    ? "Failed"
                  : state == State::kRunning ? "Running"
                                             : "Pending"}}}};
  // An assumed pod is bound in kube-scheduler's cache only.
  if (!node.empty() && state != State::kAssumed) pod["spec"]["nodeName"] = node;
  return pod;
}

GpuNode::GpuNode(std::string name, NodeObjects& api, const std::string& profile,
                 deviceplugin::GpuModeProbeChoice probe)
    : name_(std::move(name)), sim_(profile), kubelet_(sim_.dir() / "kubelet" / "device-plugins") {
  if (!kubelet_.Start()) throw std::runtime_error("fake kubelet did not start");
  deviceplugin::DaemonOptions options;
  options.args.sysfs_root = sim_.model().root();
  options.args.kubelet_dir = sim_.dir() / "kubelet";
  options.args.state_dir = sim_.dir() / "state";
  options.args.node_name = name_;
  options.args.node_readiness_check = false;
  deviceplugin::Config config;
  config.udev_events = false;
  config.rescan_interval = 100ms;
  config.lifecycle.grace_period = 0ms;
  config.lifecycle.poll_interval = 100ms;
  config.lifecycle.watch_pods = false;
  config.lifecycle.events = false;
  config.scheduler_state.min_interval = 20ms;
  config.gpu_mode_probe = probe;
  options.config = config;
  options.io = &sim_.model();
  options.retry_initial = 20ms;
  options.retry_max = 200ms;
  options.podresources = &podresources_;
  // How long a vGPU no pod lists yet is taken as its pod's (product default 5 s: kubelet lists a
  // pod once its containers exist). Admit lists a fresh device's pod before Allocate, so this
  // clock matters only for a device whose earlier vGPU is still there; it is kept short because
  // it also holds back the removal of a deleted pod's young vGPU, which the churn tests wait for.
  options.settle = 1000ms;
  options.api = &api;
  options_ = options;
  daemon_ = std::make_unique<deviceplugin::Daemon>(options_);
  Status started = daemon_->Start();
  if (!started.ok()) throw std::runtime_error("device plugin: " + started.ToString());
}

void GpuNode::RestartPlugin(int state_version) {
  daemon_->Stop();
  daemon_.reset();
  // kubelet sees the endpoints go before the new plugin registers (HeldDevices then reads their
  // devices as unhealthy): Settled waits for the new plugin's lists and never takes the stopped
  // plugin's last lists for them.
  if (!kubelet_.WaitUntil([&] { return kubelet_.ConnectedResources().empty(); })) {
    throw std::runtime_error("kubelet still holds a stopped plugin's ListAndWatch streams");
  }
  options_.config.scheduler_state.version = state_version;
  daemon_ = std::make_unique<deviceplugin::Daemon>(options_);
  Status started = daemon_->Start();
  if (!started.ok()) throw std::runtime_error("device plugin: " + started.ToString());
}

GpuNode::~GpuNode() {
  daemon_->Stop();
  kubelet_.Stop();
}

uint32_t GpuNode::Allocatable(const std::string& resource) const {
  return static_cast<uint32_t>(HealthyCount(kubelet_.HeldDevices(resource)));
}

size_t GpuNode::AllocatedDevices() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [resource, ids] : allocated_) n += ids.size();
  return n;
}

Status GpuNode::Admit(const ClusterPod& pod) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> available;
  for (const auto& [id, health] : kubelet_.HeldDevices(pod.resource)) {
    if (health == "Healthy" && !allocated_[pod.resource].contains(id)) available.push_back(id);
  }
  if (available.size() < pod.count) {
    // kubelet's device manager: the pod fails with UnexpectedAdmissionError.
    return Status::Error(ErrorCode::kNoRoom,
                         "UnexpectedAdmissionError: requested number of devices unavailable for " +
                             pod.resource + ". Requested: " + std::to_string(pod.count) +
                             ", Available: " + std::to_string(available.size()));
  }
  v1beta1::PreferredAllocationRequest request;
  auto* container = request.add_container_requests();
  for (const std::string& id : available) container->add_available_deviceids(id);
  container->set_allocation_size(static_cast<int32_t>(pod.count));
  v1beta1::PreferredAllocationResponse preferred;
  std::vector<std::string> ids;
  grpc::Status asked = kubelet_.GetPreferredAllocation(pod.resource, request, &preferred);
  if (asked.ok() && preferred.container_responses_size() == 1) {
    for (const std::string& id : preferred.container_responses(0).deviceids()) ids.push_back(id);
  }
  std::string fallback;
  if (ids.size() != pod.count) {
    // kubelet picks on its own when the plugin's preference is unusable.
    fallback =
        " (GetPreferredAllocation: " + (asked.ok() ? "wrong size" : asked.error_message()) + ")";
    ids.assign(available.begin(), available.begin() + pod.count);
  }
  // kubelet lists the pod's devices right after Allocate returns, and the plugin keeps a vGPU
  // that no pod lists for its settle time only. Here kubelet and the plugin share one process,
  // which a loaded machine can stall for longer than that between the two steps: the plugin then
  // removed a running pod's new vGPU and the node never settled again (issue #41, reproduced by
  // stopping the process for a second or two now and then). Devices with no vGPU yet are listed
  // before the call: the plugin reads no holder for them, so listing them early changes nothing
  // it decides. A device whose earlier vGPU still exists is listed after, as kubelet does: who
  // holds it decides whether that vGPU is handed on.
  bool listed_early = true;
  for (const deviceplugin::Device& device : daemon_->manager().Devices(pod.resource)) {
    if (device.vgpu_exists && std::find(ids.begin(), ids.end(), device.id) != ids.end()) {
      listed_early = false;
    }
  }
  const kubelet::PodResources listing{"default", pod.name, {{"main", {{pod.resource, ids}}}}};
  if (listed_early) {
    running_.push_back(listing);
    podresources_.SetPods(running_);
  }
  v1beta1::AllocateResponse response;
  grpc::Status allocated = kubelet_.Allocate(pod.resource, {ids}, &response);
  if (!allocated.ok()) {
    if (listed_early) {
      running_.pop_back();
      podresources_.SetPods(running_);
    }
    if (std::getenv("KVGPU_DEBUG_ADMIT") != nullptr) {
      std::string dump = "\n  asked:";
      for (const std::string& id : ids) dump += " " + id;
      dump += "\n  plugin lists now:";
      for (const auto& d : daemon_->manager().Devices(pod.resource)) {
        dump += " " + d.id.substr(d.id.rfind('-') - 3) + (d.vgpu_exists ? "*" : "");
      }
      dump += "\n  kubelet offered:";
      for (const std::string& id : available) dump += " " + id.substr(id.rfind('-') - 3);
      fallback += dump;
    }
    return Status::Error(ErrorCode::kNoRoom, "UnexpectedAdmissionError: Allocate failed: " +
                                                 allocated.error_message() + fallback);
  }
  allocated_[pod.resource].insert(ids.begin(), ids.end());
  pod_devices_[pod.key()] = ids;
  if (!listed_early) {
    running_.push_back(listing);
    podresources_.SetPods(running_);
  }
  return Status::Ok();
}

void GpuNode::Remove(const ClusterPod& pod) {
  std::lock_guard lock(mutex_);
  for (const std::string& id : pod_devices_[pod.key()]) allocated_[pod.resource].erase(id);
  pod_devices_.erase(pod.key());
  std::erase_if(running_, [&](const kubelet::PodResources& p) { return p.name == pod.name; });
  podresources_.SetPods(running_);
}

bool GpuNode::Settled(const NodeObjects& api) {
  return Unsettled(api).empty();
}

std::string GpuNode::Unsettled(const NodeObjects& api) {
  const size_t allocated = AllocatedDevices();
  const size_t vgpus = sim_.model().VgpuIds().size();
  if (vgpus != allocated) {
    return std::to_string(vgpus) + " vGPUs in the kernel, " + std::to_string(allocated) +
           " devices allocated";
  }
  std::optional<std::string> text = api.Annotation(name_);
  if (!text) return "no state published";
  Result<scheduling::NodeVgpuState> state = scheduling::ParseNodeState(*text);
  if (!state.ok()) return "published state unreadable: " + state.status().ToString();
  if (!state->unattributed.empty()) return "published state has unattributed vGPUs: " + *text;
  size_t used = 0;
  std::map<std::string, uint32_t> published;  // resource -> used + free, over its GPUs
  for (const scheduling::GpuSlots& gpu : state->gpus) {
    for (const auto& [resource, slots] : gpu.resources) {
      used += slots.used;
      published[resource] += slots.used + slots.free;
    }
  }
  if (used != allocated) {
    return "published state has " + std::to_string(used) + " used, " + std::to_string(allocated) +
           " devices allocated (generation " + std::to_string(state->generation) + ")";
  }
  deviceplugin::ResourceManager& manager = daemon_->manager();
  // The plugin's view is the kernel's now (a rescan after a removal brings back the other types
  // of a GPU that became free). Its lists and the published state are computed from that view,
  // capped where the kernel's counts promise more than fits (vendor VFIO: every free VF lists a
  // type the GPU takes once), so they are compared with each other, not with the raw counts.
  Result<mdev::Inventory> inventory = sim_.node().Scan();
  if (!inventory.ok()) return "kernel scan: " + inventory.status().ToString();
  const mdev::Inventory seen = manager.Inventory();
  std::map<std::pair<std::string, std::string>, uint32_t> seen_available;  // (parent, type)
  for (const mdev::Parent& parent : seen.parents) {
    for (const mdev::VgpuType& type : parent.types) {
      seen_available[{parent.name, type.id}] = type.available_instances;
    }
  }
  for (const mdev::Parent& parent : inventory->parents) {
    for (const mdev::VgpuType& type : parent.types) {
      auto it = seen_available.find({parent.name, type.id});
      const uint32_t plugin = it == seen_available.end() ? 0 : it->second;
      if (plugin != type.available_instances) {
        return "the plugin sees " + std::to_string(plugin) + " available of " + type.id + " on " +
               parent.name + ", the kernel " + std::to_string(type.available_instances);
      }
    }
  }
  for (const std::string& resource : manager.Resources()) {
    const std::vector<deviceplugin::Device> devices = manager.Devices(resource);
    const auto healthy = static_cast<uint32_t>(std::count_if(
        devices.begin(), devices.end(), [](const deviceplugin::Device& d) { return d.healthy; }));
    const uint32_t in_state = published.contains(resource) ? published.at(resource) : 0;
    if (in_state != healthy) {
      return "published state has " + std::to_string(in_state) + " of " + resource +
             ", the plugin lists " + std::to_string(healthy) + " (generation " +
             std::to_string(state->generation) + ")";
    }
  }
  for (const std::string& resource : manager.Resources()) {
    const std::vector<deviceplugin::Device> devices = manager.Devices(resource);
    const auto healthy = static_cast<size_t>(std::count_if(
        devices.begin(), devices.end(), [](const deviceplugin::Device& d) { return d.healthy; }));
    const size_t held = HealthyCount(kubelet_.HeldDevices(resource));
    if (healthy != held) {
      return "kubelet holds " + std::to_string(held) + " healthy " + resource +
             ", the plugin lists " + std::to_string(healthy);
    }
  }
  return "";
}

// An extender replica: its own view, fed by its own (late) watches.
struct SchedulingCluster::Replica {
  extender::ClusterView view;
  extender::Extender extender;  // on the view's clocks
  size_t last_watch_due = 0;    // when its pod watch delivers the last event sent so far
  Replica(kube::ApiTransport* api, std::chrono::milliseconds assume_for, const ClusterClock& clock)
      : view(
            std::string(kVgpuResourcePrefix), assume_for, [&clock] { return clock.Steady(); },
            [&clock] { return clock.UnixMs(); }),
        extender(view, extender::ExtenderOptions{}, api) {
    view.SetFollowing("nodes", true);
    view.SetFollowing("pods", true);
  }
};

SchedulingCluster::SchedulingCluster(size_t nodes, bool use_extender, const std::string& profile,
                                     LoopTiming timing, deviceplugin::GpuModeProbeChoice probe)
    : use_extender_(use_extender), timing_(timing), random_(timing.seed) {
  api_.ServePods(
      {[this](const std::string& path) { return ApiGetPod(path); },
       [this](const std::string& path, const json& binding) { return ApiBind(path, binding); }});
  for (size_t i = 0; i < nodes; ++i) {
    nodes_.push_back(std::make_unique<GpuNode>("node-" + std::to_string(i), api_, profile, probe));
  }
  for (size_t i = 0; i < std::max<size_t>(timing_.replicas, 1); ++i) {
    replicas_.push_back(std::make_unique<Replica>(&api_, timing_.assume_for, clock_));
  }
}

SchedulingCluster::~SchedulingCluster() = default;

void SchedulingCluster::Submit(std::vector<ClusterPod> pods) {
  for (ClusterPod& pod : pods) pods_.push_back(std::move(pod));
}

size_t SchedulingCluster::Count(ClusterPod::State state) const {
  return static_cast<size_t>(std::count_if(pods_.begin(), pods_.end(),
                                           [&](const ClusterPod& p) { return p.state == state; }));
}

ClusterPod* SchedulingCluster::Find(const std::string& name) {
  auto it =
      std::find_if(pods_.begin(), pods_.end(), [&](const ClusterPod& p) { return p.name == name; });
  return it == pods_.end() ? nullptr : &*it;
}

void SchedulingCluster::NextCycle() {
  ++cycle_;
  clock_.Advance(timing_.cycle);
}

size_t SchedulingCluster::Draw(size_t max) {
  return std::uniform_int_distribution<size_t>(0, max)(random_);
}

uint32_t SchedulingCluster::Requested(const std::string& node, const std::string& resource) const {
  uint32_t requested = 0;
  for (const ClusterPod& other : pods_) {
    const bool holds = other.state == ClusterPod::State::kAssumed ||
                       other.state == ClusterPod::State::kBound ||
                       other.state == ClusterPod::State::kRunning;
    if (holds && other.node == node && other.resource == resource) requested += other.count;
  }
  return requested;
}

std::string SchedulingCluster::Choose(const ClusterPod& pod) {
  // kube-scheduler's own NodeResourcesFit: allocatable minus what pods bound or assumed there
  // request.
  std::vector<std::string> candidates;
  std::map<std::string, uint32_t> room;
  for (const auto& node : nodes_) {
    const uint32_t requested = Requested(node->name(), pod.resource);
    const uint32_t allocatable = node->Allocatable(pod.resource);
    if (allocatable >= requested + pod.count) {
      candidates.push_back(node->name());
      room[node->name()] = allocatable - requested;
    }
  }
  if (candidates.empty()) return "";
  if (!use_extender_) {
    // Without an extender, the most room for the resource wins (ties by name).
    return *std::max_element(candidates.begin(), candidates.end(),
                             [&](const std::string& a, const std::string& b) {
                               return room[a] != room[b] ? room[a] < room[b] : a > b;
                             });
  }
  // The Service sends each call to any replica.
  Replica& replica = *replicas_[Draw(replicas_.size() - 1)];
  json args = {{"Pod", pod.Object()}, {"Nodes", nullptr}, {"NodeNames", candidates}};
  json filtered = replica.extender.Filter(args);
  if (!filtered["Error"].get<std::string>().empty() || filtered["NodeNames"].empty()) return "";
  // kube-scheduler scores (and calls prioritize) only when more than one node is feasible
  // (schedulePod in schedule_one.go): seen against the real one in tests/k8s/scenario_extender.py.
  if (filtered["NodeNames"].size() == 1) return filtered["NodeNames"][0].get<std::string>();
  args["NodeNames"] = filtered["NodeNames"];
  json scores = replicas_[Draw(replicas_.size() - 1)]->extender.Prioritize(args);
  std::string best;
  int64_t best_score = -1;
  for (const json& entry : scores) {
    const int64_t score = entry["Score"].get<int64_t>();
    const std::string host = entry["Host"].get<std::string>();
    if (score > best_score || (score == best_score && host < best)) {
      best = host;
      best_score = score;
    }
  }
  return best;
}

void SchedulingCluster::Publish(const ClusterPod& pod, kube::WatchEventType type) {
  if (!use_extender_) return;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    // A watch is late but in order: no event overtakes one sent before it.
    const size_t due = std::max(cycle_ + Draw(timing_.watch_lag), replicas_[i]->last_watch_due);
    replicas_[i]->last_watch_due = due;
    events_.push_back({due, Event::Kind::kWatch, pod.name, i, type, pod.Object()});
  }
}

Result<json> SchedulingCluster::ApiGetPod(const std::string& path) {
  // "<namespace>/pods/<name>"
  const size_t slash = path.rfind('/');
  ClusterPod* pod = Find(path.substr(slash + 1));
  if (pod == nullptr || !path.starts_with("default/pods/")) {
    return Status::Remote(ErrorCode::kHttp, "pods not found", 404);
  }
  return pod->Object();
}

Result<json> SchedulingCluster::ApiBind(const std::string& path, const json& binding) {
  // "<namespace>/pods/<name>": the API server binds a pod once, to the node in the Binding.
  ClusterPod* pod = Find(path.substr(path.rfind('/') + 1));
  if (pod == nullptr) return Status::Remote(ErrorCode::kHttp, "pods not found", 404);
  if (pod->state != ClusterPod::State::kAssumed) {
    return Status::Remote(ErrorCode::kHttp, "pod " + pod->name + " is already assigned", 409);
  }
  pod->node = binding["target"]["name"].get<std::string>();
  pod->state = ClusterPod::State::kBound;
  return binding;
}

// The binding goroutine's call: the extender's bind verb (bindVerb), or the default binder.
bool SchedulingCluster::BindLands(ClusterPod& pod) {
  if (!use_extender_) {
    pod.state = ClusterPod::State::kBound;
    return true;
  }
  const json args = {{"PodName", pod.name},
                     {"PodNamespace", "default"},
                     {"PodUID", pod.uid()},
                     {"Node", pod.node}};
  const std::string node = pod.node;
  json result = replicas_[Draw(replicas_.size() - 1)]->extender.Bind(args);
  if (result["Error"].get<std::string>().empty() && pod.state == ClusterPod::State::kBound) {
    return true;
  }
  // kube-scheduler forgets the assumed pod and queues it again.
  if (pod.state == ClusterPod::State::kAssumed) {
    pod.state = ClusterPod::State::kPending;
    pod.node.clear();
  }
  ++refused_binds_;
  return false;
}

void SchedulingCluster::Land(const Event& event, size_t* bound) {
  ClusterPod* pod = Find(event.pod);
  switch (event.kind) {
    case Event::Kind::kBind:
      if (pod == nullptr || pod->state != ClusterPod::State::kAssumed) return;
      if (!BindLands(*pod)) return;
      ++*bound;
      Publish(*pod, kube::WatchEventType::kAdded);
      events_.push_back(
          {cycle_ + 1 + Draw(timing_.admit_latency), Event::Kind::kAdmit, pod->name, 0, {}, {}});
      return;
    case Event::Kind::kWatch: {
      extender::ClusterView& view = replicas_[event.replica]->view;
      view.PodChanged(event.type, *kube::ParsePod(event.object));
      return;
    }
    case Event::Kind::kAdmit: {
      if (pod == nullptr || pod->state != ClusterPod::State::kBound) return;
      auto node = std::find_if(nodes_.begin(), nodes_.end(),
                               [&](const auto& n) { return n->name() == pod->node; });
      Status admitted = (*node)->Admit(*pod);
      pod->state = admitted.ok() ? ClusterPod::State::kRunning : ClusterPod::State::kFailed;
      if (!admitted.ok()) pod->failure = admitted.message();
      Publish(*pod, kube::WatchEventType::kModified);
      return;
    }
  }
}

void SchedulingCluster::RunDue(size_t cycle, size_t* bound) {
  // In the order they fell due (stable: events due together keep the order they were made in).
  for (;;) {
    auto next = std::min_element(events_.begin(), events_.end(),
                                 [](const Event& a, const Event& b) { return a.due < b.due; });
    if (next == events_.end() || next->due > cycle) return;
    Event event = std::move(*next);
    events_.erase(next);
    Land(event, bound);
  }
}

size_t SchedulingCluster::ScheduleAndAdmit(const std::function<void(size_t)>& each_cycle) {
  size_t bound = 0;
  std::vector<std::string> queue;
  for (const ClusterPod& pod : pods_) {
    if (pod.state == ClusterPod::State::kPending) queue.push_back(pod.name);
  }
  for (size_t n = 0; n < queue.size(); ++n, NextCycle()) {
    if (each_cycle) each_cycle(n);
    RunDue(cycle_, &bound);
    for (auto& replica : replicas_) {
      if (std::bernoulli_distribution(timing_.node_watch_p)(random_)) {
        replica->view.SyncNodes(api_.Nodes());
      }
    }
    ClusterPod* pod = Find(queue[n]);
    if (pod == nullptr || pod->state != ClusterPod::State::kPending) continue;
    const std::string node = Choose(*pod);
    if (node.empty()) continue;
    // Assumed; the binding cycle runs on its own and the next scheduling cycle starts now.
    pod->node = node;
    pod->state = ClusterPod::State::kAssumed;
    events_.push_back(
        {cycle_ + Draw(timing_.bind_latency), Event::Kind::kBind, pod->name, 0, {}, {}});
  }
  while (!events_.empty()) {
    RunDue(cycle_, &bound);
    NextCycle();
  }
  return bound;
}

void SchedulingCluster::RestartScheduler() {
  std::erase_if(events_, [](const Event& e) { return e.kind == Event::Kind::kBind; });
  for (ClusterPod& pod : pods_) {
    if (pod.state == ClusterPod::State::kAssumed) {
      pod.state = ClusterPod::State::kPending;
      pod.node.clear();
    }
  }
}

void SchedulingCluster::RestartExtender(size_t replica) {
  std::erase_if(events_, [&](const Event& e) {
    return e.kind == Event::Kind::kWatch && e.replica == replica;
  });
  replicas_[replica] = std::make_unique<Replica>(&api_, timing_.assume_for, clock_);
  // Its list-then-watch: the nodes, and the pods the API server has bound.
  replicas_[replica]->view.SyncNodes(api_.Nodes());
  std::vector<kube::PodInfo> bound;
  for (const ClusterPod& pod : pods_) {
    if (pod.state == ClusterPod::State::kBound || pod.state == ClusterPod::State::kRunning) {
      bound.push_back(*kube::ParsePod(pod.Object()));
    }
  }
  replicas_[replica]->view.SyncPods(bound);
}

void SchedulingCluster::Delete(const std::string& name) {
  ClusterPod* pod = Find(name);
  if (pod == nullptr) return;
  if (pod->state == ClusterPod::State::kRunning) {
    for (const auto& node : nodes_) {
      if (node->name() == pod->node) node->Remove(*pod);
    }
  }
  Publish(*pod, kube::WatchEventType::kDeleted);
  pods_.erase(pods_.begin() + (pod - pods_.data()));
}

bool SchedulingCluster::Settle(std::chrono::milliseconds timeout) {
  const bool settled = Eventually(
      [&] {
        return std::all_of(nodes_.begin(), nodes_.end(),
                           [&](const auto& node) { return node->Settled(api_); });
      },
      timeout, 20ms);
  // A node that never settles is a liveness bug or a deadline too short: which check it failed
  // tells them apart.
  if (!settled) {
    for (const auto& node : nodes_) {
      const std::string why = node->Unsettled(api_);
      if (!why.empty())
        std::fprintf(stderr, "%s not settled: %s\n", node->name().c_str(), why.c_str());
    }
  }
  // Given time, every replica's node watch catches up.
  for (auto& replica : replicas_) replica->view.SyncNodes(api_.Nodes());
  return settled;
}

std::string SchedulingCluster::Explain(const ClusterPod& pod) {
  std::string out;
  Replica& replica = *replicas_.front();
  replica.view.SyncNodes(api_.Nodes());
  std::vector<std::string> names;
  for (const auto& node : nodes_) names.push_back(node->name());
  json args = {{"Pod", pod.Object()}, {"Nodes", nullptr}, {"NodeNames", names}};
  json filtered = replica.extender.Filter(args);
  const std::string type = "nvidia-" + pod.resource.substr(kVgpuResourcePrefix.size());
  for (const auto& node : nodes_) {
    const uint32_t requested = Requested(node->name(), pod.resource);
    out += node->name() + ": allocatable " + std::to_string(node->Allocatable(pod.resource)) +
           ", requested " + std::to_string(requested) + "; kernel can make";
    if (auto inventory = node->sim().node().Scan(); inventory.ok()) {
      for (const mdev::Parent& parent : inventory->parents) {
        for (const mdev::VgpuType& t : parent.types) {
          if (t.id == type) out += " " + std::to_string(t.available_instances);
        }
      }
    }
    const std::string& name = node->name();
    if (filtered["FailedNodes"].contains(name)) {
      out += "; extender: " + filtered["FailedNodes"][name].get<std::string>();
    } else if (filtered["FailedAndUnresolvableNodes"].contains(name)) {
      out += "; extender: " + filtered["FailedAndUnresolvableNodes"][name].get<std::string>();
    } else {
      out += "; extender: fits";
    }
    out += "\n  state: " + api_.Annotation(name).value_or("none") + "\n";
  }
  return out;
}

bool SchedulingCluster::FitsSomewhere(const std::string& resource, uint32_t count) {
  const std::string type = "nvidia-" + resource.substr(kVgpuResourcePrefix.size());
  for (const auto& node : nodes_) {
    Result<mdev::Inventory> inventory = node->sim().node().Scan();
    if (!inventory.ok()) continue;
    uint32_t can_make = 0;
    for (const mdev::Parent& parent : inventory->parents) {
      for (const mdev::VgpuType& t : parent.types) {
        if (t.id == type) can_make += t.available_instances;
      }
    }
    if (can_make >= count) return true;
  }
  return false;
}

}  // namespace kvgpu::testing
