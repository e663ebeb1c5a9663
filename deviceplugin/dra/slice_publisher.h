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
// (retried with a backoff). A watch of the node's slices of the driver triggers a pass when one
// of them is deleted by someone else: kubelet deletes every ResourceSlice of its node when it
// starts (`DRAPluginManager.wipeResourceSlices` at startup, and for a driver whose plugin stays
// unregistered; pkg/kubelet/cm/dra/plugin of 1.36 and 1.37), so after each kubelet restart the
// pool is gone until written again, and no pod can be allocated a device of the node meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/background_worker.h"
#include "common/status.h"
#include "kube/api_client.h"
#include "kube/list_watch.h"

namespace kvgpu::deviceplugin::dra {

struct SlicePublisherOptions {
  std::string node_name;
  std::string driver;
  std::chrono::milliseconds min_interval{1000};
  std::chrono::milliseconds resync{std::chrono::minutes(5)};
  std::chrono::milliseconds retry_max{std::chrono::seconds(30)};
  // Devices declare compatibility groups (KEP-5963; resource_slices.h CompatibilityGroup) where
  // the API server keeps them: before the pool is written, and again each `probe_interval` (the
  // gate changes with an API server restart), a dry-run create of one of its slices, groups
  // included, shows whether the server keeps them, drops them (before 1.37, or the gate off) or
  // refuses them; only the first gets them. A scheduler with the gate off while the API server
  // has it on skips devices that declare groups (the KEP's skew table): the gate goes on in both,
  // or this is off (config dra.compatibilityGroups).
  bool compatibility_groups = true;
  std::chrono::milliseconds probe_interval{std::chrono::minutes(5)};
  // Watch the node's slices of the driver and publish again at once when one is deleted (above).
  bool watch_deletions = true;
};

class SlicePublisher {
 public:
  // The pool's slices at `generation` (BuildResourceSlices), with or without compatibility
  // groups; an error skips the pass.
  using Source = std::function<Result<std::vector<nlohmann::json>>(int64_t generation,
                                                                   bool compatibility_groups)>;
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
  // Whether the pool is published with compatibility groups (the last pass's choice).
  bool compatibility_groups() const;

  static constexpr const char* kCollection = "/apis/resource.k8s.io/v1/resourceslices";

 private:
  void Loop(BackgroundWorker::Handle& worker);
  Result<nlohmann::json> OwnerReference();
  // The collection's path selecting this node's slices of the driver.
  std::string OursPath() const;
  Result<std::vector<nlohmann::json>> ListOurs();
  // Whether this pass writes compatibility groups (probes when due).
  Result<bool> WithCompatibilityGroups(int64_t generation);

  kube::ApiTransport& api_;
  Source source_;
  SlicePublisherOptions options_;
  Observer observer_;

  mutable std::mutex mutex_;
  bool triggered_ = true;
  int64_t generation_ = 0;
  bool with_groups_ = false;
  std::optional<bool> groups_kept_;  // the last probe's answer
  std::chrono::steady_clock::time_point next_probe_{};
  nlohmann::json owner_;  // null until the Node was read
  Canceller cancel_;
  BackgroundWorker worker_;  // woken by a trigger
  std::unique_ptr<kube::ListWatcher> watcher_;
};

}  // namespace kvgpu::deviceplugin::dra
