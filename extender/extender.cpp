#include "extender/extender.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "common/log_safe.h"
#include "extender/preemption.h"

namespace kvgpu::extender {

using nlohmann::json;

Extender::Extender(ClusterView& view, ExtenderOptions options, kube::ApiTransport* api, Clock now)
    : view_(view),
      options_(std::move(options)),
      api_(api),
      now_(now ? std::move(now) : Clock([&view] { return view.NowUnixMs(); })) {}

Result<Extender::Judged> Extender::Judge(const ExtenderArgs& args) {
  Result<std::vector<scheduling::Demand>> demand = PodDemand(args.pod, options_.resource_prefix);
  if (!demand.ok()) return demand.status();
  Judged judged;
  if (demand->empty()) {  // no vGPU asked for: not ours to judge
    judged.verdicts.resize(args.nodes.size());
    return judged;
  }
  judged.verdicts.reserve(args.nodes.size());
  const int64_t now = now_();
  const std::optional<UsualPod> usual = Usual(*demand);
  // With names only, the watched states and bound pods, read from the view's node table.
  if (args.names_only) {
    const ClusterView::Watched watched = view_.Watch(args.nodes, now);
    for (const WatchedNode& node : watched.nodes()) {
      judged.verdicts.push_back(
          JudgeNode(node, args.pod.uid, *demand, usual ? &*usual : nullptr, now, options_.fit));
    }
    return judged;
  }
  // A Node sent whole is the scheduler's own view, at least as new as the watch's.
  const std::shared_ptr<const ClusterView::BoundByNode> bound = view_.BoundPodsByNode(now);
  std::vector<NodeState> states;
  states.reserve(args.nodes.size());
  for (const CandidateNode& node : args.nodes) {
    states.push_back(node.state_annotation ? view_.StateAndMemo(node.name, node.state_annotation)
                                           : NodeState{});
  }
  const std::vector<BoundPod> none;
  for (size_t i = 0; i < args.nodes.size(); ++i) {
    const auto here = bound->empty() ? bound->end() : bound->find(args.nodes[i].name);
    judged.verdicts.push_back(
        JudgeNode(states[i].state.get(), here != bound->end() ? here->second : none, args.pod.uid,
                  *demand, now, options_.fit, states[i].memo.get(), usual ? &*usual : nullptr));
  }
  return judged;
}

std::string Extender::FilterText(const json& body) {
  return FilterAnswer(ParseExtenderArgs(body));
}

std::string Extender::FilterAnswer(Result<ExtenderArgs> args) {
  if (!args.ok()) return FilterError(args.status().message()).dump();
  Result<Judged> judged = Judge(*args);
  if (!judged.ok()) return FilterError(judged.status().message()).dump();
  std::vector<std::string_view> kept;
  kept.reserve(args->nodes.size());
  std::map<std::string, std::string> failed;
  std::map<std::string, std::string> unresolvable;
  for (size_t i = 0; i < args->nodes.size(); ++i) {
    const std::string& name = args->nodes[i].name;
    const NodeVerdict& verdict = judged->verdicts[i];
    switch (verdict.kind) {
      case NodeVerdict::Kind::kFits:
        kept.push_back(name);
        break;
      case NodeVerdict::Kind::kFull:
        failed[name] = "kata-vgpu: " + verdict.reason;
        break;
      case NodeVerdict::Kind::kUnresolvable:
        unresolvable[name] = "kata-vgpu: " + verdict.reason;
        break;
    }
  }
  spdlog::debug("filter pod={} nodes={} kept={}", LogSafe(args->pod.Key()), args->nodes.size(),
                kept.size());
  return FilterResultText(*args, kept, failed, unresolvable);
}

json Extender::Filter(const json& body) {
  return json::parse(FilterText(body));
}

std::string Extender::PrioritizeText(const json& body) {
  return PrioritizeAnswer(ParseExtenderArgs(body));
}

std::string Extender::PrioritizeAnswer(Result<ExtenderArgs> args) {
  // A HostPriorityList has no error field: bad arguments score every node it names 0.
  if (!args.ok()) return PriorityListText({});
  Result<Judged> judged = Judge(*args);
  std::vector<std::pair<std::string_view, int64_t>> scores;
  scores.reserve(args->nodes.size());
  for (size_t i = 0; i < args->nodes.size(); ++i) {
    scores.emplace_back(args->nodes[i].name, judged.ok() ? judged->verdicts[i].score : 0);
  }
  return PriorityListText(scores);
}

json Extender::Prioritize(const json& body) {
  return json::parse(PrioritizeText(body));
}

Result<BindTarget> Extender::BindablePod(const BindingArgs& args) {
  Result<json> object = api_->Get("/api/v1/namespaces/" + kube::QueryEscape(args.pod_namespace) +
                                  "/pods/" + kube::QueryEscape(args.pod_name));
  if (!object.ok()) return object.status();
  Result<kube::PodInfo> pod = kube::ParsePod(*object);
  if (!pod.ok()) return pod.status();
  auto refuse = [&](const std::string& why) {
    return Status::Error(ErrorCode::kInvalid,
                         "kata-vgpu extender: will not bind pod " + pod->Key() + ": " + why);
  };
  if (pod->uid != args.pod_uid) return refuse("its UID is " + pod->uid + ", not " + args.pod_uid);
  if (!pod->node_name.empty()) return refuse("it is bound to " + pod->node_name + " already");
  if (pod->deleting || pod->Finished()) return refuse("it is ending");
  Result<std::vector<scheduling::Demand>> demand = PodDemand(*pod, options_.resource_prefix);
  if (!demand.ok()) return demand.status();
  if (demand->empty()) return refuse("it asks for no vGPU (this extender binds vGPU pods only)");
  return BindTarget{std::move(*pod), std::move(*demand)};
}

// One try at recording the bind in the node's ledger: judged against the Node as the API server
// has it now, written only if nobody changed the Node since (409 Conflict otherwise).
Status Extender::RecordBind(const std::string& node, const BindTarget& target) {
  const std::string path = "/api/v1/nodes/" + kube::QueryEscape(node);
  Result<json> object = api_->Get(path);
  if (!object.ok()) return object.status();
  const json& metadata = object->contains("metadata") ? (*object)["metadata"] : json::object();
  const std::string version = metadata.value("resourceVersion", "");
  const json annotations = metadata.value("annotations", json::object());
  std::shared_ptr<const Result<scheduling::NodeVgpuState>> state;
  if (auto it = annotations.find(scheduling::kNodeStateAnnotation);
      it != annotations.end() && it->is_string()) {
    state = view_.State(node, it->get<std::string>());
  }
  std::vector<LedgerEntry> entries;
  if (auto it = annotations.find(kBindLedgerAnnotation);
      it != annotations.end() && it->is_string()) {
    Result<std::vector<LedgerEntry>> parsed = ParseBindLedger(it->get<std::string>());
    // Another version's ledger: binding beside binds this one cannot count could over-commit.
    if (!parsed.ok()) return parsed.status();
    entries = std::move(*parsed);
  }
  const int64_t now = now_();
  entries = LiveEntries(entries, state && state->ok() ? &state->value() : nullptr, now,
                        view_.assume_for());
  std::erase_if(entries, [&](const LedgerEntry& e) { return e.uid == target.pod.uid; });
  const NodeVerdict verdict =
      JudgeNode(state.get(), view_.WithLedger(view_.BoundPods(node, now), entries), target.pod.uid,
                target.demand, now, options_.fit);
  if (verdict.kind != NodeVerdict::Kind::kFits) {
    return Status::Error(ErrorCode::kNoRoom, "kata-vgpu extender: node " + node +
                                                 " cannot take pod " + target.pod.Key() +
                                                 " now: " + verdict.reason);
  }
  entries.push_back({target.pod.uid, target.pod.Key(), now, target.demand});
  const json patch = {{"metadata",
                       {{"resourceVersion", version},
                        {"annotations", {{kBindLedgerAnnotation, RenderBindLedger(entries)}}}}}};
  Result<json> patched = api_->Patch(path, patch, "application/merge-patch+json");
  return patched.ok() ? Status::Ok() : patched.status();
}

json Extender::Bind(const json& body) {
  Result<BindingArgs> args = ParseBindingArgs(body);
  if (!args.ok()) return BindingResult(args.status().message());
  if (api_ == nullptr) return BindingResult("kata-vgpu extender: binding is not configured");
  Result<BindTarget> target = BindablePod(*args);
  if (!target.ok()) return BindingResult(target.status().message());
  Status recorded = Status::Ok();
  for (int attempt = 0; attempt < options_.bind_attempts; ++attempt) {
    recorded = RecordBind(args->node, *target);
    if (recorded.http_status() != 409) break;  // 409: the Node changed under us; judge again
  }
  if (!recorded.ok()) {
    spdlog::info("bind {} to {} refused: {}", LogSafe(target->pod.Key()), LogSafe(args->node),
                 recorded.message());
    return BindingResult(recorded.message());
  }
  const json binding = {
      {"apiVersion", "v1"},
      {"kind", "Binding"},
      {"metadata",
       {{"name", args->pod_name}, {"namespace", args->pod_namespace}, {"uid", args->pod_uid}}},
      {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", args->node}}}};
  // A failed binding leaves its ledger entry to expire: the node holds the room a little longer,
  // which delays a pod but never over-commits a GPU.
  Result<json> bound = api_->Post("/api/v1/namespaces/" + kube::QueryEscape(args->pod_namespace) +
                                      "/pods/" + kube::QueryEscape(args->pod_name) + "/binding",
                                  binding);
  if (!bound.ok()) {
    // Logged here too: kube-scheduler only shows it in its own log and the pod's events, and a
    // Binding the API server refuses every time (our RBAC without pods/binding) binds nothing.
    spdlog::warn("bind {} to {} failed: {}", LogSafe(target->pod.Key()), LogSafe(args->node),
                 bound.status().message());
    return BindingResult(bound.status().message());
  }
  view_.Assume(target->pod, args->node);
  return BindingResult("");
}

std::string Extender::BindText(const json& body) {
  return Bind(body).dump();
}

namespace {

// The victims as the view knows them on `node`: the pods it counts there, by UID, else a pod sent
// whole with its own demand. A UID it does not know frees nothing it could count.
std::vector<BoundPod> VictimsOn(const std::string& node, const NodeVictims& victims,
                                const std::vector<BoundPod>& bound, const std::string& prefix) {
  std::vector<BoundPod> out;
  for (const Victim& victim : victims.pods) {
    const std::string uid = PeerName(victim.uid);
    auto known = std::find_if(bound.begin(), bound.end(),
                              [&](const BoundPod& pod) { return pod.uid == uid; });
    if (known != bound.end()) {
      out.push_back(*known);
    } else if (victim.pod) {
      Result<std::vector<scheduling::Demand>> demand = PodDemand(*victim.pod, prefix);
      if (!demand.ok()) continue;
      BoundPod pod;
      pod.uid = uid;
      pod.key = victim.pod->Key();
      pod.node = node;
      pod.demand = std::move(*demand);
      out.push_back(std::move(pod));
    }
  }
  return out;
}

}  // namespace

Result<json> Extender::Preempt(const json& body) {
  Result<PreemptionArgs> args = ParsePreemptionArgs(body);
  if (!args.ok()) return args.status();
  Result<std::vector<scheduling::Demand>> demand = PodDemand(args->pod, options_.resource_prefix);
  if (!demand.ok()) return demand.status();
  if (demand->empty()) return PreemptionResult(args->nodes);  // not ours to judge
  const int64_t now = now_();
  const std::shared_ptr<const ClusterView::BoundByNode> bound = view_.BoundPodsByNode(now);
  const std::vector<BoundPod> none;
  auto bound_on = [&](const std::string& node) -> const std::vector<BoundPod>& {
    const auto here = bound->find(node);
    return here != bound->end() ? here->second : none;
  };
  std::map<std::string, NodeVictims> kept;
  if (const std::string& nominated = args->pod.nominated_node; !nominated.empty()) {
    // kube-scheduler preempted for this pod on `nominated` before, and tries again once no
    // victim there is terminating: their pod objects are gone, but the plugin removes their
    // vGPUs only after its grace period, so the filter still finds that node full. New victims
    // elsewhere would be a second preemption for one pod; with no candidate, kube-scheduler
    // keeps the nomination and retries when the Node's state changes.
    const auto state = view_.State(nominated);
    if (state && state->ok()) {
      const std::vector<BoundPod>& on_node = bound_on(nominated);
      const std::vector<BoundPod> gone = view_.GoneHolders(nominated, state->value().holders);
      if (!gone.empty() &&
          JudgeNode(state.get(), on_node, args->pod.uid, *demand, now, options_.fit).kind ==
              NodeVerdict::Kind::kFull &&
          JudgePreemption(state.get(), on_node, gone, args->pod.uid, *demand, now, options_.fit)
                  .kind == NodeVerdict::Kind::kFits) {
        spdlog::info(
            "preempt pod={}: no new victims, its nominated node {} has room once the vGPUs of {} "
            "gone pod(s) are removed",
            LogSafe(args->pod.Key()), LogSafe(nominated), gone.size());
        return PreemptionResult(kept);
      }
    }
  }
  for (const auto& [node, victims] : args->nodes) {
    // kube-scheduler fails the whole preemption on a node answered without victims.
    if (victims.pods.empty()) continue;
    const std::vector<BoundPod>& on_node = bound_on(node);
    const auto state = view_.State(node);
    const NodeVerdict verdict = JudgePreemption(
        state.get(), on_node, VictimsOn(node, victims, on_node, options_.resource_prefix),
        args->pod.uid, *demand, now, options_.fit);
    if (verdict.kind == NodeVerdict::Kind::kFits) {
      kept.emplace(node, victims);
    } else {
      spdlog::debug("preempt pod={} drops node {}: {}", LogSafe(args->pod.Key()), LogSafe(node),
                    verdict.reason);
    }
  }
  spdlog::debug("preempt pod={} nodes={} kept={}", LogSafe(args->pod.Key()), args->nodes.size(),
                kept.size());
  return PreemptionResult(kept);
}

https::HttpResponse Extender::Handle(const https::HttpRequest& request) {
  auto text = [](int status, std::string body) {
    return https::HttpResponse{status, "text/plain; charset=utf-8", std::move(body)};
  };
  if (request.method == "GET" && request.path == "/healthz") return text(200, "ok");
  if (request.method == "GET" && request.path == "/readyz") {
    return view_.Following() ? text(200, "ok")
                             : text(503, "not following the API server's nodes and pods yet");
  }
  if (request.path == "/preempt") {
    if (request.method != "POST") return text(405, "POST only");
    json body = json::parse(request.body, nullptr, false);
    if (body.is_discarded()) return text(400, "the body is not JSON");
    // ExtenderPreemptionResult has no error field: kube-scheduler takes a status other than 200
    // as the extender's error.
    Result<json> result = Preempt(body);
    if (!result.ok()) return text(400, result.status().message());
    return {200, "application/json", result->dump()};
  }
  // filter and prioritize carry every candidate node's name: read without a document of them.
  using ArgsVerb = std::string (Extender::*)(Result<ExtenderArgs>);
  ArgsVerb args_verb = nullptr;
  if (request.path == "/filter") args_verb = &Extender::FilterAnswer;
  if (request.path == "/prioritize") args_verb = &Extender::PrioritizeAnswer;
  if (args_verb == nullptr && request.path != "/bind") return text(404, "not found");
  if (request.method != "POST") return text(405, "POST only");
  if (args_verb != nullptr) {
    Result<ExtenderArgs> args = ParseExtenderArgsText(request.body);
    if (!args.ok() && args.status().code() == ErrorCode::kDecode) {
      return text(400, "the body is not JSON");
    }
    return {200, "application/json", (this->*args_verb)(std::move(args))};
  }
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded()) return text(400, "the body is not JSON");
  return {200, "application/json", BindText(body)};
}

}  // namespace kvgpu::extender
