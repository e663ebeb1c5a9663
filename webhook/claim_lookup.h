// Looks up, through the API server, what a pod's DRA claims ask for (issue #31): the
// ResourceClaimTemplate or ResourceClaim each referenced claim names, read with the project's
// kube client (kube/api_client.h: TLS, service-account token). It runs inside an admission
// call, so every cost is bounded (docs/webhook.md, "DRA claims"):
// - time: all of one pod's lookups together within resourceClaims.lookupTimeout; a watchdog
//   breaks the request in flight at the deadline, however slowly the server trickles;
// - size: an answer of more than kMaxClaimObjectBytes is broken off (the client's bound);
// - memory: a cache of what each object asks for (not the object), at most cacheEntries and
//   cacheBytes, entries dropped after cacheTTL, least recently used first.
// Failures are reported per claim; what the pod then gets is the decision's business
// (resourceClaims.onLookupFailure, pod_mutator.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "kube/api_client.h"
#include "webhook/config.h"
#include "webhook/resource_claims.h"

namespace kvgpu::webhook {

// A ResourceClaim or template holds at most 32 requests of 8 subrequests with CEL selectors; real
// ones are a few KiB. 256 KiB keeps one lookup's answer and parse in a few MiB while every
// worker thread is in one (docs/webhook.md, "Memory").
inline constexpr size_t kMaxClaimObjectBytes = 256 * 1024;

// GET path of the object a pod's claim names (resource.k8s.io/v1, namespaced).
std::string ClaimObjectPath(std::string_view namespace_name, const PodClaimSource& source);

class ClaimLookup {
 public:
  using Clock = SteadyClock;
  // `api` outlives this; `clock` is for the cache's TTL (tests move it).
  explicit ClaimLookup(kube::ApiTransport& api, Clock clock = std::chrono::steady_clock::now);
  ~ClaimLookup();
  ClaimLookup(const ClaimLookup&) = delete;
  ClaimLookup& operator=(const ClaimLookup&) = delete;

  struct Stats;
  // Safe from any thread; blocks for at most settings.lookup_timeout (plus a connection close).
  // `counts` (optional) gets this call's gets, hits and failures added.
  PodClaims Resolve(std::string_view namespace_name, const std::vector<PodClaimSource>& sources,
                    const ClaimSettings& settings, Stats* counts = nullptr);

  struct Stats {
    uint64_t gets = 0;      // requests sent to the API server
    uint64_t hits = 0;      // answered from the cache
    uint64_t failures = 0;  // lookups that failed (error, timeout, garbage, too large)
    size_t entries = 0;
    size_t bytes = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::set<std::string> ours;
    std::chrono::steady_clock::time_point expires;
    size_t bytes = 0;
    std::list<std::string>::iterator recency;
  };
  class Watchdog;

  bool CachedLocked(const std::string& key, std::set<std::string>& ours);
  void StoreLocked(const std::string& key, std::set<std::string> ours,
                   const ClaimSettings& settings);
  void EvictLocked(std::map<std::string, Entry>::iterator it);

  kube::ApiTransport& api_;
  Clock clock_;
  std::unique_ptr<Watchdog> watchdog_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> cache_;  // by object path
  std::list<std::string> recency_;      // most recently used first
  size_t cache_bytes_ = 0;
  Stats stats_;
};

}  // namespace kvgpu::webhook
