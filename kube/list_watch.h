// One collection of the API server followed as client-go's reflector does: list, then watch from
// the list's resourceVersion with bookmarks. 410 Gone (as an HTTP status or an ERROR event)
// means the version was compacted away: list again. A dropped connection, a 5xx or a silent
// stream: reconnect from the last version seen, after a capped exponential backoff with jitter.
// Objects are handed on as JSON; the pod watcher (pod_watcher.h) and the scheduler extender's
// node and pod views decode what they need.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/background_worker.h"
#include "common/backoff.h"
#include "kube/api_client.h"

namespace kvgpu::kube {

enum class WatchEventType { kAdded, kModified, kDeleted };

const char* WatchEventTypeName(WatchEventType type);

struct ListWatchCallbacks {
  // After every (re)list: every object at that moment. An object the consumer knew that is
  // missing here was deleted while nobody watched; no DELETED event will come for it.
  std::function<void(const std::vector<nlohmann::json>& objects)> on_synced;
  // Changes after the list, in the API server's order.
  std::function<void(WatchEventType type, const nlohmann::json& object)> on_event;
  // The view stopped following the API server (false: what it says may be stale) or follows it
  // again (true). Consumers must not act on the API's word alone while it is false.
  std::function<void(bool following, const std::string& reason)> on_connection;
};

struct ListWatchOptions {
  // The collection, with its selectors: "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1".
  std::string path;
  // What the log calls it: "pods on n1".
  std::string what;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
  double jitter = 0.5;  // each wait is the backoff scaled by a random factor in [1-jitter, 1]
  // Sent as timeoutSeconds: the server ends each watch after this long and we watch again.
  std::chrono::seconds watch_timeout{300};
  // A watch that stays silent this long is taken as dead (bookmarks arrive about every minute).
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(330)};
  std::uint32_t seed = std::random_device{}();
};

class ListWatcher {
 public:
  ListWatcher(ApiTransport& transport, ListWatchOptions options);
  ~ListWatcher();
  ListWatcher(const ListWatcher&) = delete;
  ListWatcher& operator=(const ListWatcher&) = delete;

  // Callbacks run on the watcher's own thread, one at a time.
  void Start(ListWatchCallbacks callbacks);
  // Returns once no callback runs and none will.
  void Stop();

  // For tests and metrics.
  int lists() const { return lists_.load(); }
  int watches() const { return watches_.load(); }
  std::string resource_version() const;

 private:
  enum class WatchEnd { kTimedOut, kGone, kBroken, kStopped };

  void Run(BackgroundWorker::Handle& worker);
  bool List();
  WatchEnd Watch();
  // Handles one watch line; false ends the watch with `*end`.
  bool HandleLine(std::string_view line, WatchEnd* end);
  void SetFollowing(bool following, const std::string& reason);

  ApiTransport& transport_;
  ListWatchOptions options_;
  ListWatchCallbacks callbacks_;
  Backoff backoff_;
  Canceller cancel_;

  mutable std::mutex mutex_;
  std::string resource_version_;

  bool following_ = false;
  bool watch_progressed_ = false;
  std::atomic<int> lists_{0};
  std::atomic<int> watches_{0};
  BackgroundWorker worker_;  // last: stopped before the members its body uses go
};

}  // namespace kvgpu::kube
