#include "deviceplugin/lifecycle/lifecycle.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/clock.h"

namespace kvgpu::deviceplugin {

using Clock = std::chrono::steady_clock;

namespace {

std::string FreeKey(const CreatedVgpu& r) {
  return r.device_id + "/" + r.vgpu_id;
}

const CreatedVgpu* FindRecord(const LifecycleSnapshot& snapshot, const CreatedVgpu& wanted) {
  for (const CreatedVgpu& r : snapshot.records) {
    if (r.device_id == wanted.device_id && r.vgpu_id == wanted.vgpu_id) return &r;
  }
  return nullptr;
}

}  // namespace

PassPlan PlanPass(const LifecycleSnapshot& snapshot, const HolderFacts& facts,
                  std::map<std::string, int64_t>& free_since, int64_t now_unix_ms,
                  const LifecycleOptions& options) {
  PassPlan plan;
  std::set<std::string> seen;
  for (const CreatedVgpu& r : snapshot.records) {
    std::string key = FreeKey(r);
    seen.insert(key);
    if (snapshot.removing.contains(r.device_id)) continue;
    if (snapshot.allocating.contains(r.device_id)) {
      // kubelet is handing the ID out right now: whatever the facts say predates its answer.
      free_since.erase(key);
      continue;
    }
    Verdict verdict = Judge(r, facts, now_unix_ms, options.settle);
    switch (verdict.holding) {
      case Holding::kHeld:
        ++plan.held;
        free_since.erase(key);
        if (!verdict.holder.empty() &&
            (r.owner_pod != verdict.holder ||
             (!verdict.holder_uid.empty() && r.owner_uid != verdict.holder_uid))) {
          plan.owners[r.device_id] = {verdict.holder, verdict.holder_uid};
        }
        break;
      case Holding::kUnknown:
        ++plan.unknown;
        free_since.erase(key);
        break;
      case Holding::kFree: {
        if (!snapshot.inventory_known) {
          ++plan.unknown;  // the backend was never read: gone and unseen look the same
          break;
        }
        if (!snapshot.existing.contains(r.vgpu_id)) {
          plan.forget.push_back(r);
          free_since.erase(key);
          break;
        }
        int64_t since = free_since.try_emplace(key, now_unix_ms).first->second;
        if (now_unix_ms - since >= options.grace_period.count()) {
          plan.remove.push_back(r);
        } else {
          ++plan.waiting;
        }
        break;
      }
    }
  }
  std::erase_if(free_since, [&](const auto& entry) { return !seen.contains(entry.first); });
  return plan;
}

Lifecycle::Lifecycle(ResourceManager& manager, HolderTracker& tracker, kube::EventRecorder* events,
                     LifecycleOptions options, LifecycleObserver* observer)
    : manager_(manager),
      tracker_(tracker),
      events_(events),
      options_(options),
      observer_(observer) {}

Lifecycle::~Lifecycle() {
  Stop();
}

void Lifecycle::Start() {
  {
    std::lock_guard lock(mutex_);
    scheduled_.push_back(Clock::now());  // collect orphans from before a restart right away
  }
  pass_worker_.Start([this](BackgroundWorker::Handle& worker) { PassLoop(worker); });
  removal_worker_.Start([this](BackgroundWorker::Handle& worker) { RemovalLoop(worker); });
}

void Lifecycle::Stop() {
  // Both asked before either is waited for: neither starts new work while the other finishes.
  pass_worker_.RequestStop();
  removal_worker_.RequestStop();
  pass_worker_.Stop();
  // A removal blocked in the kernel (a VM still holds the device) holds this up until it ends.
  removal_worker_.Stop();
}

void Lifecycle::Trigger(bool follow_up) {
  {
    std::lock_guard lock(mutex_);
    scheduled_.push_back(Clock::now());
    if (follow_up) follow_up_until_ = Clock::now() + options_.follow_up_for;
  }
  pass_worker_.Wake();
}

void Lifecycle::OnAllocated() {
  auto now = Clock::now();
  {
    std::lock_guard lock(mutex_);
    scheduled_.push_back(now + std::chrono::milliseconds(300));
    scheduled_.push_back(now + std::chrono::seconds(2));
    // The pass after the allocation stops counting as "moments ago".
    scheduled_.push_back(now + options_.settle + std::chrono::milliseconds(1100));
  }
  pass_worker_.Wake();
}

size_t Lifecycle::pending_removals() const {
  std::lock_guard lock(mutex_);
  return removals_.size();
}

void Lifecycle::PassLoop(BackgroundWorker::Handle& worker) {
  auto next_poll = Clock::now() + options_.poll_interval;
  auto last_pass = Clock::time_point{};
  while (!worker.stopping()) {
    auto due = next_poll;
    {
      std::lock_guard lock(mutex_);
      for (auto t : scheduled_) due = std::min(due, t);
      if (Clock::now() < follow_up_until_) {
        due = std::min(due, last_pass + options_.follow_up_interval);
      }
    }
    // Until `due`, or a wake that finds a scheduled pass already due.
    bool stopping = false;
    while (true) {
      {
        std::lock_guard lock(mutex_);
        auto now = Clock::now();
        if (std::any_of(scheduled_.begin(), scheduled_.end(), [&](auto t) { return t <= now; }) ||
            now >= due)
          break;
      }
      if (!worker.WaitUntil(due)) {
        stopping = true;
        break;
      }
    }
    if (stopping || worker.stopping()) break;
    {
      std::lock_guard lock(mutex_);
      auto now = Clock::now();
      std::erase_if(scheduled_, [&](auto t) { return t <= now; });
    }
    (void)Pass();
    last_pass = Clock::now();
    next_poll = last_pass + options_.poll_interval;
  }
}

PassPlan Lifecycle::Pass() {
  auto start = Clock::now();
  HolderFacts facts = tracker_.Collect(true);
  LifecycleSnapshot snapshot = manager_.Snapshot();
  PassPlan plan;
  {
    std::lock_guard lock(pass_mutex_);
    plan = PlanPass(snapshot, facts, free_since_, UnixNowMs(), options_);
  }
  spdlog::debug(
      "pass: {} held, {} without pod, {} to remove, {} unknown, {} foreign; kubelet {}, "
      "API {}",
      plan.held, plan.waiting, plan.remove.size(), plan.unknown, snapshot.foreign.size(),
      facts.kubelet_known ? "answering" : "silent",
      facts.api_following ? "followed" : "not followed");
  if (!plan.owners.empty()) {
    Status saved = manager_.SetOwners(plan.owners);
    if (!saved.ok()) spdlog::warn("owners not saved: {}", saved.ToString());
    for (const CreatedVgpu& r : snapshot.records) {
      auto it = plan.owners.find(r.device_id);
      if (it != plan.owners.end()) Announce(r, it->second.pod);
    }
  }
  for (const CreatedVgpu& r : plan.forget) {
    Status forgotten = manager_.ForgetVgpu(r.device_id, r.vgpu_id);
    if (!forgotten.ok())
      spdlog::debug("record kept device={}: {}", r.device_id, forgotten.message());
  }
  if (!plan.remove.empty()) {
    std::lock_guard lock(mutex_);
    for (const CreatedVgpu& r : plan.remove) {
      if (removals_.contains(r.device_id)) continue;
      spdlog::info("vgpu {} of device {} has no live pod{} for the grace period; removing",
                   r.vgpu_id, r.device_id, r.owner_pod ? " (was " + *r.owner_pod + ")" : "");
      removals_.emplace(
          r.device_id,
          Removal{r, Clock::now(), Backoff(options_.retry_initial, options_.retry_max), 0});
    }
    removal_worker_.Wake();
  }
  if (observer_ != nullptr) {
    observer_->OnSources(facts.kubelet_known, facts.api_following);
    observer_->OnPass(plan, snapshot.foreign.size(), Clock::now() - start);
  }
  return plan;
}

PassPlan Lifecycle::RunPass() {
  PassPlan plan = Pass();
  std::vector<std::string> due;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, removal] : removals_) {
      if (removal.due <= Clock::now()) due.push_back(id);
    }
  }
  for (const std::string& id : due) {
    Removal removal = [&] {
      std::lock_guard lock(mutex_);
      return removals_.at(id);
    }();
    bool done = TryRemove(removal);
    std::lock_guard lock(mutex_);
    if (done) {
      removals_.erase(id);
    } else {
      removals_.insert_or_assign(id, removal);
    }
  }
  return plan;
}

