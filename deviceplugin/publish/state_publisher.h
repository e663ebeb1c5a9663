// Publishes the node's vGPU state (scheduler_state.h) on the Node object as the annotation the
// scheduler extender reads: at start, after every change, and at least every `heartbeat` so that
// a reader can tell a live plugin's state from a stale one. It looks once per `min_interval` and
// writes only what changed: the look is cheap (one lock, no I/O), and the interval is the rate
// limit on writes to the Node, which every Node watcher in the cluster receives. Runs on its own
// thread; the API server being away only delays it (retried with a backoff, reported in the log and
// the metrics), never the plugin.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "common/background_worker.h"
#include "common/backoff.h"
#include "kube/api_client.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::deviceplugin {

struct StatePublisherOptions {
  std::string node_name;
  std::chrono::milliseconds min_interval{1000};
  std::chrono::milliseconds heartbeat{std::chrono::minutes(2)};
  std::chrono::milliseconds retry_max{std::chrono::seconds(30)};
};

class StatePublisher {
 public:
  // The node's state now (without node name, generation or time, which the publisher sets).
  using Source = std::function<scheduling::NodeVgpuState()>;
  // Told of every attempt: ok, and the generation written (metrics).
  using Observer = std::function<void(bool ok, uint64_t generation)>;

  StatePublisher(kube::ApiTransport& api, Source source, StatePublisherOptions options,
                 Observer observer = nullptr);
  ~StatePublisher();
  StatePublisher(const StatePublisher&) = delete;
  StatePublisher& operator=(const StatePublisher&) = delete;

  void Start();
  void Stop();

  // One look on the caller's thread: publishes when the content changed or the heartbeat is due.
  // Returns whether it wrote (tests; the thread calls this).
  Result<bool> PublishIfDue();
  uint64_t generation() const;

  // The merge patch that sets the annotation to `text` (what the API server is sent).
  static nlohmann::json AnnotationPatch(const std::string& text);

 private:
  void Loop(BackgroundWorker::Handle& worker);

  kube::ApiTransport& api_;
  Source source_;
  StatePublisherOptions options_;
  Observer observer_;

  mutable std::mutex mutex_;
  std::optional<scheduling::NodeVgpuState> last_;  // what the API server has
  std::chrono::steady_clock::time_point last_time_{};
  uint64_t generation_ = 0;
  Canceller cancel_;         // breaks the patch in flight at Stop
  BackgroundWorker worker_;  // last: stopped before the members its body uses go
};

}  // namespace kvgpu::deviceplugin
