#include "webhook/server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "https/daemon_shell.h"
#include "https/file_stamp.h"
#include "kube/config.h"
#include "webhook/admission.h"
#include "webhook/claim_lookup.h"
#include "webhook/decision_log.h"
#include "webhook/metrics.h"

namespace kvgpu::webhook {

using https::FileStamp;
using https::HttpRequest;
using https::HttpResponse;
using https::HttpsServerOptions;
using https::TlsFiles;

class ConfigHolder {
 public:
  explicit ConfigHolder(std::shared_ptr<const Config> config) : config_(std::move(config)) {}
  std::shared_ptr<const Config> Get() const {
    std::lock_guard lock(mutex_);
    return config_;
  }
  void Set(std::shared_ptr<const Config> config) {
    std::lock_guard lock(mutex_);
    config_ = std::move(config);
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const Config> config_;
};

struct Server::Impl {
  ServerOptions options;
  std::unique_ptr<ConfigHolder> config;
  std::shared_ptr<kube::ApiTransport> api;  // null: claims are not looked up
  std::unique_ptr<ClaimLookup> claim_lookup;
  Metrics metrics;
  std::unique_ptr<https::DaemonShell> shell;
  FileStamp config_stamp;  // of the config file loaded now
  std::atomic<bool> ready{false};
  // 20 lines a second on average, bursts of 100: the API server's reviews, not a flood's.
  DecisionLog decisions{20, 100, [](const std::string& line) { spdlog::info("{}", line); }};
  // Reviews the API server would never send: one client could otherwise write the log as fast
  // as it sends them (issue #26: 13,927 lines in 3 s).
  DecisionLog bad_reviews{5, 20, [](const std::string& line) { spdlog::warn("{}", line); },
                          DecisionLog::Clock::now, "bad reviews"};

  HttpResponse Route(const HttpRequest& request);
  void TlsChecked(TlsFiles::Change change, const TlsFiles& tls);
  void ReloadConfig();
};

HttpResponse Server::Impl::Route(const HttpRequest& request) {
  if (request.path == "/mutate") {
    if (request.method != "POST") return {405, "text/plain; charset=utf-8", "use POST /mutate\n"};
    auto start = std::chrono::steady_clock::now();
    auto current = config->Get();
    ClaimResolver claims;
    ClaimLookup::Stats looked_up;
    if (claim_lookup) {
      claims = [&](std::string_view ns, const std::vector<PodClaimSource>& sources) {
        return claim_lookup->Resolve(ns, sources, current->claims, &looked_up);
      };
    }
    ReviewReply reply = HandleReview(request.body, request.content_type, *current, claims);
    metrics.ClaimLookups(looked_up.hits, looked_up.gets, looked_up.failures);
    metrics.Observe(
        reply, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (reply.outcome == ReviewOutcome::kBadRequest) {
      bad_reviews.Say("bad review: " + LogSafe(reply.body, kLogSafeBytes));
    } else {
      decisions.Record(PodOutcomeName(reply.pod_outcome), reply.namespace_name, reply.pod_name,
                       reply.reason);
    }
    return {reply.http_status, std::move(reply.content_type), std::move(reply.body)};
  }
  if (request.method != "GET")
    return {405, "text/plain; charset=utf-8", "use GET " + request.path + "\n"};
  if (request.path == "/healthz") return {200, "text/plain", "ok\n"};
  if (request.path == "/readyz") {
    bool is_ready = ready.load();
    return {is_ready ? 200 : 503, "text/plain", is_ready ? "ready\n" : "not ready\n"};
  }
  if (request.path == "/metrics") return {200, "text/plain; version=0.0.4", metrics.Text()};
  return {404, "text/plain; charset=utf-8",
          "no such endpoint " + request.path.substr(0, 200) +
              " (POST /mutate, GET /healthz, /readyz, /metrics)\n"};
}

void Server::Impl::TlsChecked(TlsFiles::Change change, const TlsFiles& tls) {
  if (change == TlsFiles::Change::kReloaded) {
    metrics.Reload("certificate", true);
    metrics.CertificateExpiry(tls.store().Current()->NotAfterUnixSeconds());
  } else if (change == TlsFiles::Change::kFailed) {
    metrics.Reload("certificate", false);
  }
}

void Server::Impl::ReloadConfig() {
  if (options.config_file.empty()) return;
  FileStamp stamp = FileStamp::Of(options.config_file);
  if (stamp == config_stamp) return;
  config_stamp = stamp;
  auto loaded = LoadConfigFile(options.config_file);
  if (loaded.ok()) {
    config->Set(loaded.value());
    metrics.Reload("config", true);
    spdlog::info("reloaded config {}", options.config_file);
  } else {
    metrics.Reload("config", false);
    spdlog::error("keeping the previous config: {}", loaded.status().message());
  }
}

namespace {

// The API server for claim lookups, from the options; null when none is configured.
Result<std::shared_ptr<kube::ApiTransport>> ConnectApi(const ServerOptions& options) {
  if (options.api) return options.api;
  if (options.kubeconfig.empty() && !options.in_cluster)
    return std::shared_ptr<kube::ApiTransport>();
  auto config = options.kubeconfig.empty() ? kube::LoadInCluster(kube::InClusterFromEnvironment())
                                           : kube::LoadKubeconfig(options.kubeconfig);
  if (!config.ok())
    return Status::Error(config.status().code(),
                         (options.kubeconfig.empty() ? std::string("--in-cluster")
                                                     : "--kubeconfig " + options.kubeconfig) +
                             ": " + config.status().message());
  kube::ClientOptions client;
  // Backstops only: the lookup's own deadline (resourceClaims.lookupTimeout) breaks a call
  // sooner, and the answer is bounded whatever the server sends.
  client.connect_timeout = std::chrono::seconds(5);
  client.request_timeout = std::chrono::seconds(5);
  client.max_response_bytes = kMaxClaimObjectBytes;
  client.user_agent = "kvgpu-webhook";
  auto created = kube::ApiClient::Create(*config, client);
  if (!created.ok()) return created.status();
  return std::shared_ptr<kube::ApiTransport>(std::move(*created));
}

}  // namespace

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  Stop();
}

Result<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::shared_ptr<const Config> config = DefaultConfig();
  if (!options.config_file.empty()) {
    impl->config_stamp = FileStamp::Of(options.config_file);
    auto loaded = LoadConfigFile(options.config_file);
    if (!loaded.ok()) return loaded.status();
    config = loaded.value();
  }
  impl->config = std::make_unique<ConfigHolder>(config);
  auto api = ConnectApi(options);
  if (!api.ok()) return api.status();
  impl->api = std::move(*api);
  if (impl->api) impl->claim_lookup = std::make_unique<ClaimLookup>(*impl->api);

