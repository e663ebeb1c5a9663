// The node's side of the binding conditions its devices carry (docs/dra.md, "Occupancy: binding
// conditions"): follows the cluster's ResourceClaims (all namespaces; kept only when an allocation
// result names this driver and this node's pool), decides each allocated device with
// occupancy_decision.h, and writes the verdict into claim.status.devices: OccupancyConfirmed=True
// (the scheduler binds the pod) or OccupancyConflict=True (the scheduler clears the allocation and
// schedules the pod again).
//
// Writes go through the status subresource as a JSON merge patch carrying the claim's uid and the
// resourceVersion it was decided on (a precondition: 409 when the claim moved on), with
// status.devices written whole: other drivers' entries as read, ours with the condition set. A
// 409 reads the claim again and decides again, at most `attempts` times a pass; anything else
// waits for the next pass (a change, or the resync). Verdicts written are remembered until the
// claim shows them, is deleted or is allocated anew. After a restart the claims' conditions are
// the record: a confirmed claim stays confirmed.
//
// Acting on a stale view is safe: only this process confirms for its pool, so a claim not seen
// yet is one not confirmed yet, and a deletion not seen yet only keeps its GPU locked longer.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/background_worker.h"
#include "common/status.h"
#include "deviceplugin/dra/occupancy_decision.h"
#include "kube/api_client.h"
#include "kube/list_watch.h"

namespace kvgpu::deviceplugin::dra {

struct OccupancyConfirmerOptions {
  std::string driver;
  std::string pool;  // the node name (DraPoolName)
  std::chrono::milliseconds resync{std::chrono::seconds(30)};
  int attempts = 3;  // writes of one claim a pass that meet a 409
  // Claims of this pool kept; more on one node is no real state (the claim checkpoint's bound).
  size_t max_claims = 4096;
  kube::ListWatchOptions watch;  // path and what are set by the confirmer
  // Told of each device verdict written to a claim (metrics); quick, and never calls back.
  std::function<void(Verdict)> on_verdict = nullptr;
};

class OccupancyConfirmer {
 public:
  // What the node's GPUs carry now; an error skips the pass.
  using ViewSource = std::function<Result<OccupancyView>()>;
  // The held devices (Held()) changed: the slices' narrowing must follow.
  using HeldListener = std::function<void()>;

  OccupancyConfirmer(kube::ApiTransport& api, ViewSource source, OccupancyConfirmerOptions options,
                     HeldListener on_held = nullptr);
  ~OccupancyConfirmer();
  OccupancyConfirmer(const OccupancyConfirmer&) = delete;
  OccupancyConfirmer& operator=(const OccupancyConfirmer&) = delete;

  // The claims' list-watch and the deciding thread.
  void Start();
  void Stop();
  // The node's state changed (a prepare, an unprepare, a rescan): decide again soon.
  void Trigger();

  // Devices of this pool that confirmed claims (or claims never waited for) hold.
  std::vector<std::string> Held() const;

  // What the list-watch hands on; public so tests can feed claims without a watch.
  void OnSynced(const std::vector<nlohmann::json>& claims);
  void OnEvent(kube::WatchEventType type, const nlohmann::json& claim);
  // One pass on the caller's thread: decide, write. Returns the verdicts written.
  Result<int> Pass();

  static constexpr const char* kCollection = "/apis/resource.k8s.io/v1/resourceclaims";

 private:
  struct Known {
    nlohmann::json object;
    AllocatedClaim claim;
  };
  struct Remembered {
    std::string allocation;  // AllocationKey of the claim it was written for
    std::map<std::string, Verdict> devices;
  };

  static std::string AllocationKey(const AllocatedClaim& claim);
  // Keeps `object` if it is allocated from our pool, else forgets its uid. mutex_ held.
  void TakeLocked(const nlohmann::json& object);
  // Writes `verdict` into the claim; true when written, false on a 409 (the claim re-read).
  Result<bool> Write(const ClaimVerdict& verdict);
  void Loop(BackgroundWorker::Handle& worker);

  kube::ApiTransport& api_;
  ViewSource source_;
  OccupancyConfirmerOptions options_;
  HeldListener on_held_;
  kube::ListWatcher watcher_;

  mutable std::mutex mutex_;
  bool triggered_ = true;
  std::map<std::string, Known> claims_;           // by uid
  std::map<std::string, Remembered> remembered_;  // by uid
  std::vector<std::string> held_;
  bool warned_full_ = false;
  std::mutex pass_mutex_;  // one pass at a time
  Canceller cancel_;
  BackgroundWorker worker_;  // woken by a trigger; last: stopped before the members it uses go
};

}  // namespace kvgpu::deviceplugin::dra
