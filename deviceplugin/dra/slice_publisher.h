// Keeps the node's ResourceSlices on the API server equal to what the node offers
// (resource_slices.h): lists the slices of this node and driver, and when they differ writes the
// whole pool at the next generation (create or replace each slice, then delete those it no longer
// has). Readers take only the pool's highest generation, and only once they see
// resourceSliceCount slices of it (resource.k8s.io/v1 ResourcePool), so while a write is under
// way the pool reads as incomplete, never as a mix of two generations. A failed request leaves
// the next pass to relist and write again at a further generation. Each slice is owned by the
// Node, so the garbage collector removes them with it.
//
// Runs on its own thread: a pass after each Trigger() (at most one per min_interval), and one
// every resync to repair slices someone else changed; the API server being away only delays it
// (retried with a backoff).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "kube/api_client.h"

namespace kvgpu::deviceplugin::dra {

struct SlicePublisherOptions {
  std::string node_name;
  std::string driver;
  std::chrono::milliseconds min_interval{1000};
  std::chrono::milliseconds resync{std::chrono::minutes(5)};
  std::chrono::milliseconds retry_max{std::chrono::seconds(30)};
};

class SlicePublisher {
 public:
  // The pool's slices at `generation` (BuildResourceSlices); an error skips the pass.
  using Source = std::function<Result<std::vector<nlohmann::json>>(int64_t generation)>;
  // Told of every pass: ok, and whether it wrote.
  using Observer = std::function<void(bool ok, bool wrote)>;

  SlicePublisher(kube::ApiTransport& api, Source source, SlicePublisherOptions options,
                 Observer observer = nullptr);
  ~SlicePublisher();
  SlicePublisher(const SlicePublisher&) = delete;
  SlicePublisher& operator=(const SlicePublisher&) = delete;

  void Start();
  void Stop();
  // What the node offers changed: a pass soon.
  void Trigger();

  // One pass on the caller's thread. Returns whether it wrote.
  Result<bool> Reconcile();
  // The generation of the pool as last written or found.
  int64_t generation() const;

  static constexpr const char* kCollection = "/apis/resource.k8s.io/v1/resourceslices";

 private:
  void Loop();
  Result<nlohmann::json> OwnerReference();
  Result<std::vector<nlohmann::json>> ListOurs();

  kube::ApiTransport& api_;
  Source source_;
  SlicePublisherOptions options_;
  Observer observer_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool triggered_ = true;
  int64_t generation_ = 0;
  nlohmann::json owner_;  // null until the Node was read
  Canceller cancel_;
  std::thread thread_;
};

}  // namespace kvgpu::deviceplugin::dra
