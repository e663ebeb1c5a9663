// Which pod holds each device ID, from the three places that know: kubelet's PodResources API
// (who holds what now, app containers only), kubelet's device-manager checkpoint (which pod UID
// each ID was given to, as of kubelet's last Allocate; kubelet writes it right after each
// container's Allocate returns and drops ended pods at its next write) and the API server's pods
// on this node (which pods are alive). Age never decides who holds a vGPU. kubelet copies its
// books under a lock but writes the file after releasing it, so a write begun earlier (each
// ListAndWatch update starts one, and a lock push arrives during the Allocate) can land after the
// Allocate's own with older books: the file may lack the newest pod until kubelet writes again
// (upstream's writeCheckpoint; a busy CI run read such a file). PodResources, read from kubelet's
// memory, does not lag; it is asked first.
//
// For Allocate (kubelet hands an ID out; it means never to hand out an ID an active pod holds,
// except to that same pod's app container reusing its init container's, which List does not show):
//   - kubelet lists a pod holding the ID: unknown (kubelet lost the ID from its in-use set, see
//     holders.h: the vGPU is that pod's, never shared);
//   - kubelet not answering: unknown (refused, nothing handed on);
//   - the checkpoint, read afresh, gives the ID to a pod the API server shows alive and kubelet
//     still lists: held (the init container's device now asked for by the app container; kubelet
//     wrote that entry before this call, and lists the pod it is admitting);
//   - the pod kubelet once listed holding the ID (its UID as the API server gave it then), which
//     kubelet still lists, now without the ID, and the API server shows alive: unknown (kubelet's
//     books lost that pod's device, as a restart over a checkpoint that lagged leaves them, and
//     the pod still runs with the vGPU: neither removed nor handed to whoever asks);
//   - the checkpoint naming a pod and the API server configured but not followed now: unknown
//     (that pod's next container and a new pod cannot be told apart until it is back);
//   - no checkpoint to read and the vGPU is younger than `settle`: unknown (the same pod's next
//     container cannot be told from a new pod);
//   - otherwise free: the old vGPU is removed and a fresh one made.
// For the lifecycle's removals, kubelet listing a pod holding the ID makes it held, and on top:
//   - kubelet answering again (or restarted: kubelet.sock re-created, PodResources failing then
//     answering) for less than `settle`, or not yet listing every pod the API shows alive with a
//     device in the checkpoint: unknown (a restarted kubelet lists nothing for a while);
//   - the vGPU younger than `settle`: held, unless the checkpoint names its pod and the API server
//     shows that pod gone or ended and kubelet does not list it. Only a checkpoint written after
//     the vGPU was handed to kubelet can name its pod: until kubelet's write after that Allocate,
//     the file still names the ID's earlier pod, long gone;
//   - the API server, while followed, shows alive a pod the checkpoint gave the ID: held;
//   - the pod kubelet once listed holding the ID, shown alive by the API server: held, whether
//     kubelet lists it or not (a restarted kubelet may list no pod for a while).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "deviceplugin/model/holders.h"
#include "kube/kubelet/checkpoint_watcher.h"
#include "kube/kubelet/podresources.h"
#include "kube/pod.h"
#include "kube/pod_watcher.h"

namespace kvgpu::deviceplugin {

using DeviceRef = std::pair<std::string, std::string>;  // resource, device ID

// What the sources say at one moment.
struct HolderFacts {
  bool kubelet_known = false;                        // the last PodResources List succeeded
  int64_t kubelet_up_unix_ms = 0;                    // since when it has been answering
  std::string kubelet_problem;                       // why not known
  std::map<DeviceRef, std::string> kubelet_holders;  // -> "namespace/name"
  std::set<std::string> kubelet_pods;                // every pod kubelet lists, "namespace/name"
  std::map<DeviceRef, std::vector<std::string>> checkpoint_uids;  // -> pod UIDs, file order
  bool api_following = false;
  bool api_configured = true;  // false: no API server at all, kubelet's word alone decides
  std::map<std::string, kube::PodInfo> api_pods;  // uid -> pod, alive in the API's view
  std::set<std::string> api_deleted;              // UIDs the API showed deleted since its list
  // kubelet has shown it knows the node's pods since it last (re)started (see Resynced).
  bool kubelet_resynced = true;
  bool checkpoint_known = false;  // a checkpoint was read; checkpoint_uids says something
  // When kubelet wrote the checkpoint behind checkpoint_uids (0: unknown). An entry in a file
  // written before a vGPU was handed to kubelet names an earlier pod of the same device ID.
  int64_t checkpoint_written_unix_ms = 0;
};

// Whether kubelet, after a restart, lists the node's pods again: with the API server followed,
// every pod it shows alive that the checkpoint gave a device is listed by kubelet; without it,
// kubelet lists some pod, or a checkpoint was read and gives no device to anyone. kubelet calling
// Allocate since the restart also counts (HolderTracker::OnAllocated).
bool Resynced(const std::vector<kubelet::PodResources>& listed, const HolderFacts& facts);

// Who asks: the lifecycle, about to remove a vGPU, or Allocate, about to hand a device ID out
// again. kubelet calls Allocate only with IDs no active pod holds in its own books (or for the pod
// that holds them), so there its word is final and the two rules that only guard removals (kubelet
// just back, the API's live pod) do not apply: they would hand one pod's vGPU to the next.
enum class Purpose { kRemoval, kAllocation };

Verdict Judge(const CreatedVgpu& vgpu, const HolderFacts& facts, int64_t now_unix_ms,
              std::chrono::milliseconds settle, Purpose purpose = Purpose::kRemoval);

// Indexes kubelet's answers by device.
std::map<DeviceRef, std::string> HoldersFromPodResources(
    const std::vector<kubelet::PodResources>& pods);
std::map<DeviceRef, std::vector<std::string>> UidsFromCheckpoint(
    const kubelet::Checkpoint& checkpoint);

struct TrackerCallbacks {
  // A pod ended (deleted, or Succeeded/Failed), the API relisted, or the API server was lost
  // or found again: worth a pass now.
  std::function<void()> pod_gone;
  // kubelet's checkpoint changed: owners may be known now.
  std::function<void()> checkpoint_changed;
};

class HolderTracker : public HolderOracle {
 public:
  // Any source may be null: it then says nothing (no PodResources means nothing is ever free).
  HolderTracker(kubelet::PodResourcesSource* podresources, kubelet::CheckpointWatcher* checkpoint,
                kube::PodWatcher* pods, std::chrono::milliseconds settle);
  ~HolderTracker() override;

