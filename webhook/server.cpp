#include "webhook/server.h"

#include <httplib.h>
#include <prometheus/exposer.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "webhook/admission.h"
#include "webhook/file_stamp.h"
#include "webhook/metrics.h"
#include "webhook/tls.h"

namespace kvgpu::webhook {

Expected<HostPort> ParseHostPort(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) return Error{"address '" + text + "' must be HOST:PORT"};
  HostPort out;
  out.host = text.substr(0, colon);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2);
  std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return Error{"address '" + text + "' has no valid port (0-65535)"};
  out.port = std::stoi(port);
  return out;
}

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
  std::unique_ptr<TlsCredentialStore> credentials;
  std::unique_ptr<ConfigHolder> config;
  Metrics metrics;
  std::unique_ptr<httplib::SSLServer> http;
  std::unique_ptr<prometheus::Exposer> exposer;
  int port = 0;
  int metrics_port = 0;

  // File watching: stamps of what is loaded now.
  std::mutex reload_mutex;
  FileStamp cert_stamp, key_stamp, ca_stamp, config_stamp;
  bool tls_pending = false;  // a change was seen but could not be loaded yet
  std::thread watcher;
  std::mutex stop_mutex;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::atomic<bool> ready{false};
  std::atomic<bool> run_active{false};

  void Routes();
  void Watch();
  void CheckFiles();
};

void Server::Impl::Routes() {
  http->Post("/mutate", [this](const httplib::Request& req, httplib::Response& res) {
    auto start = std::chrono::steady_clock::now();
    auto current = config->Get();
    ReviewReply reply = HandleReview(req.body, req.get_header_value("Content-Type"), *current);
    metrics.Observe(
        reply, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    res.status = reply.http_status;
    if (reply.outcome == ReviewOutcome::kBadRequest) spdlog::warn("{}", reply.body);
    res.set_content(std::move(reply.body), reply.content_type.c_str());
  });
  http->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  http->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    bool is_ready = ready.load();
    res.status = is_ready ? 200 : 503;
    res.set_content(is_ready ? "ready\n" : "not ready\n", "text/plain");
  });
  http->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Text(), "text/plain; version=0.0.4");
  });
  // httplib answers an oversized body with 413 before any handler runs; the API server and
  // this project's contract expect 400 with a message for every malformed request.
  http->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (res.status == 413) {
          res.status = 400;
          res.set_content("bad AdmissionReview request: body exceeds the 3 MiB limit\n",
                          "text/plain; charset=utf-8");
        } else if (res.status == 404) {
          res.set_content(
              "no such endpoint " + req.path + " (POST /mutate, GET /healthz, /readyz, /metrics)\n",
              "text/plain; charset=utf-8");
        } else if (res.body.empty()) {
          res.set_content("request failed with HTTP " + std::to_string(res.status) + "\n",
                          "text/plain; charset=utf-8");
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  http->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content("internal error\n", "text/plain");
      });
}

