#include "extender/service.h"

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>

#include "extender/coverage.h"
#include "https/http_server.h"
#include "kube/config.h"
#include "kube/events.h"
#include "kube/list_watch.h"

namespace kvgpu::extender {

namespace {

Result<std::unique_ptr<kube::ApiClient>> ConnectApi(const std::string& kubeconfig) {
  Result<kube::Config> config = Status::Error(ErrorCode::kConfig, "");
  if (!kubeconfig.empty()) {
    config = kube::LoadKubeconfig(kubeconfig);
  } else if (std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) {
    config = kube::LoadInCluster(kube::InClusterFromEnvironment());
  } else {
    return Status::Error(ErrorCode::kConfig,
                         "no API server: give --kubeconfig or run in a cluster (the extender "
                         "follows the nodes' vGPU state and the pods bound to them)");
  }
  if (!config.ok()) return config.status();
  return kube::ApiClient::Create(*config);
}

}  // namespace

// Each verb's calls by HTTP status and how long they took: what an operator watches to see the
// extender slow the scheduler down or refuse it.
struct ServiceMetrics {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>& requests =
      prometheus::BuildCounter()
          .Name("kvgpu_scheduler_extender_requests_total")
          .Help("Calls by path and HTTP status")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& seconds =
      prometheus::BuildHistogram()
          .Name("kvgpu_scheduler_extender_request_seconds")
          .Help("Time to answer a call, by path")
          .Register(*registry);

  void Observe(const std::string& path, int status, std::chrono::nanoseconds took) {
    static const std::set<std::string> kPaths = {"/filter",  "/prioritize", "/bind",
                                                 "/preempt", "/healthz",    "/readyz"};
    const std::string label = kPaths.contains(path) ? path : "other";
    requests.Add({{"path", label}, {"code", std::to_string(status)}}).Increment();
    seconds
        .Add({{"path", label}},
             prometheus::Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                     0.01, 0.025, 0.05, 0.1, 0.25, 1})
        .Observe(std::chrono::duration<double>(took).count());
  }
};

struct Service::Impl {
  ServiceOptions options;
  ServiceMetrics metrics;
  std::unique_ptr<kube::ApiClient> own_api;
  kube::ApiTransport* api = nullptr;
  std::unique_ptr<ClusterView> view;
  // Node Events from coverage, posted on their own thread so a slow API server never holds up
  // the Node watch.
  std::unique_ptr<kube::ApiEventRecorder> api_events;
  std::unique_ptr<kube::AsyncEventRecorder> events;
  std::unique_ptr<Coverage> coverage;
  std::unique_ptr<Extender> extender;
  std::unique_ptr<kube::ListWatcher> nodes;
  std::unique_ptr<kube::ListWatcher> pods;
  std::unique_ptr<https::DaemonShell> shell;

  void Watch() {
    nodes = std::make_unique<kube::ListWatcher>(
        *api, kube::ListWatchOptions{.path = "/api/v1/nodes", .what = "nodes"});
    nodes->Start({[this](const std::vector<nlohmann::json>& all) {
                    view->SyncNodes(all);
                    if (coverage) coverage->SyncNodes(all);
                  },
                  [this](kube::WatchEventType type, const nlohmann::json& node) {
                    view->NodeChanged(type, node);
                    if (coverage) coverage->NodeChanged(type, node);
                  },
                  [this](bool following, const std::string&) {
                    view->SetFollowing(ClusterView::kNodesWatch, following);
                  }});
    // Assigned pods only: a pod shows up here when it is bound.
    pods = std::make_unique<kube::ListWatcher>(
        *api, kube::ListWatchOptions{
                  .path = "/api/v1/pods?fieldSelector=" + kube::QueryEscape("spec.nodeName!="),
                  .what = "assigned pods"});
    pods->Start({[this](const std::vector<nlohmann::json>& all) {
                   std::vector<kube::PodInfo> parsed;
                   for (const nlohmann::json& object : all) {
                     if (auto pod = kube::ParsePod(object); pod.ok()) parsed.push_back(*pod);
                   }
                   view->SyncPods(parsed);
                 },
                 [this](kube::WatchEventType type, const nlohmann::json& object) {
                   if (auto pod = kube::ParsePod(object); pod.ok()) view->PodChanged(type, *pod);
                 },
                 [this](bool following, const std::string&) {
                   view->SetFollowing(ClusterView::kPodsWatch, following);
                 }});
  }
};

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Service::~Service() {
  Stop();
}