  HttpsServerOptions limits;
  limits.idle_timeout = options.idle_timeout;
  limits.request_timeout = options.request_timeout;
  limits.max_body_bytes = kMaxReviewBytes;
  // docs/webhook.md, "Memory": the largest review (19 MiB) with what reviewing it may cost
  // (ReviewWorkingBytes: 28 MiB) fits beside other requests, and with the connections' own
  // buffers the process stays under 100 MiB, inside the Deployment's 128Mi limit.
  limits.max_buffered_body_bytes = kRequestMemoryBytes;
  limits.max_large_body_bytes = kMaxReviewBytes + 1024 * 1024;
  limits.handler_bytes = [](size_t body) { return ReviewWorkingBytes(body); };
  limits.max_connections = options.max_connections;
  Impl* raw = impl.get();
  https::ShellHooks hooks;
  hooks.route = [raw](const HttpRequest& request) { return raw->Route(request); };
  hooks.metrics_text = [raw] { return raw->metrics.Text(); };
  hooks.tls_checked = [raw](TlsFiles::Change change, const std::string&, const TlsFiles& tls) {
    raw->TlsChecked(change, tls);
  };
  hooks.reload_tick = [raw] { raw->ReloadConfig(); };
  auto shell = https::DaemonShell::Start(options, limits, std::move(hooks),
                                         "the API server only calls webhooks over HTTPS");
  if (!shell.ok()) return shell.status();
  impl->shell = std::move(*shell);
  impl->metrics.CertificateExpiry(impl->shell->tls().store().Current()->NotAfterUnixSeconds());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const {
  return impl_->shell->port();
}
int Server::metrics_port() const {
  return impl_->shell->metrics_port();
}
std::shared_ptr<const Config> Server::config() const {
  return impl_->config->Get();
}
void Server::ReloadNow() {
  impl_->shell->ReloadNow();
}

void Server::Run() {
  impl_->ready = true;
  spdlog::info("kvgpu-webhook serving HTTPS on {} (port {})", impl_->options.listen, port());
  impl_->shell->Run();
  impl_->ready = false;
}

void Server::Stop() {
  impl_->ready = false;
  impl_->shell->Stop();
}

}  // namespace kvgpu::webhook
