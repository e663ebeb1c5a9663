#include "fakes/dra_allocator/scheduler.h"

#include <algorithm>
#include <utility>

#include "kube/api_client.h"

namespace kvgpu::testing::dra {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// kubernetes/api resource/v1/types.go.
constexpr const char* kExtendedResourceClaimAnnotation =
    "resource.kubernetes.io/extended-resource-claim";

// What changes when the published slices change.
std::string SlicesSignature(const std::vector<json>& slices) {
  std::string out;
  for (const json& s : slices) {
    out += s.value("/metadata/name"_json_pointer, std::string()) + "@" +
           s.value("/metadata/resourceVersion"_json_pointer, std::string()) + ":" +
           std::to_string(s.value("/spec/pool/generation"_json_pointer, int64_t{0})) + ";";
  }
  return out;
}

std::string ClaimKey(const json& claim) {
  return claim.value("/metadata/namespace"_json_pointer, std::string()) + "/" +
         claim.value("/metadata/name"_json_pointer, std::string());
}

}  // namespace

json ExtendedResourceClaim(const PodSpec& pod, const std::vector<DeviceClass>& classes) {
  json requests = json::array();
  int index = 0;  // the resource's index among the container's requests, sorted by name
  for (const auto& [resource, count] : pod.extended_resources) {
    const DeviceClass* device_class = ClassForExtendedResource(classes, resource);
    if (device_class != nullptr && count > 0) {
      requests.push_back({{"name", "container-0-request-" + std::to_string(index)},
                          {"exactly",
                           {{"deviceClassName", device_class->name},
                            {"allocationMode", "ExactCount"},
                            {"count", count}}}});
    }
    ++index;
  }
  if (requests.empty()) return nullptr;
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata",
           {{"namespace", pod.ns},
            {"generateName", pod.name + "-extended-resources-"},
            {"annotations", {{kExtendedResourceClaimAnnotation, "true"}}},
            {"ownerReferences", json::array({{{"apiVersion", "v1"},
                                              {"kind", "Pod"},
                                              {"name", pod.name},
                                              {"uid", pod.uid},
                                              {"controller", true}}})}}},
          {"spec", {{"devices", {{"requests", requests}}}}}};
}

Result<bool> ClaimReadyForBinding(const json& claim) {
  const json allocation = claim.value("/status/allocation"_json_pointer, json());
  if (allocation.is_null()) return false;
  const json devices = claim.value("/status/devices"_json_pointer, json::array());
  for (const json& result : allocation.value("/devices/results"_json_pointer, json::array())) {
    const json conditions = result.value("bindingConditions", json::array());
    if (conditions.empty()) continue;
    const json* status = nullptr;
    for (const json& d : devices) {
      if (d.value("driver", "") == result.value("driver", "") &&
          d.value("pool", "") == result.value("pool", "") &&
          d.value("device", "") == result.value("device", "")) {
        status = &d;
      }
    }
    if (status == nullptr) return false;
    const auto is_true = [&](const std::string& type) {
      for (const json& c : status->value("conditions", json::array())) {
        if (c.value("type", "") == type) return c.value("status", "") == "True";
      }
      return false;
    };
    for (const json& failure : result.value("bindingFailureConditions", json::array())) {
      if (is_true(failure.get<std::string>())) {
        return Status::Error(ErrorCode::kBusy,
                             "claim " + claim["metadata"].value("name", "") + " binding failed: " +
                                 failure.get<std::string>() + " on " + result.value("device", ""));
      }
    }
    for (const json& c : conditions) {
      if (!is_true(c.get<std::string>())) return false;
    }
  }
  return true;
}

SchedulerModel::SchedulerModel(SchedulerOptions options, ClaimApi& api, OnBound on_bound)
    : options_(std::move(options)),
      api_(api),
      on_bound_(std::move(on_bound)),
      rng_(options_.seed),
      last_change_(Clock::now()) {}

SchedulerModel::~SchedulerModel() {
  Stop();
}

void SchedulerModel::Start() {
  loop_ = std::thread([this] { Loop(); });
}

void SchedulerModel::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (loop_.joinable()) loop_.join();
  std::vector<std::thread> bindings;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bindings.swap(bindings_);
  }
  for (std::thread& t : bindings) t.join();
}

