// The pods on one node, as the API server sees them, followed by a ListWatcher (list_watch.h:
// list, watch from the list's version, relist on 410, reconnect with backoff) and decoded.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kube/api_client.h"
#include "kube/list_watch.h"
#include "kube/pod.h"

namespace kvgpu::kube {

using PodEventType = WatchEventType;

inline const char* PodEventTypeName(PodEventType type) {
  return WatchEventTypeName(type);
}

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
  // Backoff and timeouts of the list and watch; its path and name are the node's pods.
  ListWatchOptions watch;
};

class ApiPodWatcher : public PodWatcher {
 public:
  ApiPodWatcher(ApiTransport& transport, PodWatchOptions options);
  ~ApiPodWatcher() override;

  void Start(PodWatchCallbacks callbacks) override;
  void Stop() override;

  // For tests and metrics.
  int lists() const { return watcher_.lists(); }
  int watches() const { return watcher_.watches(); }
  std::string resource_version() const { return watcher_.resource_version(); }

 private:
  ListWatcher watcher_;
};

}  // namespace kvgpu::kube
