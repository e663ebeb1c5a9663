// Which pod holds each device ID, from the three places that know: kubelet's PodResources API
// (who holds what now), kubelet's device-manager checkpoint (which pod UID was ever given an ID;
// entries are never dropped) and the API server's pods on this node (which pods are alive).
//
// The verdict rules (Judge) defend invariant 1 first:
//   - kubelet lists a pod holding the ID: held;
//   - kubelet unreachable, or back for less than `settle`: unknown;
//   - the vGPU was made less than `settle` ago: held (kubelet records the pod only after
//     Allocate returns, and init and app containers of one pod share a device);
//   - the API server, while followed, shows alive a pod that the checkpoint gave the ID:
//     held (a kubelet that has just restarted lists nothing yet);
//   - otherwise free. The API's word alone never frees a device kubelet still lists, and with the
//     API unreachable kubelet's word decides.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "deviceplugin/holders.h"
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
  std::map<DeviceRef, std::vector<std::string>> checkpoint_uids;  // -> pod UIDs, file order
  bool api_following = false;
  std::map<std::string, kube::PodInfo> api_pods;  // uid -> pod, alive in the API's view
};

struct Verdict {
  Holding holding = Holding::kUnknown;
  std::string holder;  // "namespace/name" when known
  std::string why;     // for logs
};

// Who asks: the reconciler, about to remove a vGPU, or Allocate, about to hand a device ID out
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

  // Asks kubelet afresh, then returns all facts.
  HolderFacts Collect();
  // Allocate's question, answered with a fresh look at kubelet.
  HolderAnswer Check(const CreatedVgpu& vgpu) override;

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

  // Asking kubelet is serialized: Allocate and the reconciler may ask at once.
  std::mutex kubelet_mutex_;
  mutable std::mutex mutex_;
  bool kubelet_known_ = false;
  int64_t kubelet_up_unix_ms_ = 0;
  std::string kubelet_problem_ = "not asked yet";
  std::map<DeviceRef, std::string> kubelet_holders_;
  std::map<DeviceRef, std::vector<std::string>> checkpoint_uids_;
  std::string checkpoint_problem_;
  bool api_following_ = false;
  std::map<std::string, kube::PodInfo> api_pods_;
};

int64_t UnixNowMs();

}  // namespace kvgpu::deviceplugin