void SchedulerModel::Submit(PodSpec pod) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({std::move(pod), Clock::now()});
  }
  changed_.notify_all();
}

void SchedulerModel::Progress() {
  last_change_ = Clock::now();
}

void SchedulerModel::ErrorLocked(const std::string& message) {
  if (stats_.errors.size() < 100) stats_.errors.push_back(message);
}

void SchedulerModel::Requeue(PodSpec pod, bool progress) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (progress) Progress();
    queue_.push_back({std::move(pod), Clock::now() + options_.retry});
  }
  changed_.notify_all();
}

bool SchedulerModel::Refresh(std::string* error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (listed_at_ != Clock::time_point{} && Clock::now() - listed_at_ < options_.informer_period) {
      return true;
    }
  }
  auto claims = api_.List();
  if (!claims.ok()) {
    *error = "list claims: " + claims.status().ToString();
    return false;
  }
  auto slices = api_.ListSlices();
  if (!slices.ok()) {
    *error = "list slices: " + slices.status().ToString();
    return false;
  }
  auto pools = std::make_shared<std::map<std::string, Result<std::vector<Pool>>>>();
  for (const std::string& node : options_.nodes) pools->emplace(node, GatherPools(*slices, node));
  std::lock_guard<std::mutex> lock(mutex_);
  std::set<std::string> listed;
  for (const json& c : *claims) listed.insert(ClaimKey(c));
  for (auto it = deleted_.begin(); it != deleted_.end();) {
    it = listed.count(*it) ? std::next(it) : deleted_.erase(it);
  }
  listed_claims_ = std::move(*claims);
  std::string signature = SlicesSignature(*slices);
  if (signature != last_slices_) {
    last_slices_ = std::move(signature);
    ++stats_.slice_changes;
    Progress();
    std::string line = "slices changed:";
    for (const auto& [node, gathered] : *pools) {
      if (!gathered.ok()) {
        line += " " + node + " (" + gathered.status().message() + ")";
        continue;
      }
      for (const Pool& pool : *gathered) {
        line += " " + pool.name + "@" + std::to_string(pool.generation) +
                (pool.complete ? "" : " incomplete") + " " + std::to_string(pool.devices.size()) +
                " devices;";
      }
    }
    TraceLocked(std::move(line));
  }
  pools_ = std::move(pools);
  listed_at_ = Clock::now();
  return true;
}

std::vector<json> SchedulerModel::ClaimsLocked() const {
  std::vector<json> out;
  for (const json& c : listed_claims_) {
    const std::string key = ClaimKey(c);
    if (deleted_.count(key) || assumed_.count(key)) continue;
    out.push_back(c);
  }
  for (const auto& [key, c] : assumed_) out.push_back(c);
  return out;
}

void SchedulerModel::AssumeLocked(const std::string& key, const json& claim) {
  if (claim.is_null()) {
    assumed_.erase(key);
    deleted_.insert(key);
  } else {
    assumed_[key] = claim;
  }
}

void SchedulerModel::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const auto now = Clock::now();
    auto next = queue_.end();
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->ready <= now) {
        next = it;
        break;
      }
    }
    if (next == queue_.end()) {
      auto earliest = Clock::time_point::max();
      for (const Waiting& w : queue_) earliest = std::min(earliest, w.ready);
      if (earliest == Clock::time_point::max()) {
        changed_.wait(lock);
      } else {
        changed_.wait_until(lock, earliest);
      }
      continue;
    }
    Waiting waiting = std::move(*next);
    queue_.erase(next);
    ++cycling_;
    cycle_started_ = Clock::now();
    lock.unlock();
    Cycle(std::move(waiting));
    lock.lock();
    --cycling_;
    changed_.notify_all();
  }
}

