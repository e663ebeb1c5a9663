#include "https/daemon_shell.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <mutex>
#include <thread>

#include "common/background_worker.h"
#include "https/client_auth.h"
#include "https/metrics_listener.h"

namespace kvgpu::https {

struct DaemonShell::Impl {
  ShellOptions options;
  ShellHooks hooks;
  std::unique_ptr<TlsFiles> tls;
  std::unique_ptr<HttpsServer> http;
  std::unique_ptr<MetricsListener> metrics;
  int port = 0;
  int metrics_port = 0;

  std::mutex reload_mutex;  // one check of the files at a time (the loop, ReloadNow)
  BackgroundWorker reloader;
  std::mutex mutex;
  bool stopping = false;  // Stop ran

  HttpResponse Answer(const HttpRequest& request) {
    const auto start = std::chrono::steady_clock::now();
    std::optional<HttpResponse> refused =
        RefuseWithoutClientCertificate(request, !options.client_ca_file.empty());
    HttpResponse response = refused ? std::move(*refused) : hooks.route(request);
    if (hooks.observe) hooks.observe(request, response, std::chrono::steady_clock::now() - start);
    return response;
  }

  void ReloadLoop(BackgroundWorker::Handle& worker) {
    while (worker.SleepFor(options.reload_interval)) CheckFiles();
  }

  void CheckFiles() {
    std::lock_guard lock(reload_mutex);
    std::string error;
    TlsFiles::Change change = tls->CheckFiles(&error);
    switch (change) {
      case TlsFiles::Change::kNone:
        break;
      case TlsFiles::Change::kReloaded:
        spdlog::info("reloaded TLS certificate: {}", tls->store().Current()->Describe());
        break;
      case TlsFiles::Change::kFailed:
        // Keep serving with the old pair; the new files are retried until they make a pair.
        spdlog::error("keeping the previous TLS certificate: {}", error);
        break;
    }
    if (hooks.tls_checked) hooks.tls_checked(change, error, *tls);
    if (hooks.reload_tick) hooks.reload_tick();
  }

  Status StartMetrics() {
    if (options.metrics_addr.empty()) return Status::Ok();
    auto at = ParseHostPort(options.metrics_addr);
    if (!at.ok())
      return Status::Error(ErrorCode::kInvalid, "--metrics-addr: " + at.status().message());
    auto listener = MetricsListener::Start(at->host, at->port, hooks.metrics_text, {});
    if (!listener.ok()) {
      return Status::Error(ErrorCode::kInvalid, "cannot listen for metrics on " +
                                                    options.metrics_addr + ": " +
                                                    listener.status().message());
    }
    metrics = std::move(*listener);
    metrics_port = metrics->port();
    return Status::Ok();
  }
};

Result<std::unique_ptr<DaemonShell>> DaemonShell::Start(const ShellOptions& options,
                                                        HttpsServerOptions limits, ShellHooks hooks,
                                                        const std::string& why_https) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->hooks = std::move(hooks);
  auto listen = ParseHostPort(options.listen);
  if (!listen.ok()) {
    return Status::Error(ErrorCode::kInvalid, "--listen: " + listen.status().message());
  }
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return Status::Error(ErrorCode::kInvalid,
                         "--tls-cert-file and --tls-key-file are required (" + why_https + ")");
  }
  auto tls = TlsFiles::Load(options.tls_cert_file, options.tls_key_file, options.client_ca_file);
  if (!tls.ok()) return tls.status();
  impl->tls = std::move(*tls);
  std::string tls_error;
  SSL_CTX* ctx = impl->tls->NewServerContext(&tls_error);
  if (ctx == nullptr) return Status::Error(ErrorCode::kInvalid, tls_error);

  limits.worker_threads = options.worker_threads;
  Impl* raw = impl.get();
  impl->http = std::make_unique<HttpsServer>(
      ctx, [raw](const HttpRequest& request) { return raw->Answer(request); }, limits);
  auto port = impl->http->Listen(listen->host, listen->port);
  if (!port.ok()) {
    return Status::Error(ErrorCode::kInvalid,
                         "cannot listen on " + options.listen + ": " + port.status().message());
  }
  impl->port = *port;
  if (Status metrics = impl->StartMetrics(); !metrics.ok()) return metrics;
  impl->reloader.Start([raw](BackgroundWorker::Handle& worker) { raw->ReloadLoop(worker); });
  return std::unique_ptr<DaemonShell>(new DaemonShell(std::move(impl)));
}

DaemonShell::DaemonShell(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DaemonShell::~DaemonShell() {
  Stop();
}

int DaemonShell::port() const {
  return impl_->port;
}

int DaemonShell::metrics_port() const {
  return impl_->metrics_port;
}

const TlsFiles& DaemonShell::tls() const {
  return *impl_->tls;
}

void DaemonShell::ReloadNow() {
  impl_->CheckFiles();
}

void DaemonShell::Run() {
  impl_->http->Run();
}

void DaemonShell::Stop() {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->reloader.Stop();
  impl_->http->Stop();
  impl_->metrics.reset();
}

void AddShellFlags(CLI::App& app, ShellOptions& options, const std::string& caller) {
  app.add_option("--listen", options.listen, "HTTPS address HOST:PORT")->capture_default_str();
  app.add_option("--tls-cert-file", options.tls_cert_file,
                 "PEM certificate (chain), reloaded on change")
      ->required();
  app.add_option("--tls-key-file", options.tls_key_file, "PEM private key, reloaded on change")
      ->required();
  app.add_option("--client-ca-file", options.client_ca_file,
                 "PEM CA bundle; when set, " + caller +
                     " must present a certificate it signed (probes excepted)");
  app.add_option("--metrics-addr", options.metrics_addr,
                 "plain-HTTP Prometheus address HOST:PORT (empty: none)");
}

namespace {

sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

}  // namespace

SignalScope::SignalScope() {
  sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int SignalScope::Serve(const std::function<void()>& run, const std::function<void()>& stop) {
  sigset_t signals = StopSignals();
  std::thread waiter([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    spdlog::info("signal {}: stopping", signal_number);
    stop();
  });
  run();
  // run() returns once stopped; wake the waiter in case it was not a signal that stopped it.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return 0;
}

}  // namespace kvgpu::https
