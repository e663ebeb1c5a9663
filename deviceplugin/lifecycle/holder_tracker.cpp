#include "deviceplugin/lifecycle/holder_tracker.h"

#include <spdlog/spdlog.h>

#include <set>

#include "common/clock.h"
#include "common/log_safe.h"

namespace kvgpu::deviceplugin {

namespace {

bool Alive(const kube::PodInfo& pod) {
  return !pod.Finished() && !pod.deleting;
}

// The first of the checkpoint's pods `uids` that the API server shows alive, if it is followed.
const kube::PodInfo* AliveOneOf(const HolderFacts& facts, const std::vector<std::string>* uids) {
  if (uids == nullptr || !facts.api_following) return nullptr;
  for (const std::string& uid : *uids) {
    auto pod = facts.api_pods.find(uid);
    if (pod != facts.api_pods.end() && Alive(pod->second)) return &pod->second;
  }
  return nullptr;
}

// Whether the API server, followed now, has shown every one of `uids` (alive or deleted). A UID
// it has not shown yet may be a pod newer than our watch: not proof the pod is gone.
bool AllShownByTheApi(const HolderFacts& facts, const std::vector<std::string>* uids) {
  if (uids == nullptr || !facts.api_following) return false;
  for (const std::string& uid : *uids) {
    if (!facts.api_pods.contains(uid) && !facts.api_deleted.contains(uid)) return false;
  }
  return true;
}

// The pod named `key` ("namespace/name") if the API server, followed now, shows it alive.
const kube::PodInfo* AliveByKey(const HolderFacts& facts, const std::string& key) {
  if (!facts.api_following) return nullptr;
  for (const auto& [uid, pod] : facts.api_pods) {
    if (pod.Key() == key && Alive(pod)) return &pod;
  }
  return nullptr;
}

// The pod this vGPU was once seen with (kubelet listed it holding the device, and the API server
// gave its UID), when the API server, followed now, still shows that very pod alive.
const kube::PodInfo* LiveOwner(const CreatedVgpu& vgpu, const HolderFacts& facts) {
  if (!vgpu.owner_uid || !facts.api_following) return nullptr;
  auto pod = facts.api_pods.find(*vgpu.owner_uid);
  return pod != facts.api_pods.end() && Alive(pod->second) ? &pod->second : nullptr;
}

}  // namespace

Verdict Judge(const CreatedVgpu& vgpu, const HolderFacts& facts, int64_t now_unix_ms,
              std::chrono::milliseconds settle, Purpose purpose) {
  bool removal = purpose == Purpose::kRemoval;
  DeviceRef ref{vgpu.resource, vgpu.device_id};
  if (auto it = facts.kubelet_holders.find(ref); it != facts.kubelet_holders.end()) {
    if (!removal) {
      // kubelet hands out a device it lists a pod holding. Never for that pod itself: a
      // container's devices are asked for once, and the one reuse (an app container taking its
      // init container's device) is of a device List does not show. So kubelet lost the device
      // from its in-use set: a PodResources List while an allocation is in flight and an ended
      // pod is still in its books rebuilds that set from the recorded allocations alone
      // (upstream UpdateAllocatedDevices; kubernetes/kubernetes#137534, open), and the next pod
      // can get the in-flight one's device.
      // The real kubelet 1.37.2 listed two running pods holding one ID on a busy machine. Refused.
      return {Holding::kUnknown, "",
              "kubelet lists " + it->second +
                  " holding it yet hands it out again (kubelet lost it from its in-use set); "
                  "the vGPU is that pod's, never shared"};
    }
    const kube::PodInfo* pod = AliveByKey(facts, it->second);
    return {Holding::kHeld, it->second, "kubelet lists " + it->second + " holding it",
            pod != nullptr ? pod->uid : ""};
  }
  if (!facts.kubelet_known) {
    return {Holding::kUnknown, "",
            "kubelet's PodResources API is not answering: " + facts.kubelet_problem};
  }
  if (removal && now_unix_ms - facts.kubelet_up_unix_ms < settle.count()) {
    return {Holding::kUnknown, "", "kubelet answers again only since moments ago"};
  }
  if (removal && !facts.kubelet_resynced) {
    return {Holding::kUnknown, "",
            "kubelet restarted and does not yet list the node's pods with devices"};
  }
  // The pods kubelet's checkpoint gave the ID to, and whether any of them is alive.
  const std::vector<std::string>* uids = nullptr;
  if (auto it = facts.checkpoint_uids.find(ref); it != facts.checkpoint_uids.end()) {
    uids = &it->second;
  }
  const kube::PodInfo* alive = AliveOneOf(facts, uids);
  if (alive != nullptr && removal) {
    return {Holding::kHeld, alive->Key(),
            "the API server shows " + alive->Key() +
                " alive and kubelet's checkpoint gave it the device",
            alive->uid};
  }
  // For Allocate, kubelet must also still count the pod as its own: the pod being admitted
  // asks for its init container's device again. A pod that ended and whose end the API server
  // has not shown yet is one kubelet no longer lists (it lists active pods only).
  if (alive != nullptr && facts.kubelet_pods.contains(alive->Key())) {
    return {Holding::kHeld, alive->Key(),
            "kubelet's checkpoint gave it to " + alive->Key() +
                ", which kubelet and the API server both show alive (its next container asks)",
            alive->uid};
  }
  // Neither kubelet's books nor its checkpoint give the device to anyone, yet the pod kubelet
  // once listed holding it is alive: kubelet's books lost the pod's device (a restart that read a
  // checkpoint written before the pod's Allocate, or none), and the pod still runs with the vGPU.
  // Kept (a restarted kubelet may list no pod at all for a while). Not handed to whoever asks
  // either, while kubelet lists that pod: one that ended, which kubelet no longer lists (active
  // pods only), lets its device go before the API server shows the end.
  if (const kube::PodInfo* owner = LiveOwner(vgpu, facts); owner != nullptr) {
    std::string why = "the API server shows " + owner->Key() +
                      ", which kubelet listed holding it, alive: kubelet's books lost the device "
                      "of a pod that still runs with it";
    if (removal) return {Holding::kHeld, owner->Key(), why, owner->uid};
    if (facts.kubelet_pods.contains(owner->Key())) return {Holding::kUnknown, "", why};
  }
  bool young = now_unix_ms - vgpu.created_unix_ms < settle.count();
  if (!removal) {
    if (uids != nullptr && facts.api_configured && !facts.api_following) {
      // The pod being admitted asking for its init container's device, or a new pod getting an
      // ended pod's device: without the API server's view of the pod the checkpoint names, the
      // two cannot be told apart. Until it is back, such IDs are not handed on (the lifecycle
      // still removes old vGPUs on kubelet's word, after which the ID is plain free). With no
      // API server configured at all, kubelet's word decides (an init container sharing its
      // vGPU then needs the API server).
      return {Holding::kUnknown, "",
              "kubelet's checkpoint gives it to a pod and the API server, not followed now, "
              "cannot tell whether that pod is the one asking"};
    }
    if (!facts.checkpoint_known && young) {
      return {Holding::kUnknown, "",
              "made moments ago and no kubelet checkpoint to tell its pod's next container from "
              "a new pod"};
    }
    return {Holding::kFree, "", "no live pod holds it"};
  }
  if (young) {
    // kubelet records the pod only after Allocate returns. The protection ends once the pod
    // the checkpoint names is gone from kubelet and the API server alike, and only a checkpoint
    // written since the vGPU was handed out can name its pod: an older one (kubelet has not
    // written since, or these facts were gathered before the Allocate) names the ID's last pod.
    const bool names_its_pod = facts.checkpoint_written_unix_ms >= vgpu.created_unix_ms;
    if (!names_its_pod || !AllShownByTheApi(facts, uids)) {
      return {Holding::kHeld, vgpu.owner_pod.value_or(""),
              "allocated moments ago; kubelet records the pod after Allocate returns"};
    }
  }
  return {Holding::kFree, "", "no live pod holds it"};
}

bool Resynced(const std::vector<kubelet::PodResources>& listed, const HolderFacts& facts) {
  if (facts.api_following) {
    std::set<std::string> keys;
    for (const kubelet::PodResources& pod : listed)
      keys.insert(pod.namespace_name + "/" + pod.name);
    for (const auto& [ref, uids] : facts.checkpoint_uids) {
      for (const std::string& uid : uids) {
        auto pod = facts.api_pods.find(uid);
        if (pod != facts.api_pods.end() && Alive(pod->second) &&
            !keys.contains(pod->second.Key())) {
          return false;
        }
      }
    }
    return true;
  }
  return !listed.empty() || (facts.checkpoint_known && facts.checkpoint_uids.empty());
}

std::map<DeviceRef, std::string> HoldersFromPodResources(
    const std::vector<kubelet::PodResources>& pods) {
  std::map<DeviceRef, std::string> out;
  for (const kubelet::PodResources& pod : pods) {
    for (const kubelet::ContainerResources& container : pod.containers) {
      for (const kubelet::ContainerDevices& devices : container.devices) {
        for (const std::string& id : devices.device_ids) {
          out.try_emplace({devices.resource_name, id}, pod.namespace_name + "/" + pod.name);
        }
      }
    }
  }
  return out;
}

std::map<DeviceRef, std::vector<std::string>> UidsFromCheckpoint(
    const kubelet::Checkpoint& checkpoint) {
  std::map<DeviceRef, std::vector<std::string>> out;
  for (const kubelet::CheckpointEntry& entry : checkpoint.entries) {
    for (const std::string& id : entry.DeviceIds()) {
      std::vector<std::string>& uids = out[{entry.resource_name, id}];
      if (std::find(uids.begin(), uids.end(), entry.pod_uid) == uids.end()) {
        uids.push_back(entry.pod_uid);
      }
    }
  }
  return out;
}

HolderTracker::HolderTracker(kubelet::PodResourcesSource* podresources,
                             kubelet::CheckpointWatcher* checkpoint, kube::PodWatcher* pods,
                             std::chrono::milliseconds settle)
    : podresources_(podresources), checkpoint_(checkpoint), pods_(pods), settle_(settle) {}

HolderTracker::~HolderTracker() {
  Stop();
}

void HolderTracker::Start(TrackerCallbacks callbacks) {
  callbacks_ = std::move(callbacks);
  if (checkpoint_ != nullptr) {
    checkpoint_->Start([this](const kubelet::CheckpointView& view) { OnCheckpoint(view); });
  }
  if (pods_ != nullptr) {
    pods_->Start(
        {[this](const std::vector<kube::PodInfo>& pods) { OnSynced(pods); },
         [this](kube::PodEventType type, const kube::PodInfo& pod) { OnEvent(type, pod); },
         [this](bool following, const std::string& reason) { OnConnection(following, reason); }});
  }
}

void HolderTracker::Stop() {
  if (pods_ != nullptr) pods_->Stop();
  if (checkpoint_ != nullptr) checkpoint_->Stop();
}

void HolderTracker::ListKubelet() {
  const uint64_t generation = ++lists_started_;
  auto listed = podresources_->List();  // bounded by the client's deadline
  std::lock_guard facts_lock(mutex_);
  if (generation < lists_applied_) return;  // a List started later has answered already
  lists_applied_ = generation;
  if (listed.ok()) {
    if (!kubelet_known_) {
      kubelet_up_unix_ms_ = UnixNowMs();
      kubelet_resynced_ = false;
      // The first answer after our own start is trusted after `settle`; one after an error
      // (kubelet or its PodResources server restarted) after kRestartSettle at the latest.
      resync_bound_ = kubelet_ever_known_ ? kRestartSettle : settle_;
      kubelet_ever_known_ = true;
      spdlog::info("kubelet PodResources answering ({} pods)", listed->size());
    }
    kubelet_known_ = true;
    kubelet_holders_ = HoldersFromPodResources(*listed);
    kubelet_pods_.clear();
    for (const kubelet::PodResources& pod : *listed) {
      kubelet_pods_.insert(pod.namespace_name + "/" + pod.name);
    }
    if (!kubelet_resynced_) {
      HolderFacts facts;
      facts.checkpoint_known = checkpoint_known_;
      facts.checkpoint_uids = checkpoint_uids_;
      facts.api_following = api_following_;
      facts.api_pods = api_pods_;
      kubelet_resynced_ = Resynced(*listed, facts);
      if (kubelet_resynced_) {
        spdlog::info("kubelet lists the node's pods again");
      } else if (UnixNowMs() - kubelet_up_unix_ms_ >= resync_bound_.count()) {
        // A node whose pods are all gone lists nothing for good: invariant 2 needs an end.
        kubelet_resynced_ = true;
        spdlog::info(
            "kubelet has listed no pod for {} ms since it (re)started; taking its "
            "answer as complete",
            resync_bound_.count());
      }
    }
  } else {
    // kubelet's words: escaped once, here, for every verdict and log line that quotes them.
    std::string problem = LogSafe(listed.status().message(), 512);
    if (kubelet_known_ || kubelet_problem_ != problem) {
      spdlog::warn("kubelet PodResources not answering: {}; no vGPU is removed meanwhile", problem);
    }
    kubelet_known_ = false;
    kubelet_problem_ = std::move(problem);
  }
}

HolderFacts HolderTracker::Collect(bool fresh_checkpoint) {
  // The checkpoint first: whether a restarted kubelet's answer is complete is judged against it.
  if (fresh_checkpoint && checkpoint_ != nullptr) {
    kubelet::CheckpointView view = checkpoint_->Reload();
    std::lock_guard lock(mutex_);
    ApplyCheckpoint(view);
  }
  if (podresources_ != nullptr) ListKubelet();
  std::lock_guard lock(mutex_);
  HolderFacts facts;
  facts.kubelet_known = kubelet_known_;
  facts.kubelet_up_unix_ms = kubelet_up_unix_ms_;
  facts.kubelet_problem =
      podresources_ == nullptr ? "no PodResources socket configured" : kubelet_problem_;
  facts.kubelet_holders = kubelet_holders_;
  facts.kubelet_pods = kubelet_pods_;
  facts.checkpoint_uids = checkpoint_uids_;
  facts.api_following = api_following_;
  facts.api_configured = pods_ != nullptr;
  facts.api_pods = api_pods_;
  facts.api_deleted = api_deleted_;
  facts.kubelet_resynced = kubelet_resynced_;
  facts.checkpoint_known = checkpoint_known_;
  facts.checkpoint_written_unix_ms = checkpoint_written_unix_ms_;
  return facts;
}

Verdict HolderTracker::Check(const CreatedVgpu& vgpu) {
  return CheckAll({vgpu}).at(0);
}

std::vector<Verdict> HolderTracker::CheckAll(const std::vector<CreatedVgpu>& vgpus) {
  std::vector<Verdict> out;
  if (vgpus.empty()) return out;
  HolderFacts facts = Collect(true);
  int64_t now = UnixNowMs();
  for (const CreatedVgpu& vgpu : vgpus) {
    Verdict verdict = Judge(vgpu, facts, now, settle_, Purpose::kAllocation);
    spdlog::debug("holder check device={} verdict={} ({})", LogSafe(vgpu.device_id),
                  static_cast<int>(verdict.holding), verdict.why);
    out.push_back(std::move(verdict));
  }
  return out;
}

void HolderTracker::OnAllocated() {
  std::lock_guard lock(mutex_);
  if (kubelet_resynced_ || !kubelet_known_) return;
  kubelet_resynced_ = true;
  spdlog::info("kubelet admits pods again (an Allocate): its pod list counts as complete");
}

void HolderTracker::KubeletRestarted(const std::string& how) {
  std::lock_guard lock(mutex_);
  kubelet_up_unix_ms_ = UnixNowMs();
  // A restart is heard of several times (each resource's stream, kubelet.sock, registrations):
  // said once until kubelet lists the node's pods again.
  if (kubelet_resynced_) {
    spdlog::info("kubelet restarted ({}): no vGPU is removed until it lists the node's pods again",
                 how);
  }
  kubelet_resynced_ = false;
  resync_bound_ = kRestartSettle;
}

std::string HolderTracker::UidOf(const std::string& pod_key) const {
  std::lock_guard lock(mutex_);
  for (const auto& [uid, pod] : api_pods_) {
    if (pod.Key() == pod_key) return uid;
  }
  return "";
}

bool HolderTracker::api_following() const {
  std::lock_guard lock(mutex_);
  return api_following_;
}

void HolderTracker::OnSynced(const std::vector<kube::PodInfo>& pods) {
  {
    std::lock_guard lock(mutex_);
    api_pods_.clear();
    for (const kube::PodInfo& pod : pods) api_pods_[pod.uid] = pod;
  }
  if (callbacks_.pod_gone) callbacks_.pod_gone();
}

void HolderTracker::OnEvent(kube::PodEventType type, const kube::PodInfo& pod) {
  bool gone = false;
  {
    std::lock_guard lock(mutex_);
    if (type == kube::PodEventType::kDeleted) {
      api_pods_.erase(pod.uid);
      if (api_deleted_.size() >= 4096) api_deleted_.clear();  // only a young vGPU's shortcut
      api_deleted_.insert(pod.uid);
      gone = true;
    } else {
      auto& known = api_pods_[pod.uid];
      gone = (pod.Finished() && !known.Finished()) || (pod.deleting && !known.deleting);
      known = pod;
    }
  }
  if (gone && callbacks_.pod_gone) callbacks_.pod_gone();
}

void HolderTracker::OnConnection(bool following, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (api_following_ == following) return;
    api_following_ = following;
  }
  if (following) {
    spdlog::info("API server: following pods again ({})", reason);
  } else {
    spdlog::warn("API server: not following pods ({}); deciding from kubelet alone", reason);
  }
  // What is free may have changed either way: pods the API still showed alive no longer count.
  if (callbacks_.pod_gone) callbacks_.pod_gone();
}

void HolderTracker::ApplyCheckpoint(const kubelet::CheckpointView& view) {
  checkpoint_problem_ = view.current ? "" : view.problem;
  if (view.checkpoint) {
    checkpoint_uids_ = UidsFromCheckpoint(*view.checkpoint);
    checkpoint_written_unix_ms_ = view.written_unix_ms;
    checkpoint_known_ = true;
  }
}

void HolderTracker::OnCheckpoint(const kubelet::CheckpointView& view) {
  {
    std::lock_guard lock(mutex_);
    if (!view.current && view.problem != checkpoint_problem_) {
      spdlog::warn("kubelet checkpoint {}: {}; keeping the last good view",
                   checkpoint_ ? checkpoint_->path().string() : "", view.problem);
    }
    ApplyCheckpoint(view);
  }
  if (callbacks_.checkpoint_changed) callbacks_.checkpoint_changed();
}

}  // namespace kvgpu::deviceplugin