void SchedulerModel::Cycle(Waiting waiting) {
  const auto started = Clock::now();
  const PodSpec& pod = waiting.pod;
  // The in-flight devices first, then the claims: a binding drops its mark only after its write,
  // so every allocation is in one or the other (the assume cache's guarantee).
  std::set<DeviceId> in_use;
  GroupSnapshots groups;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.cycles;
    for (const auto& [uid, devices] : in_flight_) in_use.insert(devices.begin(), devices.end());
    for (const auto& [uid, snapshots] : in_flight_groups_) {
      groups.insert(snapshots.begin(), snapshots.end());
    }
  }
  auto fail = [&](const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    ErrorLocked(pod.name + ": " + message);
    queue_.push_back({pod, Clock::now() + options_.retry, started});
  };
  std::string error;
  if (!Refresh(&error)) return fail(error);
  std::shared_ptr<const std::map<std::string, Result<std::vector<Pool>>>> pools_by_node;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::set<DeviceId> allocated = AllocatedDevices(ClaimsLocked());
    in_use.insert(allocated.begin(), allocated.end());
    if (options_.compatibility_groups) groups.merge(AllocatedGroups(ClaimsLocked()));
    pools_by_node = pools_;
  }
  json claim = ExtendedResourceClaim(pod, options_.classes);
  if (claim.is_null()) {
    std::lock_guard<std::mutex> lock(mutex_);
    ErrorLocked(pod.name + ": no DeviceClass maps its extended resources; dropped");
    return;
  }
  std::vector<std::string> nodes = options_.nodes;
  std::shuffle(nodes.begin(), nodes.end(), rng_);
  for (const std::string& node : nodes) {
    const Result<std::vector<Pool>>& pools = pools_by_node->at(node);
    if (!pools.ok()) return fail("pools of " + node + ": " + pools.status().ToString());
    auto results = Allocate(claim, options_.classes, *pools, in_use,
                            options_.compatibility_groups ? &groups : nullptr);
    if (!results.ok()) return fail("allocate on " + node + ": " + results.status().ToString());
    if (!results->has_value()) continue;
    // Reserve: the devices count as allocated from now on.
    std::lock_guard<std::mutex> lock(mutex_);
    std::string line = pod.name + " allocated on " + node + ":";
    for (const DeviceResult& r : **results) {
      line += " " + r.id.device;
      for (const auto& [set, names] : r.compatibility_groups) {
        line += " " + set + "=[";
        for (const std::string& g : names) line += g + " ";
        line += "]";
      }
    }
    for (const Pool& p : *pools) line += " (" + p.name + "@" + std::to_string(p.generation) + ")";
    TraceLocked(std::move(line));
    for (const DeviceResult& r : **results) {
      in_flight_[pod.uid].insert(r.id);
      if (!r.compatibility_groups.empty()) {
        in_flight_groups_[pod.uid][r.id] = r.compatibility_groups;
      }
    }
    ++binding_;
    stats_.most_bindings_running = std::max(stats_.most_bindings_running, binding_);
    bindings_.emplace_back([this, pod, node, claim, devices = **results]() mutable {
      BindingCycle(std::move(pod), std::move(node), std::move(claim), std::move(devices));
    });
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.unschedulable;
  queue_.push_back({pod, Clock::now() + options_.retry, started});
}

