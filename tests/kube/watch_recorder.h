// Collects what a PodWatcher reports, for tests to wait on and inspect.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "fakes/common/eventually.h"
#include "kube/pod_watcher.h"

namespace kvgpu::kube::testing {

class WatchRecorder {
 public:
  PodWatchCallbacks Callbacks() {
    return {
        [this](const std::vector<PodInfo>& pods) {
          std::lock_guard lock(mutex_);
          ++syncs_;
          pods_.clear();
          for (const auto& pod : pods) pods_[pod.Key()] = pod;
          log_.push_back("SYNC " + std::to_string(pods.size()));
          changed_.notify_all();
        },
        [this](PodEventType type, const PodInfo& pod) {
          std::lock_guard lock(mutex_);
          if (type == PodEventType::kDeleted) {
            pods_.erase(pod.Key());
          } else {
            pods_[pod.Key()] = pod;
          }
          log_.push_back(std::string(PodEventTypeName(type)) + " " + pod.Key());
          changed_.notify_all();
        },
        [this](bool following, const std::string&) {
          std::lock_guard lock(mutex_);
          following_ = following;
          log_.push_back(following ? "UP" : "DOWN");
          changed_.notify_all();
        },
    };
  }

  bool WaitFor(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = ::kvgpu::testing::kEventDeadline) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, std::chrono::milliseconds(10));
    }
    return true;
  }

  int syncs() const {
    std::lock_guard lock(mutex_);
    return syncs_;
  }
  bool following() const {
    std::lock_guard lock(mutex_);
    return following_;
  }
  std::map<std::string, PodInfo> pods() const {
    std::lock_guard lock(mutex_);
    return pods_;
  }
  bool Has(const std::string& key) const {
    std::lock_guard lock(mutex_);
    return pods_.count(key) != 0;
  }
  std::vector<std::string> log() const {
    std::lock_guard lock(mutex_);
    return log_;
  }
  int Count(const std::string& entry) const {
    std::lock_guard lock(mutex_);
    int n = 0;
    for (const auto& line : log_) n += line == entry ? 1 : 0;
    return n;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int syncs_ = 0;
  bool following_ = false;
  std::map<std::string, PodInfo> pods_;
  std::vector<std::string> log_;
};

}  // namespace kvgpu::kube::testing
