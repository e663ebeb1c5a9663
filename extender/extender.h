// The scheduler extender's verbs over the cluster view: filter keeps the nodes whose GPUs can take
// the pod's vGPUs (node_fit.h), prioritize scores them (pack or spread), bind checks the pod fits
// beside every bind recorded on the node, records its own there with a conditional write
// (bind_ledger.h), binds through the API server and counts the pod on the node at once. Nothing
// but the watches lives in a replica, so replicas agree and a restart loses nothing: bad input is
// answered with an error, a node without usable state is failed with the reason, and nothing here
// throws past a request.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/clock.h"
#include "common/cross_program.h"
#include "extender/cluster_view.h"
#include "extender/node_fit.h"
#include "extender/protocol.h"
#include "https/http_server.h"
#include "kube/api_client.h"

namespace kvgpu::extender {

struct ExtenderOptions {
  std::string resource_prefix{kVgpuResourcePrefix};
  FitOptions fit;
  // How often bind judges a node again when another replica's bind (or the plugin's state)
  // changed the Node between its read and its conditional write.
  int bind_attempts = 8;
};

// A pod the bind verb may bind, and its vGPUs.
struct BindTarget {
  kube::PodInfo pod;
  std::vector<scheduling::Demand> demand;
};

class Extender {
 public:
  using Clock = UnixMsClock;
  // `api` binds pods for the bind verb; nullptr: bind is refused (not configured). `now`: the
  // view's clock when empty, so that the ledger's times and the view's agree.
  Extender(ClusterView& view, ExtenderOptions options, kube::ApiTransport* api = nullptr,
           Clock now = nullptr);

  nlohmann::json Filter(const nlohmann::json& body);
  nlohmann::json Prioritize(const nlohmann::json& body);
  // The same answers as the JSON text Handle sends (the documents above are parsed from it).
  std::string FilterText(const nlohmann::json& body);
  std::string PrioritizeText(const nlohmann::json& body);
  // The same from arguments already read (Handle reads them from the text).
  std::string FilterAnswer(Result<ExtenderArgs> args);
  std::string PrioritizeAnswer(Result<ExtenderArgs> args);
  nlohmann::json Bind(const nlohmann::json& body);
  // ExtenderPreemptionResult: the candidate nodes where the victims make room for the pod's
  // vGPUs (preemption.h), each with the victims kube-scheduler chose, unchanged; a pod without
  // vGPUs gets every node back as sent. None at all for a pod whose nominated node will have room
  // once the plugin removes the vGPUs of pods already gone (ClusterView::GoneHolders): it waits
  // for them instead of costing a second victim. kInvalid for arguments of another shape.
  Result<nlohmann::json> Preempt(const nlohmann::json& body);

  // POST /filter, /prioritize, /bind, /preempt (JSON; /preempt answers 400 to bad arguments); GET
  // /healthz (the process), /readyz (following the API server's nodes and pods).
  https::HttpResponse Handle(const https::HttpRequest& request);

 private:
  struct Judged {
    std::vector<NodeVerdict> verdicts;  // one per node sent, in that order
  };
  Result<Judged> Judge(const ExtenderArgs& args);
  std::string BindText(const nlohmann::json& body);
  // The pod as the API server has it, if bind may bind it: pending, unbound, with the UID the
  // scheduler named, asking for a vGPU.
  Result<BindTarget> BindablePod(const BindingArgs& args);
  Status RecordBind(const std::string& node, const BindTarget& target);

  ClusterView& view_;
  ExtenderOptions options_;
  kube::ApiTransport* api_;
  Clock now_;
};

}  // namespace kvgpu::extender
