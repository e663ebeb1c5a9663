// A PodResourcesSource that answers from what the test set, for lifecycle tests without gRPC;
// SetDown() makes every call fail as an absent kubelet socket does; Hold() makes List hang, as a
// stuck kubelet's does, until released (the real client's deadline is not modelled here).
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kube/kubelet/podresources.h"

namespace kvgpu::testing {

class StaticPodResources : public kubelet::PodResourcesSource {
 public:
  void SetPods(std::vector<kubelet::PodResources> pods) {
    std::lock_guard lock(mutex_);
    pods_ = std::move(pods);
  }
  void SetDown(bool down) {
    std::lock_guard lock(mutex_);
    down_ = down;
  }

  void Hold(bool hold) {
    std::lock_guard lock(mutex_);
    hold_ = hold;
    changed_.notify_all();
  }
  // Waits until `n` List calls are hanging.
  void WaitUntilHanging(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return hanging_ >= n; });
  }

  Result<std::vector<kubelet::PodResources>> List() override {
    std::unique_lock lock(mutex_);
    ++calls_;
    if (hold_) {
      ++hanging_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return !hold_; });
      --hanging_;
    }
    if (down_) return Down();
    return pods_;
  }
  Result<std::optional<kubelet::PodResources>> Get(const std::string& namespace_name,
                                                   const std::string& name) override {
    std::lock_guard lock(mutex_);
    ++calls_;
    if (down_) return Down();
    for (const auto& pod : pods_) {
      if (pod.namespace_name == namespace_name && pod.name == name) {
        return std::optional<kubelet::PodResources>(pod);
      }
    }
    return std::optional<kubelet::PodResources>();
  }
  int calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  static Status Down() {
    return Status::Error(ErrorCode::kTransport, "PodResources: kubelet.sock unavailable (test)");
  }
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<kubelet::PodResources> pods_;
  bool down_ = false;
  bool hold_ = false;
  int hanging_ = 0;
  int calls_ = 0;
};

}  // namespace kvgpu::testing