void Server::Impl::CheckFiles() {
  std::lock_guard lock(reload_mutex);
  FileStamp cert = FileStamp::Of(options.tls_cert_file);
  FileStamp key = FileStamp::Of(options.tls_key_file);
  FileStamp ca = FileStamp::Of(options.client_ca_file);
  if (tls_pending || !(cert == cert_stamp) || !(key == key_stamp) || !(ca == ca_stamp)) {
    auto loaded =
        TlsCredentials::Load(options.tls_cert_file, options.tls_key_file, options.client_ca_file);
    bool changed_since_last_try = !(cert == cert_stamp) || !(key == key_stamp) || !(ca == ca_stamp);
    cert_stamp = cert;
    key_stamp = key;
    ca_stamp = ca;
    if (loaded.ok()) {
      credentials->Replace(loaded.value());
      tls_pending = false;
      metrics.Reload("certificate", true);
      spdlog::info("reloaded TLS certificate: {}", loaded.value()->Describe());
    } else {
      // Keep serving with the old pair; the new files are retried until they make a pair.
      if (changed_since_last_try) {
        metrics.Reload("certificate", false);
        spdlog::error("keeping the previous TLS certificate: {}", loaded.error());
      }
      tls_pending = true;
    }
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
        spdlog::error("keeping the previous config: {}", loaded.error());
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

Expected<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  auto listen = ParseHostPort(options.listen);
  if (!listen.ok()) return Error{"--listen: " + listen.error()};
  if (options.tls_cert_file.empty() || options.tls_key_file.empty())
    return Error{
        "--tls-cert-file and --tls-key-file are required (the API server only calls "
        "webhooks over HTTPS)"};

  impl->cert_stamp = FileStamp::Of(options.tls_cert_file);
  impl->key_stamp = FileStamp::Of(options.tls_key_file);
  impl->ca_stamp = FileStamp::Of(options.client_ca_file);
  auto credentials =
      TlsCredentials::Load(options.tls_cert_file, options.tls_key_file, options.client_ca_file);
  if (!credentials.ok()) return Error{credentials.error()};
  impl->credentials = std::make_unique<TlsCredentialStore>(credentials.value());

  std::shared_ptr<const Config> config = DefaultConfig();
  if (!options.config_file.empty()) {
    impl->config_stamp = FileStamp::Of(options.config_file);
    auto loaded = LoadConfigFile(options.config_file);
    if (!loaded.ok()) return Error{loaded.error()};
    config = loaded.value();
  }
  impl->config = std::make_unique<ConfigHolder>(config);

  TlsCredentialStore* store = impl->credentials.get();
  bool verify_clients = !options.client_ca_file.empty();
  impl->http = std::make_unique<httplib::SSLServer>([store, verify_clients](SSL_CTX& ctx) {
    return ConfigureServerContext(ctx, store, verify_clients);
  });
  if (!impl->http->is_valid()) return Error{"cannot set up TLS: " + OpenSslErrors()};
  size_t threads = options.worker_threads;
  impl->http->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // httplib writes headers and body separately; without this Nagle holds the body ~40 ms.
  impl->http->set_tcp_nodelay(true);
  // httplib's default adds SO_REUSEPORT, which lets a second webhook process (a stale one, or
  // anyone with our uid) silently take a share of the connections. One listener per port.
  impl->http->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl->http->set_keep_alive_max_count(1000000);
  impl->http->set_keep_alive_timeout(options.idle_timeout.count());
  impl->http->set_read_timeout(10, 0);
  impl->http->set_write_timeout(10, 0);
  impl->http->set_payload_max_length(kMaxReviewBytes);
  impl->Routes();

  std::string host = listen->host.empty() ? "0.0.0.0" : listen->host;
  if (listen->port == 0) {
    impl->port = impl->http->bind_to_any_port(host.c_str());
  } else if (impl->http->bind_to_port(host.c_str(), listen->port)) {
    impl->port = listen->port;
  } else {
    impl->port = -1;
  }
  if (impl->port <= 0) return Error{"cannot listen on " + options.listen};

  if (!options.metrics_addr.empty()) {
    auto metrics_at = ParseHostPort(options.metrics_addr);
    if (!metrics_at.ok()) return Error{"--metrics-addr: " + metrics_at.error()};
    std::string bind = (metrics_at->host.empty() ? "0.0.0.0" : metrics_at->host) + ":" +
                       std::to_string(metrics_at->port);
    if (metrics_at->host.find(':') != std::string::npos)
      bind = "[" + metrics_at->host + "]:" + std::to_string(metrics_at->port);
    try {
      impl->exposer = std::make_unique<prometheus::Exposer>(bind, 2);
    } catch (const std::exception& e) {
      return Error{"cannot listen for metrics on " + options.metrics_addr + ": " + e.what()};
    }
    impl->exposer->RegisterCollectable(impl->metrics.registry());
    auto ports = impl->exposer->GetListeningPorts();
    impl->metrics_port = ports.empty() ? 0 : ports.front();
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
  impl_->run_active = true;
  impl_->ready = true;
  spdlog::info("kvgpu-webhook serving HTTPS on {} (port {})", impl_->options.listen, impl_->port);
  impl_->http->listen_after_bind();
  impl_->ready = false;
  impl_->run_active = false;
}

void Server::Stop() {
  {
    std::lock_guard lock(impl_->stop_mutex);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  impl_->ready = false;
  // Run() may be between its start and httplib's accept loop; stop() is a no-op until then.
  while (impl_->run_active && !impl_->http->is_running())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->http->stop();
  if (impl_->watcher.joinable() && impl_->watcher.get_id() != std::this_thread::get_id())
    impl_->watcher.join();
}

}  // namespace kvgpu::webhook