Result<std::unique_ptr<Service>> Service::Create(ServiceOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->api = options.api;
  if (impl->api == nullptr) {
    auto api = ConnectApi(options.kubeconfig);
    if (!api.ok()) return api.status();
    impl->own_api = std::move(*api);
    impl->api = impl->own_api.get();
  }
  impl->view = std::make_unique<ClusterView>(options.extender.resource_prefix);
  if (!options.scheduler_config.empty()) {
    std::ifstream in(options.scheduler_config, std::ios::binary);
    if (!in) {
      return Status::Error(ErrorCode::kConfig,
                           "--scheduler-config: cannot read " + options.scheduler_config);
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto managed = ManagedResources(text);
    if (!managed.ok()) {
      return Status::Error(ErrorCode::kConfig, "--scheduler-config " + options.scheduler_config +
                                                   ": " + managed.status().message());
    }
    const char* host = std::getenv("HOSTNAME");
    impl->api_events = std::make_unique<kube::ApiEventRecorder>(
        *impl->api, "kvgpu-scheduler-extender", host != nullptr ? host : "");
    impl->events = std::make_unique<kube::AsyncEventRecorder>(*impl->api_events, 64);
    impl->coverage =
        std::make_unique<Coverage>(std::move(*managed), options.extender.resource_prefix,
                                   *impl->metrics.registry, impl->events.get());
  }
  impl->extender =
      std::make_unique<Extender>(*impl->view, options.extender, options.bind ? impl->api : nullptr);
  https::HttpsServerOptions limits;
  // ExtenderArgs with whole Node objects: ~5 KiB a node, so 5,000 nodes fit in 32 MiB.
  limits.max_body_bytes = 32 * 1024 * 1024;
  limits.max_buffered_body_bytes = 128 * 1024 * 1024;
  Extender* extender = impl->extender.get();
  ServiceMetrics* metrics = &impl->metrics;
  https::ShellHooks hooks;
  hooks.route = [extender](const https::HttpRequest& request) { return extender->Handle(request); };
  hooks.observe = [metrics](const https::HttpRequest& request, const https::HttpResponse& response,
                            std::chrono::nanoseconds took) {
    metrics->Observe(request.path, response.status, took);
  };
  hooks.metrics_text = [metrics] {
    return prometheus::TextSerializer().Serialize(metrics->registry->Collect());
  };
  auto shell = https::DaemonShell::Start(options, limits, std::move(hooks),
                                         "kube-scheduler calls the extender with enableHTTPS");
  if (!shell.ok()) return shell.status();
  impl->shell = std::move(*shell);
  impl->Watch();
  spdlog::info("scheduler extender on port {} (filter, prioritize, preempt{}), policy {}",
               impl->shell->port(), options.bind ? ", bind" : "",
               scheduling::PolicyName(options.extender.fit.policy));
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

int Service::port() const {
  return impl_->shell->port();
}

int Service::metrics_port() const {
  return impl_->shell->metrics_port();
}

std::string Service::Metrics() const {
  return prometheus::TextSerializer().Serialize(impl_->metrics.registry->Collect());
}

ClusterView& Service::view() {
  return *impl_->view;
}

void Service::Run() {
  impl_->shell->Run();
}

void Service::Stop() {
  impl_->shell->Stop();
  if (impl_->nodes) impl_->nodes->Stop();
  if (impl_->pods) impl_->pods->Stop();
}

}  // namespace kvgpu::extender
