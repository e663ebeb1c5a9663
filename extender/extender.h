// The scheduler extender's verbs over the cluster view: filter keeps the nodes whose GPUs can take
// the pod's vGPUs (node_fit.h), prioritize scores them (pack or spread), bind binds the pod
// through the API server and counts it on the node at once. Stateless apart from the view, so
// replicas agree and a restart loses nothing: bad input is answered with an error, a node
// without usable state is failed with the reason, and nothing here throws past a request.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "extender/cluster_view.h"
#include "extender/node_fit.h"
#include "extender/protocol.h"
#include "https/http_server.h"
#include "kube/api_client.h"

namespace kvgpu::extender {

struct ExtenderOptions {
  std::string resource_prefix = "tencent.com/vgpu-";
  FitOptions fit;
  // How many pods seen by filter are remembered for bind (which names the pod only).
  size_t remembered_pods = 4096;
};

class Extender {
 public:
  using Clock = std::function<int64_t()>;  // unix ms
  // `api` binds pods for the bind verb; nullptr: bind is refused (not configured).
  Extender(ClusterView& view, ExtenderOptions options, kube::ApiTransport* api = nullptr,
           Clock now = nullptr);

  nlohmann::json Filter(const nlohmann::json& body);
  nlohmann::json Prioritize(const nlohmann::json& body);
  nlohmann::json Bind(const nlohmann::json& body);

  // POST /filter, /prioritize, /bind (JSON); GET /healthz (the process), /readyz (following the
  // API server's nodes and pods).
  https::HttpResponse Handle(const https::HttpRequest& request);

 private:
  struct Judged {
    std::vector<std::pair<std::string, NodeVerdict>> verdicts;  // in the order sent
  };
  Result<Judged> Judge(const ExtenderArgs& args);
  void Remember(const kube::PodInfo& pod);

  ClusterView& view_;
  ExtenderOptions options_;
  kube::ApiTransport* api_;
  Clock now_;

  std::mutex mutex_;
  std::map<std::string, kube::PodInfo> seen_;  // by uid, for bind
  std::deque<std::string> seen_order_;
};

}  // namespace kvgpu::extender
