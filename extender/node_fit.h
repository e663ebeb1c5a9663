// Whether a pod's vGPUs fit on one node, and how well: the node's published GPUs, minus what the
// pods bound there but not yet given their vGPUs will take, then the pod - each placed by the
// rule the node's plugin follows (scheduling::PlaceDemand). Pure: the caller passes the clock.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "extender/watched_node.h"
#include "scheduling/gpu_fit.h"

namespace kvgpu::extender {

struct FitOptions {
  // How the extender scores nodes: pack fills nodes (and GPUs) a type already holds, keeping
  // free GPUs and nodes for other types; spread prefers nodes with the most free GPUs left.
  scheduling::Policy policy = scheduling::Policy::kPack;
  // A state older than this is not trusted: its plugin is down or cannot reach the API server.
  // It must exceed the plugins' heartbeat (schedulerState.heartbeat, 2 minutes by default).
  std::chrono::milliseconds max_state_age{std::chrono::minutes(10)};
};

struct NodeVerdict {
  enum class Kind {
    kFits,
    kFull,          // not now: the GPUs that could serve it are taken (preemption may help)
    kUnresolvable,  // no usable state, or no GPU here offers what the pod asks for
  };
  Kind kind = Kind::kFits;
  std::string reason;  // why it does not fit, for FailedNodes
  int64_t score = 0;   // 0..10 when it fits
};

// What judging a pod whose one container asks for one resource needs of a node's GPUs: per
// resource the node lists, its candidates in PlaceDemand's order (scheduling::RankCandidates) and
// what the score and the reasons read. Built when a state is parsed (and once per set of pods
// waiting there), so such a pod - nearly every vGPU pod - is judged per node by
// scheduling::FreeGpusTakenFrom over a few GPUs, with nothing ranked, copied or placed; the
// verdict is the one the full placement reaches (node_fit_fast_test.cpp checks it).
// Resource names as small numbers, one table for the process: a summary finds the resource a pod
// asks for by number (a pod's resource is looked up once per request), not by hashing and
// comparing its name at every node. `add`: give a name not yet numbered the next number. The
// table holds at most kResourceNumbers names (a node could publish any); a name beyond them
// stays kNoResourceNumber and is found by name.
inline constexpr uint32_t kNoResourceNumber = UINT32_MAX;
inline constexpr size_t kResourceNumbers = 1 << 16;
uint32_t ResourceNumber(const std::string& name, bool add);

// The one resource a pod of one container asking for one resource asks for (nearly every vGPU
// pod), and what finding it in a summary needs, worked out once per request.
struct UsualPod {
  std::string resource;
  uint32_t count = 0;
  size_t hash = 0;
  uint32_t number = kNoResourceNumber;  // ResourceNumber(resource, false)
};
// nullopt for any other pod.
std::optional<UsualPod> Usual(const std::vector<scheduling::Demand>& pod_demand);

struct FitSummary {
  struct Resource {
    size_t hash = 0;  // of name: most entries are passed over on it
    std::string name;
    uint32_t number = kNoResourceNumber;  // ResourceNumber(name, true)
    std::vector<scheduling::Candidate> ranked;
    uint32_t creatable = 0;  // what its candidates can still make, for the reason
    bool offered = false;    // a GPU of the published state serves it (else unresolvable)
  };
  std::vector<Resource> resources;  // by name
  std::vector<uint32_t> numbers;    // each resource's number, side by side: one cache line to scan
  size_t gpus = 0;
  size_t free_gpus = 0;  // scheduling::FreeGpus
};
// `gpus`: the state's GPUs once the pods waiting on the node took theirs (or state.gpus).
FitSummary Summarize(const scheduling::NodeVgpuState& state,
                     const std::vector<scheduling::GpuSlots>& gpus);

// The verdicts reached on one published state, by what else they depend on: the pods waiting
// on the node (bound, their vGPUs not made yet), the pod's demand and the policy. kube-scheduler
// asks prioritize about the nodes filter just judged for the same pod, and pods of a few shapes
// ask about nodes whose states change only when a pod lands there. A memo belongs to one parsed
// state (ClusterView keeps them together), so a node publishing a new state is judged afresh.
// Thread-safe: requests are served on several threads.
class FitMemo {
 public:
  FitMemo() = default;
  // Summarizes `state` as published, for pods judged while none wait on the node.
  explicit FitMemo(const Result<scheduling::NodeVgpuState>& state);

