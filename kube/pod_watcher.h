// The pods on one node, as the API server sees them: list, then watch from the list's
// resourceVersion with bookmarks. 410 Gone (as an HTTP status or an ERROR event) means the
// version was compacted away: list again. A dropped connection, a 5xx or a silent stream:
// reconnect from the last version seen, after a capped exponential backoff with jitter.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/backoff.h"
#include "kube/api_client.h"
#include "kube/pod.h"

namespace kvgpu::kube {

enum class PodEventType { kAdded, kModified, kDeleted };

const char* PodEventTypeName(PodEventType type);

struct PodWatchCallbacks {
  // After every (re)list: all pods on the node at that moment. A pod the consumer knew that is
  // missing here was deleted while nobody watched; no DELETED event will come for it.
  std::function<void(const std::vector<PodInfo>& pods)> on_synced;
  // Changes after the list, in the API server's order.
  std::function<void(PodEventType type, const PodInfo& pod)> on_event;
  // The view stopped following the API server (false: what it says may be stale) or follows it
  // again (true). Consumers must not act on the API's word alone while it is false.
  std::function<void(bool following, const std::string& reason)> on_connection;
};

// What the lifecycle code depends on; tests give it pods without HTTP.
class PodWatcher {
 public:
  virtual ~PodWatcher() = default;
  // Callbacks run on the watcher's own thread, one at a time.
  virtual void Start(PodWatchCallbacks callbacks) = 0;
  // Returns once no callback runs and none will.
  virtual void Stop() = 0;
};

struct PodWatchOptions {
  std::string node_name;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
  double jitter = 0.5;  // each wait is the backoff scaled by a random factor in [1-jitter, 1]
  // Sent as timeoutSeconds: the server ends each watch after this long and we watch again.
  std::chrono::seconds watch_timeout{300};
  // A watch that stays silent this long is taken as dead (bookmarks arrive about every minute).
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(330)};
  std::uint32_t seed = std::random_device{}();
};

class ApiPodWatcher : public PodWatcher {
 public:
  ApiPodWatcher(ApiTransport& transport, PodWatchOptions options);
  ~ApiPodWatcher() override;

  void Start(PodWatchCallbacks callbacks) override;
  void Stop() override;

  // For tests and metrics.
  int lists() const { return lists_.load(); }
  int watches() const { return watches_.load(); }
  std::string resource_version() const;

 private:
  enum class WatchEnd { kTimedOut, kGone, kBroken, kStopped };

  void Run();
  bool List();
  WatchEnd Watch();
  // Handles one watch line; false ends the watch with `*end`.
  bool HandleLine(std::string_view line, WatchEnd* end);
  void SetFollowing(bool following, const std::string& reason);
  // Sleeps `delay` or until Stop(); false when stopping.
  bool Sleep(std::chrono::milliseconds delay);
  std::string PodsPath() const;

  ApiTransport& transport_;
  PodWatchOptions options_;
  PodWatchCallbacks callbacks_;
  Backoff backoff_;
  Canceller cancel_;
  std::thread thread_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string resource_version_;

  bool following_ = false;
  bool watch_progressed_ = false;
  std::atomic<int> lists_{0};
  std::atomic<int> watches_{0};
};

}  // namespace kvgpu::kube
