#include "webhook/server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "https/client_auth.h"
#include "https/file_stamp.h"
#include "https/http_server.h"
#include "https/tls_files.h"
#include "webhook/admission.h"
#include "webhook/decision_log.h"
#include "webhook/metrics.h"
#include "webhook/metrics_listener.h"

namespace kvgpu::webhook {

using https::FileStamp;
using https::HostPort;
using https::HttpRequest;
using https::HttpResponse;
using https::HttpsServer;
using https::HttpsServerOptions;
using https::ParseHostPort;
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
  std::unique_ptr<TlsFiles> tls;
  std::unique_ptr<ConfigHolder> config;
  Metrics metrics;
  std::unique_ptr<HttpsServer> http;
  std::unique_ptr<MetricsListener> metrics_listener;
  int port = 0;
  int metrics_port = 0;

  // File watching: stamps of what is loaded now.
  std::mutex reload_mutex;
  FileStamp config_stamp;
  std::thread watcher;
  std::mutex stop_mutex;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::atomic<bool> ready{false};
  // 20 lines a second on average, bursts of 100: the API server's reviews, not a flood's.
  DecisionLog decisions{20, 100, [](const std::string& line) { spdlog::info("{}", line); }};
  // Reviews the API server would never send: one client could otherwise write the log as fast
  // as it sends them (issue #26: 13,927 lines in 3 s).
  DecisionLog bad_reviews{5, 20, [](const std::string& line) { spdlog::warn("{}", line); },
                          DecisionLog::Clock::now, "bad reviews"};

  HttpResponse Route(const HttpRequest& request);
  void Watch();
  void CheckFiles();
};

HttpResponse Server::Impl::Route(const HttpRequest& request) {
  if (auto refused =
          https::RefuseWithoutClientCertificate(request, !options.client_ca_file.empty()))
    return *refused;
  if (request.path == "/mutate") {
    if (request.method != "POST") return {405, "text/plain; charset=utf-8", "use POST /mutate\n"};
    auto start = std::chrono::steady_clock::now();
    auto current = config->Get();
    ReviewReply reply = HandleReview(request.body, request.content_type, *current);
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

void Server::Impl::CheckFiles() {
  std::lock_guard lock(reload_mutex);
  std::string error;
  switch (tls->CheckFiles(&error)) {
    case TlsFiles::Change::kNone:
      break;
    case TlsFiles::Change::kReloaded: {
      auto current = tls->store().Current();
      metrics.Reload("certificate", true);
      metrics.CertificateExpiry(current->NotAfterUnixSeconds());
      spdlog::info("reloaded TLS certificate: {}", current->Describe());
      break;
    }
    case TlsFiles::Change::kFailed:
      // Keep serving with the old pair; the new files are retried until they make a pair.
      metrics.Reload("certificate", false);
      spdlog::error("keeping the previous TLS certificate: {}", error);
      break;
  }
  if (!options.config_file.empty()) {
    FileStamp stamp = FileStamp::Of(options.config_file);
    if (!(stamp == config_stamp)) {
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
  }
}

void Server::Impl::Watch() {
  std::unique_lock lock(stop_mutex);
  while (!stop_cv.wait_for(lock, options.reload_interval, [this] { return stopping; })) {
    lock.unlock();
    CheckFiles();
    lock.lock();
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  Stop();
}

Result<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  auto listen = ParseHostPort(options.listen);
  if (!listen.ok())
    return Status::Error(ErrorCode::kInvalid, "--listen: " + listen.status().message());
  if (options.tls_cert_file.empty() || options.tls_key_file.empty())
    return Status::Error(
        ErrorCode::kInvalid,
        "--tls-cert-file and --tls-key-file are required (the API server only calls "
        "webhooks over HTTPS)");

  auto tls = TlsFiles::Load(options.tls_cert_file, options.tls_key_file, options.client_ca_file);
  if (!tls.ok()) return tls.status();
  impl->tls = std::move(*tls);
  impl->metrics.CertificateExpiry(impl->tls->store().Current()->NotAfterUnixSeconds());

  std::shared_ptr<const Config> config = DefaultConfig();
  if (!options.config_file.empty()) {
    impl->config_stamp = FileStamp::Of(options.config_file);
    auto loaded = LoadConfigFile(options.config_file);
    if (!loaded.ok()) return loaded.status();
    config = loaded.value();
  }
  impl->config = std::make_unique<ConfigHolder>(config);

  std::string tls_error;
  SSL_CTX* ctx = impl->tls->NewServerContext(&tls_error);
  if (ctx == nullptr) return Status::Error(ErrorCode::kInvalid, tls_error);
  HttpsServerOptions http_options;
  http_options.worker_threads = options.worker_threads;
  http_options.idle_timeout = options.idle_timeout;
  http_options.request_timeout = options.request_timeout;
  http_options.max_body_bytes = kMaxReviewBytes;
  // docs/webhook.md, "Memory": the largest review (19 MiB) with what reviewing it may cost
  // (ReviewWorkingBytes: 28 MiB) fits beside other requests, and with the connections' own
  // buffers the process stays under 100 MiB, inside the Deployment's 128Mi limit.
  http_options.max_buffered_body_bytes = kRequestMemoryBytes;
  http_options.max_large_body_bytes = kMaxReviewBytes + 1024 * 1024;
  http_options.handler_bytes = [](size_t body) { return ReviewWorkingBytes(body); };
  http_options.max_connections = options.max_connections;
  Impl* raw = impl.get();
  impl->http = std::make_unique<HttpsServer>(
      ctx, [raw](const HttpRequest& request) { return raw->Route(request); }, http_options);
  auto port = impl->http->Listen(listen->host, listen->port);
  if (!port.ok())
    return Status::Error(ErrorCode::kInvalid,
                         "cannot listen on " + options.listen + ": " + port.status().message());
  impl->port = port.value();

  if (!options.metrics_addr.empty()) {
    auto metrics_at = ParseHostPort(options.metrics_addr);
    if (!metrics_at.ok())
      return Status::Error(ErrorCode::kInvalid, "--metrics-addr: " + metrics_at.status().message());
    Metrics* metrics = &impl->metrics;
    auto listener = MetricsListener::Start(metrics_at->host, metrics_at->port,
                                           [metrics] { return metrics->Text(); }, {});
    if (!listener.ok())
      return Status::Error(ErrorCode::kInvalid, "cannot listen for metrics on " +
                                                    options.metrics_addr + ": " +
                                                    listener.status().message());
    impl->metrics_listener = std::move(listener.value());
    impl->metrics_port = impl->metrics_listener->port();
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const {
  return impl_->port;
}
int Server::metrics_port() const {
  return impl_->metrics_port;
}
std::shared_ptr<const Config> Server::config() const {
  return impl_->config->Get();
}
void Server::ReloadNow() {
  impl_->CheckFiles();
}

void Server::Run() {
  {
    std::lock_guard lock(impl_->stop_mutex);
    if (impl_->stopping) return;
    impl_->watcher = std::thread([this] { impl_->Watch(); });
  }
  impl_->ready = true;
  spdlog::info("kvgpu-webhook serving HTTPS on {} (port {})", impl_->options.listen, impl_->port);
  impl_->http->Run();
  impl_->ready = false;
}

void Server::Stop() {
  {
    std::lock_guard lock(impl_->stop_mutex);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  impl_->ready = false;
  impl_->http->Stop();
  if (impl_->watcher.joinable() && impl_->watcher.get_id() != std::this_thread::get_id())
    impl_->watcher.join();
}

}  // namespace kvgpu::webhook
