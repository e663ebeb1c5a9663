// kube-scheduler's DynamicResources plugin as far as DRA allocation and binding go, modelled from
// kubernetes/kubernetes pkg/scheduler/framework/plugins/dynamicresources (dynamicresources.go,
// extendeddynamicresources.go, 1.35-1.36) and KEP-5004 / KEP-5007:
// - one scheduling cycle at a time (its own thread): the pod's claim is allocated on the first
//   node (in a seeded random order, standing in for scoring) where the allocator fits it, with the
//   devices of allocated claims AND of claims in flight taken (the assume cache's
//   SignalClaimPendingAllocation: a claim counts as allocated from Reserve on);
// - a pod asking for an extended resource that a DeviceClass maps (extendedResourceName) gets the
//   scheduler's own claim: requests "container-0-request-<i>" (i: the resource's index in the
//   container's sorted requests) of that class and count, created in PreBind with generateName
//   "<pod>-extended-resources-", the annotation resource.kubernetes.io/extended-resource-claim and
//   the pod as controller owner (checked against the real kube-scheduler 1.36.3 and 1.37.2 by
//   tests/k8s/scenario_dra.py: the same generateName, annotation "true", owner, request name
//   "container-0-request-0" and class for a one-type pod; agreed);
// - the binding cycle runs in its own thread per pod, so the next pod's allocation starts before
//   this one's binding finished; PreBind writes status.allocation (allocationTimestamp set) and
//   reservedFor with the claim's resourceVersion as precondition, drops the in-flight mark, then,
//   when any result carries bindingConditions, polls the claim until all are True (bind), any
//   bindingFailureCondition is True, or the binding timeout passes (isClaimReadyForBinding,
//   isClaimTimeout); on failure Unreserve deletes the scheduler's claim (deallocating it) and the
//   pod goes back to the queue;
// - Bind: the pod is on the node; `on_bound` is kubelet there (NodePrepareResources).
// Not modelled: the finalizer, user-created claims and templates, preemption, scoring plugins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fakes/dra_allocator/allocator.h"
#include "fakes/dra_allocator/claim_api.h"

namespace kvgpu::testing::dra {

struct PodSpec {
  std::string ns;
  std::string name;
  std::string uid;
  std::map<std::string, int64_t> extended_resources;  // container 0's requests = limits
};

struct BoundPod {
  PodSpec pod;
  std::string node;
  nlohmann::json claim;  // as written in PreBind
};

struct SchedulerOptions {
  std::vector<std::string> nodes;
  std::vector<DeviceClass> classes;
  uint64_t seed = 1;
  // BindingTimeoutDefaultSeconds (600 s) and PreBind's 5 s poll in upstream; tests shorten them.
  std::chrono::milliseconds binding_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds binding_poll{std::chrono::seconds(5)};
  // An unschedulable or failed pod is tried again after this.
  std::chrono::milliseconds retry{std::chrono::milliseconds(50)};
  // Added before PreBind's first write (API latency a real binding cycle has).
  std::chrono::milliseconds bind_delay{0};
  // The scheduler reads claims and slices from informers: here a list at most this often (0:
  // every cycle), with its own writes seen at once through the assume cache.
  std::chrono::milliseconds informer_period{0};
  // DRADeviceCompatibilityGroups on: allocations respect the devices' compatibility groups and
  // record them in the claims (KEP-5963; allocator.h). Off: ignored, as before 1.37.
  bool compatibility_groups = false;
};

class SchedulerModel {
 public:
  using OnBound = std::function<void(const BoundPod&)>;
  SchedulerModel(SchedulerOptions options, ClaimApi& api, OnBound on_bound);
  ~SchedulerModel();
  SchedulerModel(const SchedulerModel&) = delete;
  SchedulerModel& operator=(const SchedulerModel&) = delete;

  void Start();
  void Stop();  // waits for the bindings in flight

  void Submit(PodSpec pod);
  // A bound pod goes: `before_delete` (kubelet's NodeUnprepareResources) runs, then its claim is
  // deleted (the garbage collector, the pod being its owner). Only bound pods; others: an error.
  Status DeletePod(const std::string& uid,
                   const std::function<void(const BoundPod&)>& before_delete);