void SchedulerModel::BindingCycle(PodSpec pod, std::string node, json claim,
                                  std::vector<DeviceResult> results) {
  const auto started = Clock::now();
  auto finish = [&](bool requeue, const std::string& error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_flight_.erase(pod.uid);
      in_flight_groups_.erase(pod.uid);
      --binding_;
      Progress();
      if (!error.empty()) ErrorLocked(pod.name + ": " + error);
      if (requeue) queue_.push_back({pod, Clock::now() + options_.retry});
    }
    changed_.notify_all();
  };
  if (options_.bind_delay.count() > 0) std::this_thread::sleep_for(options_.bind_delay);
  // PreBind: the scheduler's claim is created, then allocated and reserved for the pod.
  auto created = api_.Create(claim);
  if (!created.ok()) return finish(true, "create claim: " + created.status().ToString());
  const std::string ns = (*created)["metadata"].value("namespace", "");
  const std::string name = (*created)["metadata"].value("name", "");
  const json allocation =
      AllocationJson(results, node, kube::Rfc3339(std::chrono::system_clock::now()));
  const json reserved_for =
      json::array({{{"resource", "pods"}, {"name", pod.name}, {"uid", pod.uid}}});
  auto written = api_.WriteStatus(ns, name, (*created)["metadata"].value("resourceVersion", ""),
                                  allocation, reserved_for);
  if (!written.ok()) {
    (void)api_.Delete(ns, name);
    return finish(true, "write allocation: " + written.status().ToString());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    AssumeLocked(ns + "/" + name, *written);  // AssumeClaimAfterAPICall
    in_flight_.erase(pod.uid);                // RemoveClaimPendingAllocation
    in_flight_groups_.erase(pod.uid);
  }
  bool wait = false;
  for (const DeviceResult& r : results) wait = wait || !r.binding_conditions.empty();
  json current = *written;
  while (wait) {
    auto got = api_.Get(ns, name);
    if (got.ok()) current = *got;
    Result<bool> ready = got.ok() ? ClaimReadyForBinding(current) : Result<bool>(got.status());
    bool failed = !ready.ok() && ready.status().code() == ErrorCode::kBusy;
    if (ready.ok() && *ready) break;
    const bool timed_out = Clock::now() - started > options_.binding_timeout;
    if (failed || timed_out) {
      // Unreserve: the scheduler's claim is deleted; the pod tries again.
      (void)api_.Delete(ns, name);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        AssumeLocked(ns + "/" + name, nullptr);
        if (failed) ++stats_.binding_failures;
        if (!failed) ++stats_.binding_timeouts;
      }
      return finish(true, "");
    }
    std::this_thread::sleep_for(options_.binding_poll);
  }
  BoundPod bound{pod, node, current};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bound_[pod.uid] = bound;
    ++stats_.bound;
  }
  on_bound_(bound);
  finish(false, "");
}

Status SchedulerModel::DeletePod(const std::string& uid,
                                 const std::function<void(const BoundPod&)>& before_delete) {
  BoundPod bound;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = bound_.find(uid);
    if (it == bound_.end()) return Status::Error(ErrorCode::kGone, "pod " + uid + " is not bound");
    bound = it->second;
  }
  before_delete(bound);
  const json& meta = bound.claim["metadata"];
  Status deleted = api_.Delete(meta.value("namespace", ""), meta.value("name", ""));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    AssumeLocked(ClaimKey(bound.claim), nullptr);
    TraceLocked(bound.pod.name + " deleted from " + bound.node);
    bound_.erase(uid);
    ++stats_.deleted;
    Progress();
    if (!deleted.ok()) ErrorLocked("delete claim: " + deleted.ToString());
  }
  changed_.notify_all();
  return deleted;
}

bool SchedulerModel::Settled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (binding_ > 0 || (cycling_ > 0 && cycle_started_ <= last_change_)) return false;
  for (const Waiting& w : queue_) {
    if (w.last_attempt <= last_change_) return false;
  }
  return true;
}

bool SchedulerModel::WaitSettled(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  // Settled twice, with nothing changed in between and the loop still turning: a cycle that was
  // running at the first look has ended without a bind.
  while (Clock::now() < deadline) {
    Clock::time_point change;
    int cycles = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      change = last_change_;
      cycles = stats_.cycles;
    }
    if (Settled()) {
      std::this_thread::sleep_for(2 * options_.retry + std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(mutex_);
      if (last_change_ == change && binding_ == 0 && (stats_.cycles > cycles || queue_.empty())) {
        return true;
      }
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<PodSpec> SchedulerModel::Pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PodSpec> out;
  for (const Waiting& w : queue_) out.push_back(w.pod);
  return out;
}

std::vector<BoundPod> SchedulerModel::Bound() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<BoundPod> out;
  for (const auto& [uid, b] : bound_) out.push_back(b);
  return out;
}

void SchedulerModel::TraceLocked(std::string line) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count();
  trace_.push_back(std::to_string(ms) + " ms " + std::move(line));
  if (trace_.size() > kTraceLines) trace_.pop_front();
}

std::vector<std::string> SchedulerModel::Trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {trace_.begin(), trace_.end()};
}

SchedulerModel::Stats SchedulerModel::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats out = stats_;
  out.bindings_running = binding_;
  for (const Waiting& w : queue_) out.waiting_untried += w.last_attempt <= last_change_ ? 1 : 0;
  return out;
}

}  // namespace kvgpu::testing::dra
