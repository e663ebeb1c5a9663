#include "extender/extender.h"

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/log_safe.h"

namespace kvgpu::extender {

using nlohmann::json;

Extender::Extender(ClusterView& view, ExtenderOptions options, kube::ApiTransport* api, Clock now)
    : view_(view),
      options_(std::move(options)),
      api_(api),
      now_(now ? std::move(now) : Clock([] { return UnixNowMs(); })) {}

void Extender::Remember(const kube::PodInfo& pod) {
  std::lock_guard lock(mutex_);
  if (seen_.insert_or_assign(pod.uid, pod).second) seen_order_.push_back(pod.uid);
  while (seen_order_.size() > options_.remembered_pods) {
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
}

Result<Extender::Judged> Extender::Judge(const ExtenderArgs& args) {
  Result<std::vector<scheduling::Demand>> demand = PodDemand(args.pod, options_.resource_prefix);
  if (!demand.ok()) return demand.status();
  Remember(args.pod);
  Judged judged;
  const int64_t now = now_();
  const std::map<std::string, std::vector<BoundPod>> bound = view_.BoundPodsByNode();
  const std::vector<BoundPod> none;
  for (const CandidateNode& node : args.nodes) {
    if (demand->empty()) {  // no vGPU asked for: not ours to judge
      judged.verdicts.emplace_back(node.name, NodeVerdict{});
      continue;
    }
    // A Node sent whole is the scheduler's own view, at least as new as the watch's.
    auto state = args.names_only         ? view_.State(node.name)
                 : node.state_annotation ? view_.State(node.name, node.state_annotation)
                                         : nullptr;
    judged.verdicts.emplace_back(
        node.name, JudgeNode(state.get(), bound.contains(node.name) ? bound.at(node.name) : none,
                             args.pod.uid, *demand, now, options_.fit));
  }
  return judged;
}

json Extender::Filter(const json& body) {
  Result<ExtenderArgs> args = ParseExtenderArgs(body);
  if (!args.ok()) return FilterError(args.status().message());
  Result<Judged> judged = Judge(*args);
  if (!judged.ok()) return FilterError(judged.status().message());
  std::vector<std::string> kept;
  std::map<std::string, std::string> failed;
  std::map<std::string, std::string> unresolvable;
  for (const auto& [name, verdict] : judged->verdicts) {
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
  return FilterResult(*args, kept, failed, unresolvable);
}

json Extender::Prioritize(const json& body) {
  Result<ExtenderArgs> args = ParseExtenderArgs(body);
  // A HostPriorityList has no error field: bad arguments score every node it names 0.
  if (!args.ok()) return PriorityList({});
  Result<Judged> judged = Judge(*args);
  std::vector<std::pair<std::string, int64_t>> scores;
  for (const CandidateNode& node : args->nodes) scores.emplace_back(node.name, 0);
  if (judged.ok()) {
    for (size_t i = 0; i < judged->verdicts.size(); ++i) {
      scores[i].second = judged->verdicts[i].second.score;
    }
  }
  return PriorityList(scores);
}

json Extender::Bind(const json& body) {
  Result<BindingArgs> args = ParseBindingArgs(body);
  if (!args.ok()) return BindingResult(args.status().message());
  if (api_ == nullptr) return BindingResult("kata-vgpu extender: binding is not configured");
  const json binding = {
      {"apiVersion", "v1"},
      {"kind", "Binding"},
      {"metadata",
       {{"name", args->pod_name}, {"namespace", args->pod_namespace}, {"uid", args->pod_uid}}},
      {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", args->node}}}};
  Result<json> bound = api_->Post("/api/v1/namespaces/" + kube::QueryEscape(args->pod_namespace) +
                                      "/pods/" + kube::QueryEscape(args->pod_name) + "/binding",
                                  binding);
  if (!bound.ok()) return BindingResult(bound.status().message());
  kube::PodInfo pod;
  {
    std::lock_guard lock(mutex_);
    auto it = seen_.find(args->pod_uid);
    if (it != seen_.end()) pod = it->second;
  }
  if (!pod.uid.empty()) view_.Assume(pod, args->node);
  return BindingResult("");
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
  using Verb = json (Extender::*)(const json&);
  Verb verb = nullptr;
  if (request.path == "/filter") verb = &Extender::Filter;
  if (request.path == "/prioritize") verb = &Extender::Prioritize;
  if (request.path == "/bind") verb = &Extender::Bind;
  if (verb == nullptr) return text(404, "not found");
  if (request.method != "POST") return text(405, "POST only");
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded()) return text(400, "the body is not JSON");
  return {200, "application/json", (this->*verb)(body).dump()};
}

}  // namespace kvgpu::extender