  void Start(TrackerCallbacks callbacks);
  void Stop();

  // Asks kubelet afresh (a List started after this call; concurrent callers share one), then
  // returns all facts. `fresh_checkpoint` reads kubelet's checkpoint file now as well.
  HolderFacts Collect(bool fresh_checkpoint = false);
  // Allocate's question, answered with a fresh look at kubelet and its checkpoint.
  Verdict Check(const CreatedVgpu& vgpu) override;
  std::vector<Verdict> CheckAll(const std::vector<CreatedVgpu>& vgpus) override;
  // kubelet restarted (its registration socket appeared again): nothing is removed until it
  // has answered for `settle` and lists the node's pods again.
  void KubeletRestarted(const std::string& how);
  // An Allocate since the (re)start: kubelet admits pods of the API server's source only once
  // that source has delivered its pods, so from then on its List is complete.
  void OnAllocated() override;

  // The pod's UID in the API's view, for Events; empty when unknown.
  std::string UidOf(const std::string& pod_key) const;
  bool api_following() const;

 private:
  void OnSynced(const std::vector<kube::PodInfo>& pods);
  void OnEvent(kube::PodEventType type, const kube::PodInfo& pod);
  void OnConnection(bool following, const std::string& reason);
  void OnCheckpoint(const kubelet::CheckpointView& view);

  kubelet::PodResourcesSource* podresources_;
  kubelet::CheckpointWatcher* checkpoint_;
  kube::PodWatcher* pods_;
  std::chrono::milliseconds settle_;
  TrackerCallbacks callbacks_;

  void ListKubelet();
  void ApplyCheckpoint(const kubelet::CheckpointView& view);  // caller holds mutex_

  // Every caller runs its own List at once, never waiting for one that started before it came
  // (that one may predate what it must see, and waiting first would cost it two deadlines).
  // Lists may overlap; the facts are those of the newest List to have finished, and an older
  // one finishing later is dropped. A caller thus always reads a List started after it came.
  std::atomic<uint64_t> lists_started_{0};
  uint64_t lists_applied_ = 0;  // guarded by mutex_

  mutable std::mutex mutex_;
  bool kubelet_resynced_ = false;
  // How long an empty answer is doubted at most: `settle` after our own start, kRestartSettle
  // after kubelet restarted (a restarted kubelet lists nothing until its pod manager synced).
  static constexpr std::chrono::milliseconds kRestartSettle{60000};
  std::chrono::milliseconds resync_bound_{kRestartSettle};
  bool kubelet_ever_known_ = false;
  bool checkpoint_known_ = false;
  bool kubelet_known_ = false;
  int64_t kubelet_up_unix_ms_ = 0;
  std::string kubelet_problem_ = "not asked yet";
  std::map<DeviceRef, std::string> kubelet_holders_;
  std::set<std::string> kubelet_pods_;
  std::map<DeviceRef, std::vector<std::string>> checkpoint_uids_;
  int64_t checkpoint_written_unix_ms_ = 0;
  std::string checkpoint_problem_;
  bool api_following_ = false;
  std::map<std::string, kube::PodInfo> api_pods_;
  std::set<std::string> api_deleted_;
};

}  // namespace kvgpu::deviceplugin
