#include "webhook/claim_lookup.h"

#include <algorithm>
#include <optional>

#include "common/background_worker.h"

namespace kvgpu::webhook {

// Cancels calls that pass their deadline. One thread for every lookup: the kube client's
// timeouts are per socket read, so a server that sends a byte now and then would hold an
// admission call for as long as it liked; only breaking the call from outside bounds it.
class ClaimLookup::Watchdog {
 public:
  Watchdog() {
    worker_.Start([this](BackgroundWorker::Handle& worker) { Run(worker); });
  }
  ~Watchdog() { worker_.Stop(); }

  uint64_t Arm(std::chrono::steady_clock::time_point deadline, Canceller* cancel) {
    std::lock_guard lock(mutex_);
    const uint64_t id = ++next_id_;
    armed_.emplace(id, Armed{deadline, cancel});
    worker_.Wake();
    return id;
  }
  // After this returns the watchdog no longer touches the Canceller.
  void Disarm(uint64_t id) {
    std::lock_guard lock(mutex_);
    armed_.erase(id);
  }

 private:
  struct Armed {
    std::chrono::steady_clock::time_point deadline;
    Canceller* cancel;
  };

  void Run(BackgroundWorker::Handle& worker) {
    while (!worker.stopping()) {
      auto next = std::chrono::steady_clock::time_point::max();
      {
        std::lock_guard lock(mutex_);
        const auto now = std::chrono::steady_clock::now();
        for (auto it = armed_.begin(); it != armed_.end();) {
          if (it->second.deadline <= now) {
            it->second.cancel->Cancel();  // under the lock: Disarm waits for it
            it = armed_.erase(it);
          } else {
            next = std::min(next, it->second.deadline);
            ++it;
          }
        }
      }
      // Arm wakes the worker after adding: a deadline armed since the look above is not missed.
      worker.WaitUntil(next);
    }
  }

  std::mutex mutex_;
  std::map<uint64_t, Armed> armed_;
  uint64_t next_id_ = 0;
  BackgroundWorker worker_;  // last: stopped before the members its body uses go
};

std::string ClaimObjectPath(std::string_view namespace_name, const PodClaimSource& source) {
  return "/apis/resource.k8s.io/v1/namespaces/" + kube::QueryEscape(namespace_name) +
         (source.template_ ? "/resourceclaimtemplates/" : "/resourceclaims/") +
         kube::QueryEscape(source.object);
}

ClaimLookup::ClaimLookup(kube::ApiTransport& api, Clock clock)
    : api_(api), clock_(std::move(clock)), watchdog_(std::make_unique<Watchdog>()) {}

ClaimLookup::~ClaimLookup() = default;

ClaimLookup::Stats ClaimLookup::stats() const {
  std::lock_guard lock(mutex_);
  Stats out = stats_;
  out.entries = cache_.size();
  out.bytes = cache_bytes_;
  return out;
}

void ClaimLookup::EvictLocked(std::map<std::string, Entry>::iterator it) {
  cache_bytes_ -= it->second.bytes;
  recency_.erase(it->second.recency);
  cache_.erase(it);
}

bool ClaimLookup::CachedLocked(const std::string& key, std::set<std::string>& ours) {
  auto it = cache_.find(key);
  if (it == cache_.end()) return false;
  if (it->second.expires <= clock_()) {
    EvictLocked(it);
    return false;
  }
  recency_.splice(recency_.begin(), recency_, it->second.recency);
  ours = it->second.ours;
  return true;
}

void ClaimLookup::StoreLocked(const std::string& key, std::set<std::string> ours,
                              const ClaimSettings& settings) {
  if (auto old = cache_.find(key); old != cache_.end()) EvictLocked(old);
  // What an entry holds: the key twice (map and list), the request names, and the nodes' and
  // strings' overhead, counted generously rather than measured.
  size_t bytes = 2 * key.size() + 192;
  for (const auto& request : ours) bytes += request.size() + 64;
  if (settings.cache_entries == 0 || settings.cache_ttl.count() == 0 ||
      bytes > settings.cache_bytes)
    return;
  // Limits may have shrunk since the last store (a reloaded config): trim to them.
  while (!cache_.empty() && (cache_.size() + 1 > settings.cache_entries ||
                             cache_bytes_ + bytes > settings.cache_bytes)) {
    EvictLocked(cache_.find(recency_.back()));
  }
  recency_.push_front(key);
  cache_bytes_ += bytes;
  cache_.emplace(key,
                 Entry{std::move(ours), clock_() + settings.cache_ttl, bytes, recency_.begin()});
}

PodClaims ClaimLookup::Resolve(std::string_view namespace_name,
                               const std::vector<PodClaimSource>& sources,
                               const ClaimSettings& settings, Stats* counts) {
  PodClaims out;
  Stats local;
  Canceller cancel;
  const auto deadline = std::chrono::steady_clock::now() + settings.lookup_timeout;
  std::optional<uint64_t> armed;
  for (const PodClaimSource& source : sources) {
    const std::string path = ClaimObjectPath(namespace_name, source);
    std::set<std::string> ours;
    {
      std::lock_guard lock(mutex_);
      if (CachedLocked(path, ours)) {
        ++stats_.hits;
        ++local.hits;
        out.ours[source.name] = std::move(ours);
        continue;
      }
      ++stats_.gets;
      ++local.gets;
    }
    if (!armed) armed = watchdog_->Arm(deadline, &cancel);
    const char* kind = source.template_ ? "ResourceClaimTemplate" : "ResourceClaim";
    auto object = api_.Get(path, &cancel);
    Result<std::set<std::string>> found = Status();
    if (!object.ok()) {
      found = object.status().code() == ErrorCode::kCancelled
                  ? Status::Error(ErrorCode::kTimeout,
                                  "no answer within resourceClaims.lookupTimeout " +
                                      std::to_string(settings.lookup_timeout.count()) + "ms")
                  : object.status();
    } else {
      found = OurRequests(*object, source.template_, settings.device_class_domain);
    }
    if (!found.ok()) {
      std::lock_guard lock(mutex_);
      ++stats_.failures;
      ++local.failures;
      out.failed[source.name] =
          std::string(kind) + " " + source.object + ": " + found.status().message().substr(0, 300);
      continue;
    }
    std::lock_guard lock(mutex_);
    StoreLocked(path, *found, settings);
    out.ours[source.name] = std::move(*found);
  }
  if (armed) watchdog_->Disarm(*armed);
  if (counts != nullptr) {
    counts->gets += local.gets;
    counts->hits += local.hits;
    counts->failures += local.failures;
  }
  return out;
}

}  // namespace kvgpu::webhook
