#include "deviceplugin/dra/occupancy_confirmer.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "kube/json_fields.h"

namespace kvgpu::deviceplugin::dra {

namespace {

using kube::StringField;
using nlohmann::json;

std::string StatusPath(const std::string& ns, const std::string& name) {
  return "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name + "/status";
}

// A metav1.Condition (type, status, reason, message, lastTransitionTime are required).
json Condition(Verdict verdict, const std::string& message) {
  const bool confirmed = verdict == Verdict::kConfirmed;
  return {{"type", confirmed ? kOccupancyConfirmed : kOccupancyConflict},
          {"status", "True"},
          {"reason", confirmed ? "GpuCompatible" : "GpuOccupied"},
          {"message", message},
          {"lastTransitionTime", kube::Rfc3339(std::chrono::system_clock::now())}};
}

// status.devices with `verdict` written into this driver's and pool's entries; every other entry
// as it was.
json DevicesWith(const json& claim, const ClaimVerdict& verdict, const std::string& driver,
                 const std::string& pool) {
  json devices = json::array();
  const auto& status = claim.contains("status") ? claim["status"] : json::object();
  if (status.contains("devices") && status["devices"].is_array()) devices = status["devices"];
  for (const auto& [device, decided] : verdict.devices) {
    const std::string message = decided == Verdict::kConfirmed
                                    ? "the GPU takes this vGPU beside what it holds"
                                    : verdict.reason;
    const json condition = Condition(decided, message);
    auto entry = std::find_if(devices.begin(), devices.end(), [&](const json& e) {
      return StringField(e, "driver") == driver && StringField(e, "pool") == pool &&
             StringField(e, "device") == device && !e.contains("shareID");
    });
    if (entry == devices.end()) {
      devices.push_back({{"driver", driver},
                         {"pool", pool},
                         {"device", device},
                         {"conditions", json::array({condition})}});
      continue;
    }
    json conditions = entry->contains("conditions") && (*entry)["conditions"].is_array()
                          ? (*entry)["conditions"]
                          : json::array();
    auto same = std::find_if(conditions.begin(), conditions.end(), [&](const json& c) {
      return StringField(c, "type") == condition["type"].get<std::string>();
    });
    if (same != conditions.end()) {
      *same = condition;
    } else {
      conditions.push_back(condition);
    }
    (*entry)["conditions"] = conditions;
  }
  return devices;
}

}  // namespace

OccupancyConfirmer::OccupancyConfirmer(kube::ApiTransport& api, ViewSource source,
                                       OccupancyConfirmerOptions options, HeldListener on_held)
    : api_(api),
      source_(std::move(source)),
      options_(std::move(options)),
      on_held_(std::move(on_held)),
      watcher_(api, [this] {
        kube::ListWatchOptions watch = options_.watch;
        watch.path = kCollection;
        watch.what = "ResourceClaims";
        return watch;
      }()) {}

OccupancyConfirmer::~OccupancyConfirmer() {
  Stop();
}

void OccupancyConfirmer::Start() {
  Stop();
  {
    std::lock_guard lock(mutex_);
    triggered_ = true;
  }
  cancel_.Reset();
  watcher_.Start({[this](const std::vector<json>& claims) { OnSynced(claims); },
                  [this](kube::WatchEventType type, const json& claim) { OnEvent(type, claim); },
                  nullptr});
  worker_.Start([this](BackgroundWorker::Handle& worker) { Loop(worker); });
}

void OccupancyConfirmer::Stop() {
  watcher_.Stop();
  worker_.RequestStop();
  cancel_.Cancel();
  worker_.Stop();
}

void OccupancyConfirmer::Trigger() {
  {
    std::lock_guard lock(mutex_);
    triggered_ = true;
  }
  worker_.Wake();
}

std::vector<std::string> OccupancyConfirmer::Held() const {
  std::lock_guard lock(mutex_);
  return held_;
}

std::string OccupancyConfirmer::AllocationKey(const AllocatedClaim& claim) {
  std::string key = claim.allocation_timestamp;
  for (const ClaimDevice& device : claim.devices) key += "|" + device.device;
  return key;
}

void OccupancyConfirmer::TakeLocked(const json& object) {
  const std::string uid = StringField(object.value("metadata", json::object()), "uid");
  if (uid.empty()) return;
  std::optional<AllocatedClaim> claim = ReadAllocatedClaim(object, options_.driver, options_.pool);
  // Names go into a request path: only what the API server itself allows.
  if (claim && (!IsDnsLabel(claim->namespace_) || !IsDnsSubdomain(claim->name))) claim.reset();
  if (!claim) {
    claims_.erase(uid);
    return;
  }
  if (!claims_.contains(uid) && claims_.size() >= options_.max_claims) {
    if (!warned_full_) {
      spdlog::warn("dra: more than {} claims allocated from pool {}; ignoring the rest",
                   options_.max_claims, options_.pool);
      warned_full_ = true;
    }
    return;
  }
  claims_[uid] = {object, std::move(*claim)};
}

void OccupancyConfirmer::OnSynced(const std::vector<json>& claims) {
  {
    std::lock_guard lock(mutex_);
    claims_.clear();
    for (const json& object : claims) TakeLocked(object);
    triggered_ = true;
  }
  worker_.Wake();
}

void OccupancyConfirmer::OnEvent(kube::WatchEventType type, const json& claim) {
  {
    std::lock_guard lock(mutex_);
    if (type == kube::WatchEventType::kDeleted) {
      claims_.erase(StringField(claim.value("metadata", json::object()), "uid"));
    } else {
      TakeLocked(claim);
    }
    triggered_ = true;
  }
  worker_.Wake();
}

Result<bool> OccupancyConfirmer::Write(const ClaimVerdict& verdict) {
  json object;
  {
    std::lock_guard lock(mutex_);
    const auto it = claims_.find(verdict.uid);
    if (it == claims_.end()) return false;
    object = it->second.object;
  }
  const json& meta = object["metadata"];
  const std::string ns = StringField(meta, "namespace");
  const std::string name = StringField(meta, "name");
  const json patch = {
      {"metadata",
       {{"uid", verdict.uid}, {"resourceVersion", StringField(meta, "resourceVersion")}}},
      {"status", {{"devices", DevicesWith(object, verdict, options_.driver, options_.pool)}}}};
  auto written = api_.Patch(StatusPath(ns, name), patch, "application/merge-patch+json", &cancel_);
  if (!written.ok()) {
    if (written.status().http_status() != 409 && written.status().http_status() != 404) {
      return written.status();
    }
    // Moved on (or gone): read it again; the next decision takes what it is now.
    auto fresh =
        api_.Get("/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name, &cancel_);
    std::lock_guard lock(mutex_);
    if (fresh.ok()) {
      TakeLocked(fresh.value());
    } else if (fresh.status().http_status() == 404) {
      claims_.erase(verdict.uid);
    }
    return false;
  }
  std::lock_guard lock(mutex_);
  const auto it = claims_.find(verdict.uid);
  if (it != claims_.end()) {
    remembered_[verdict.uid] = {AllocationKey(it->second.claim), verdict.devices};
  }
  TakeLocked(written.value());
  for (const auto& [device, decided] : verdict.devices) {
    spdlog::info("dra: claim {}/{} device {} of pool {}: {} ({})", ns, name, device, options_.pool,
                 VerdictName(decided),
                 decided == Verdict::kConfirmed ? "compatible" : verdict.reason);
    if (options_.on_verdict) options_.on_verdict(decided);
  }
  return true;
}

Result<int> OccupancyConfirmer::Pass() {
  std::lock_guard pass(pass_mutex_);
  Result<OccupancyView> view = source_();
  if (!view.ok()) return view.status();
  int written = 0;
  Status failure;
  for (int attempt = 0; attempt < std::max(1, options_.attempts); ++attempt) {
    std::vector<AllocatedClaim> claims;
    std::map<std::string, std::map<std::string, Verdict>> decided;
    {
      std::lock_guard lock(mutex_);
      // What was written stays remembered while the claim is the one it was written for.
      for (auto it = remembered_.begin(); it != remembered_.end();) {
        const auto claim = claims_.find(it->first);
        const bool same =
            claim != claims_.end() && AllocationKey(claim->second.claim) == it->second.allocation;
        it = same ? std::next(it) : remembered_.erase(it);
      }
      for (const auto& [uid, known] : claims_) claims.push_back(known.claim);
      for (const auto& [uid, remembered] : remembered_) decided[uid] = remembered.devices;
    }
    const OccupancyDecision decision = Decide(*view, claims, decided);
    bool held_changed = false;
    {
      std::lock_guard lock(mutex_);
      held_changed = held_ != decision.held;
      held_ = decision.held;
    }
    if (held_changed && on_held_) on_held_();
    bool conflicts = false;
    for (const ClaimVerdict& verdict : decision.verdicts) {
      Result<bool> done = Write(verdict);
      if (!done.ok()) {
        spdlog::warn("dra: writing the occupancy verdict of claim {}: {}", verdict.uid,
                     done.status().ToString());
        failure = done.status();
        continue;
      }
      if (*done) {
        ++written;
      } else {
        conflicts = true;
      }
    }
    if (!conflicts) break;
  }
  if (!failure.ok()) return failure;
  return written;
}

void OccupancyConfirmer::Loop(BackgroundWorker::Handle& worker) {
  using Clock = BackgroundWorker::Clock;
  std::chrono::milliseconds backoff{0};
  while (!worker.stopping()) {
    // A trigger, or the resync. Every trigger wakes the worker after raising the flag.
    const auto resync = Clock::now() + options_.resync;
    while (true) {
      {
        std::lock_guard lock(mutex_);
        if (triggered_) break;
      }
      if (Clock::now() >= resync || !worker.WaitUntil(resync)) break;
    }
    if (worker.stopping()) break;
    {
      std::lock_guard lock(mutex_);
      triggered_ = false;
    }
    Result<int> done = Pass();
    if (done.ok()) {
      backoff = std::chrono::milliseconds(0);
      continue;
    }
    // Tried again after a wait that doubles up to the resync: a refusing server (RBAC, an
    // invalid write) is not hammered, a passing failure is retried soon.
    backoff = std::min(options_.resync, std::max(std::chrono::milliseconds(500), backoff * 2));
    worker.SleepFor(backoff);
    std::lock_guard lock(mutex_);
    triggered_ = true;
  }
}

}  // namespace kvgpu::deviceplugin::dra
