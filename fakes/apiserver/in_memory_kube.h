// Stand-ins for the Kubernetes client's interfaces, for tests of code that consumes pods and
// records events (the device plugin's lifecycle) without HTTP. Everything a test calls is
// delivered synchronously on the test's thread, so ordering is the test's to decide.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "kube/events.h"
#include "kube/pod_watcher.h"

namespace kvgpu::testing {

class InMemoryPodWatcher : public kube::PodWatcher {
 public:
  void Start(kube::PodWatchCallbacks callbacks) override {
    std::lock_guard lock(mutex_);
    callbacks_ = std::move(callbacks);
    started_ = true;
  }
  void Stop() override {
    std::lock_guard lock(mutex_);
    started_ = false;
  }
  bool started() const {
    std::lock_guard lock(mutex_);
    return started_;
  }

  // A (re)list: the full set, then following.
  void Sync(const std::vector<kube::PodInfo>& pods) {
    auto callbacks = Current();
    if (callbacks.on_synced) callbacks.on_synced(pods);
    if (callbacks.on_connection) callbacks.on_connection(true, "listed");
  }
  void Emit(kube::PodEventType type, const kube::PodInfo& pod) {
    auto callbacks = Current();
    if (callbacks.on_event) callbacks.on_event(type, pod);
  }
  // The API server went away (false) or came back (true).
  void SetFollowing(bool following, const std::string& reason = "test") {
    auto callbacks = Current();
    if (callbacks.on_connection) callbacks.on_connection(following, reason);
  }

 private:
  kube::PodWatchCallbacks Current() {
    std::lock_guard lock(mutex_);
    return started_ ? callbacks_ : kube::PodWatchCallbacks{};
  }
  mutable std::mutex mutex_;
  kube::PodWatchCallbacks callbacks_;
  bool started_ = false;
};

class RecordingEventRecorder : public kube::EventRecorder {
 public:
  struct Recorded {
    kube::PodRef pod;
    kube::EventType type;
    std::string reason;
    std::string message;
  };

  Status Record(const kube::PodRef& pod, kube::EventType type, const std::string& reason,
                const std::string& message) override {
    std::lock_guard lock(mutex_);
    if (fail_) return Status::Error(ErrorCode::kTransport, "API server unreachable (test)");
    events_.push_back({pod, type, reason, message});
    return {};
  }
  void SetFailing(bool fail) {
    std::lock_guard lock(mutex_);
    fail_ = fail;
  }
  std::vector<Recorded> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }
  // Reasons in order, e.g. {"VgpuCreated", "VgpuRemoved"}.
  std::vector<std::string> reasons() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& e : events_) out.push_back(e.reason);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  bool fail_ = false;
  std::vector<Recorded> events_;
};

}  // namespace kvgpu::testing