void Lifecycle::RemovalLoop(BackgroundWorker::Handle& worker) {
  std::unique_lock lock(mutex_);
  while (!worker.stopping()) {
    auto due = Clock::time_point::max();
    std::string next;
    for (const auto& [id, removal] : removals_) {
      if (removal.due < due) {
        due = removal.due;
        next = id;
      }
    }
    if (next.empty() || due > Clock::now()) {
      // Until the first removal is due (max: none is queued), or a pass queues one: the pass
      // wakes the worker after queueing, so a removal queued since the look above is not missed.
      lock.unlock();
      worker.WaitUntil(due);
      lock.lock();
      continue;
    }
    Removal removal = removals_.at(next);
    lock.unlock();
    bool done = TryRemove(removal);
    lock.lock();
    if (done) {
      removals_.erase(next);
    } else {
      removals_.insert_or_assign(next, removal);
    }
  }
}

bool Lifecycle::TryRemove(Removal& removal) {
  const CreatedVgpu& wanted = removal.record;
  // A fresh look: kubelet may have handed the ID out again since the pass decided.
  HolderFacts facts = tracker_.Collect(true);
  LifecycleSnapshot snapshot = manager_.Snapshot();
  const CreatedVgpu* record = FindRecord(snapshot, wanted);
  if (record == nullptr) return true;  // replaced or removed meanwhile
  if (snapshot.allocating.contains(wanted.device_id)) {
    spdlog::info("removal of vgpu {} called off: kubelet is allocating device {} again",
                 wanted.vgpu_id, wanted.device_id);
    std::lock_guard lock(pass_mutex_);
    free_since_.erase(FreeKey(wanted));
    return true;
  }
  Verdict verdict = Judge(*record, facts, UnixNowMs(), options_.settle);
  if (verdict.holding != Holding::kFree) {
    spdlog::info("removal of vgpu {} called off: {}", wanted.vgpu_id, verdict.why);
    std::lock_guard lock(pass_mutex_);
    free_since_.erase(FreeKey(wanted));
    return true;
  }
  ++removal.attempts;
  Status removed = manager_.RemoveVgpu(wanted.device_id, wanted.vgpu_id, Remover::kLifecycle);
  if (observer_ != nullptr) observer_->OnRemoval(wanted.resource, removed);
  std::string owner = record->owner_pod.value_or("");
  if (removed.ok()) {
    Event(owner, kube::EventType::kNormal, "VgpuRemoved",
          "vGPU " + wanted.vgpu_id + " (" + wanted.type_id + " on GPU " + wanted.physical_gpu +
              ", device " + wanted.device_id + ") removed: no live pod holds it");
    return true;
  }
  if (removed.code() == ErrorCode::kGone) return true;
  const std::chrono::milliseconds delay = removal.backoff.Next();
  removal.due = Clock::now() + delay;
  bool busy = removed.code() == ErrorCode::kBusy;
  spdlog::log(busy ? spdlog::level::info : spdlog::level::warn,
              "vgpu {} not removed (attempt {}): {}; retrying in {} ms", wanted.vgpu_id,
              removal.attempts, removed.ToString(), delay.count());
  if (removal.attempts == 1 || removal.attempts % 10 == 0) {
    Event(owner, kube::EventType::kWarning, "VgpuRemoveFailed",
          "vGPU " + wanted.vgpu_id + " (device " + wanted.device_id +
              ") not removed yet: " + removed.message() +
              (busy ? " (the VM is still letting go); retrying" : "; retrying"));
  }
  return false;
}

void Lifecycle::Announce(const CreatedVgpu& record, const std::string& owner) {
  spdlog::info("vgpu {} device={} belongs to pod {}", record.vgpu_id, record.device_id, owner);
  if (record.owner_pod) return;  // announced when first learned
  Event(owner, kube::EventType::kNormal, "VgpuCreated",
        "vGPU " + record.vgpu_id + " (" + record.type_id + ") created on GPU " +
            record.physical_gpu + " for device " + record.device_id);
}

void Lifecycle::Event(const std::string& pod_key, kube::EventType type, const std::string& reason,
                      const std::string& message) {
  if (events_ == nullptr || pod_key.empty()) return;
  size_t slash = pod_key.find('/');
  if (slash == std::string::npos) return;
  kube::PodRef pod{pod_key.substr(0, slash), pod_key.substr(slash + 1), tracker_.UidOf(pod_key)};
  Status recorded = events_->Record(pod, type, reason, message);
  if (!recorded.ok()) spdlog::debug("event {} not recorded: {}", reason, recorded.message());
}

}  // namespace kvgpu::deviceplugin