  // The summary of `state` as published; nullptr when not made at construction.
  const FitSummary* Published() const { return published_.get(); }
  // The summary of `state`'s GPUs once `waiting` took theirs: made on the first pod judged beside
  // those pods, then kept (a few sets of waiting pods per state, the oldest replaced).
  std::shared_ptr<const FitSummary> Summary(const scheduling::NodeVgpuState& state,
                                            const std::vector<const BoundPod*>& waiting);

  std::optional<NodeVerdict> Find(const std::vector<const BoundPod*>& waiting,
                                  const std::vector<scheduling::Demand>& pod_demand,
                                  scheduling::Policy policy) const;
  void Put(const std::vector<const BoundPod*>& waiting,
           const std::vector<scheduling::Demand>& pod_demand, scheduling::Policy policy,
           const NodeVerdict& verdict);

 private:
  struct Entry {
    std::vector<std::vector<scheduling::Demand>> waiting;  // their demands, in bind order
    std::vector<scheduling::Demand> pod_demand;
    scheduling::Policy policy;
    NodeVerdict verdict;
  };
  // Pod shapes remembered per state, the oldest replaced. Enough for a pod of each type a GPU
  // model offers (a T4 has 17, an H200 a few more): with fewer, a mix of types evicts every
  // verdict before it is asked for again (8 made a 12-type burst judge most nodes afresh).
  static constexpr size_t kEntries = 24;
  // Never changed after construction: read without the lock.
  std::shared_ptr<const FitSummary> published_;
  struct Waited {
    std::vector<std::vector<scheduling::Demand>> waiting;  // their demands, in bind order
    std::shared_ptr<const FitSummary> summary;
  };
  static constexpr size_t kWaited = 4;
  std::vector<Waited> waited_;
  size_t next_waited_ = 0;
  mutable std::mutex mutex_;
  // Hashes of the entries' demand and policy, side by side: most entries are passed over on
  // these alone, without following the entries' pointers.
  std::array<size_t, kEntries> shapes_{};
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

// `state`: the node's published state, parsed; nullptr when it published none. `memo`: the
// verdicts reached on that state (ClusterView::StateAndMemo), nullptr to judge afresh.
NodeVerdict JudgeNode(const Result<scheduling::NodeVgpuState>* state,
                      const std::vector<BoundPod>& bound, const std::string& pod_uid,
                      const std::vector<scheduling::Demand>& pod_demand, int64_t now_unix_ms,
                      const FitOptions& options, FitMemo* memo = nullptr,
                      const UsualPod* usual = nullptr);
// The same for a node of the view's table (ClusterView::Watch): the usual pod - one container
// asking for one resource - on a node where no pod is bound is read from what the table keeps of
// the state (its time, its policy, its summary) without reading the state; any other node or pod
// is judged by the overload above, which reaches the same verdict on that path.
// `usual`: Usual(pod_demand), worked out once for every node of the request.
NodeVerdict JudgeNode(const WatchedNode& node, const std::string& pod_uid,
                      const std::vector<scheduling::Demand>& pod_demand, const UsualPod* usual,
                      int64_t now_unix_ms, const FitOptions& options);
// The same from the annotation's text.
NodeVerdict JudgeNode(const std::optional<std::string>& state_annotation,
                      const std::vector<BoundPod>& bound, const std::string& pod_uid,
                      const std::vector<scheduling::Demand>& pod_demand, int64_t now_unix_ms,
                      const FitOptions& options);

}  // namespace kvgpu::extender
