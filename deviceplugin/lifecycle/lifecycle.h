// Removes the vGPUs this plugin created once no live pod holds their device IDs, after a grace
// period, and never any other (invariants 1-3). Passes run on the lifecycle's thread: every
// poll interval, soon after each Allocate (to learn the owner), and at once when a pod ends;
// while a pod that ended is still listed by kubelet, passes follow at a quick pace for a while.
// Removals run on a thread of their own, because the kernel's remove blocks while a VM still
// holds the device; EBUSY and other failures are retried with a capped backoff.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/background_worker.h"
#include "common/backoff.h"
#include "deviceplugin/lifecycle/holder_tracker.h"
#include "deviceplugin/model/resource_manager.h"
#include "kube/events.h"

namespace kvgpu::deviceplugin {

struct LifecycleOptions {
  std::chrono::milliseconds grace_period{std::chrono::seconds(30)};
  std::chrono::milliseconds poll_interval{std::chrono::seconds(10)};
  std::chrono::milliseconds settle{5000};  // see holder_tracker.h
  std::chrono::milliseconds retry_initial{500};
  std::chrono::milliseconds retry_max{std::chrono::seconds(60)};
  // After a pod ended: passes this often, for this long, until kubelet lets go of it.
  std::chrono::milliseconds follow_up_interval{200};
  std::chrono::milliseconds follow_up_for{std::chrono::seconds(15)};
};

// What one pass decided; pure, so it can be tested and measured alone.
struct PassPlan {
  std::map<std::string, PodOwner> owners;  // device ID -> its pod, newly learned
  std::vector<CreatedVgpu> remove;         // free for longer than the grace period
  std::vector<CreatedVgpu> forget;         // free, and the kernel no longer shows the vGPU
  size_t held = 0;
  size_t waiting = 0;  // free, within the grace period
  size_t unknown = 0;
};

// `free_since` (device ID + vGPU -> unix ms when first seen free) carries over between passes.
PassPlan PlanPass(const LifecycleSnapshot& snapshot, const HolderFacts& facts,
                  std::map<std::string, int64_t>& free_since, int64_t now_unix_ms,
                  const LifecycleOptions& options);

// What operators watch (metrics.h implements it).
class LifecycleObserver {
 public:
  virtual ~LifecycleObserver() = default;
  virtual void OnPass(const PassPlan& /*plan*/, size_t /*foreign*/,
                      std::chrono::nanoseconds /*took*/) {}
  virtual void OnRemoval(const std::string& /*resource*/, const Status& /*result*/) {}
  virtual void OnSources(bool /*kubelet*/, bool /*api*/) {}
};

class Lifecycle {
 public:
  // `events` may be null (no API server).
  Lifecycle(ResourceManager& manager, HolderTracker& tracker, kube::EventRecorder* events,
            LifecycleOptions options, LifecycleObserver* observer = nullptr);
  ~Lifecycle();
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  void Start();
  void Stop();

  // A pass soon (pod ended, checkpoint changed).
  void Trigger(bool follow_up);
  // An Allocate succeeded: passes soon after, to learn which pod got the devices.
  void OnAllocated();

  // One pass on the caller's thread, removals included (tests, benchmarks).
  PassPlan RunPass();
  // Removals queued or being retried.
  size_t pending_removals() const;

 private:
  struct Removal {
    CreatedVgpu record;
    std::chrono::steady_clock::time_point due;
    Backoff backoff;
    int attempts = 0;
  };

  void PassLoop(BackgroundWorker::Handle& worker);
  void RemovalLoop(BackgroundWorker::Handle& worker);
  PassPlan Pass();
  // Removes one vGPU if a fresh look still finds it free; false: retry later.
  bool TryRemove(Removal& removal);
  void Announce(const CreatedVgpu& record, const std::string& owner);
  void Event(const std::string& pod_key, kube::EventType type, const std::string& reason,
             const std::string& message);

  ResourceManager& manager_;
  HolderTracker& tracker_;
  kube::EventRecorder* events_;
  LifecycleOptions options_;
  LifecycleObserver* observer_;

  std::mutex pass_mutex_;  // one pass at a time; guards free_since_
  std::map<std::string, int64_t> free_since_;

  mutable std::mutex mutex_;
  std::vector<std::chrono::steady_clock::time_point> scheduled_;
  std::chrono::steady_clock::time_point follow_up_until_{};
  std::map<std::string, Removal> removals_;  // by device ID

  // Last: stopped before the members they use go.
  BackgroundWorker pass_worker_;     // woken by Trigger and OnAllocated
  BackgroundWorker removal_worker_;  // woken when a pass queues removals
};

}  // namespace kvgpu::deviceplugin