  // Nothing in flight and every waiting pod tried (and not fitting) since the last change (a
  // bind, a deletion, a failed binding, different slices).
  bool Settled() const;
  bool WaitSettled(std::chrono::milliseconds timeout) const;

  std::vector<PodSpec> Pending() const;
  std::vector<BoundPod> Bound() const;

  struct Stats {
    int cycles = 0;
    int unschedulable = 0;     // cycles that found no node
    int binding_failures = 0;  // a bindingFailureCondition was True
    int binding_timeouts = 0;
    int bound = 0;
    int deleted = 0;
    int slice_changes = 0;  // lists that showed different slices
    int bindings_running = 0;
    int most_bindings_running = 0;    // the most binding cycles that ever ran at once
    int waiting_untried = 0;          // waiting pods not tried since the last change
    std::vector<std::string> errors;  // anything else that went wrong (API, allocator)
  };
  Stats stats() const;

  // What the model decided and saw, oldest first (the last kTraceLines): each allocation with its
  // devices' group snapshots and the pool generation it read, each slice change with the pools'
  // generations, each deletion. For a failure's message: which view an allocation was made from.
  std::vector<std::string> Trace() const;

 private:
  static constexpr size_t kTraceLines = 4000;
  void TraceLocked(std::string line);  // mutex_ held
  struct Waiting {
    PodSpec pod;
    std::chrono::steady_clock::time_point ready;
    std::chrono::steady_clock::time_point last_attempt{};
  };
  void Loop();
  void Cycle(Waiting waiting);
  void BindingCycle(PodSpec pod, std::string node, nlohmann::json claim,
                    std::vector<DeviceResult> results);
  void Requeue(PodSpec pod, bool progress);
  void ErrorLocked(const std::string& message);
  void Progress();  // mutex_ held
  // The informers' view, relisted when older than informer_period; false when listing failed.
  bool Refresh(std::string* error);
  // Claims as the assume cache shows them: the listed ones, the scheduler's own writes over
  // them, the claims it deleted left out. mutex_ held.
  std::vector<nlohmann::json> ClaimsLocked() const;
  // The scheduler wrote `claim` (null: deleted `key`). mutex_ held.
  void AssumeLocked(const std::string& key, const nlohmann::json& claim);

  SchedulerOptions options_;
  ClaimApi& api_;
  OnBound on_bound_;
  std::mt19937_64 rng_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
  std::deque<Waiting> queue_;
  std::map<std::string, std::set<DeviceId>> in_flight_;     // pod uid -> devices
  std::map<std::string, GroupSnapshots> in_flight_groups_;  // pod uid -> their groups
  std::map<std::string, BoundPod> bound_;                   // by pod uid
  std::chrono::steady_clock::time_point last_change_;
  std::string last_slices_;  // names and generations of the slices last listed
  int binding_ = 0;          // binding cycles running
  int cycling_ = 0;          // a scheduling cycle running
  std::chrono::steady_clock::time_point cycle_started_{};
  Stats stats_;
  std::vector<nlohmann::json> listed_claims_;
  // The pools each node sees in the slices last listed (GatherPools once per list).
  std::shared_ptr<const std::map<std::string, Result<std::vector<Pool>>>> pools_;
  std::chrono::steady_clock::time_point listed_at_{};
  std::map<std::string, nlohmann::json> assumed_;  // by namespace/name
  std::set<std::string> deleted_;                  // by namespace/name, until a list agrees
  std::deque<std::string> trace_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::thread loop_;
  std::vector<std::thread> bindings_;
};

// The scheduler's claim for `pod`'s extended resources mapped by `classes` (KEP-5004); null when
// none maps (the pod is the device plugin's business then).
nlohmann::json ExtendedResourceClaim(const PodSpec& pod, const std::vector<DeviceClass>& classes);

// isClaimReadyForBinding: true when every bindingCondition of every result is True in
// status.devices; an error when any bindingFailureCondition is True; false otherwise.
Result<bool> ClaimReadyForBinding(const nlohmann::json& claim);

}  // namespace kvgpu::testing::dra
