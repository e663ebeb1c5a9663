// The one shell of the HTTPS daemons (the admission webhook, the scheduler extender): their
// common flags, the TLS pair loaded and reloaded while serving, the client-certificate rule in
// front of every route (client_auth.h), the plain-HTTP metrics listener, and the signal handling
// of main(). A daemon brings its routes, limits and metrics; what is here cannot be left out of
// one of them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "https/http_server.h"
#include "https/tls_files.h"

namespace CLI {
class App;
}

namespace kvgpu::https {

struct ShellOptions {
  std::string listen;          // HOST:PORT of the HTTPS endpoint
  std::string tls_cert_file;   // required, reloaded on change
  std::string tls_key_file;    // required, reloaded on change
  std::string client_ca_file;  // empty: no client certificate asked for
  std::string metrics_addr;    // plain-HTTP Prometheus HOST:PORT; empty: none
  size_t worker_threads = 2;
  std::chrono::milliseconds reload_interval{1000};
};

struct ShellHooks {
  // Answers a request that passed the client-certificate rule.
  std::function<HttpResponse(const HttpRequest&)> route;
  // Every answer, refused ones included, and how long it took (the daemon's metrics).
  std::function<void(const HttpRequest&, const HttpResponse&, std::chrono::nanoseconds)> observe;
  // The Prometheus text for --metrics-addr.
  std::function<std::string()> metrics_text;
  // Each reload tick, after the TLS files were checked: what changed and why it failed.
  std::function<void(TlsFiles::Change, const std::string& error, const TlsFiles&)> tls_checked;
  // Each reload tick, for the daemon's own files (the webhook's config).
  std::function<void()> reload_tick;
};

class DaemonShell {
 public:
  // Loads the TLS pair and binds both listeners; any failure is returned with the flag it
  // concerns, and nothing is left running. `why_https` completes "the TLS pair is required (...)".
  static Result<std::unique_ptr<DaemonShell>> Start(const ShellOptions& options,
                                                    HttpsServerOptions limits, ShellHooks hooks,
                                                    const std::string& why_https);
  ~DaemonShell();
  DaemonShell(const DaemonShell&) = delete;
  DaemonShell& operator=(const DaemonShell&) = delete;

  int port() const;
  int metrics_port() const;  // 0 without --metrics-addr
  const TlsFiles& tls() const;
  // Checks the watched files once now instead of waiting for the next tick (tests).
  void ReloadNow();
  // Serves until Stop().
  void Run();
  // Idempotent; the reload loop and the listeners stop.
  void Stop();

 private:
  struct Impl;
  explicit DaemonShell(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The shell's flags, declared once for every daemon: --listen, --tls-cert-file, --tls-key-file,
// --client-ca-file, --metrics-addr. `caller` names who presents a client certificate.
void AddShellFlags(CLI::App& app, ShellOptions& options, const std::string& caller);

// main()'s end: SIGINT and SIGTERM are taken by a thread with sigwait (so `stop` never runs in a
// signal handler), SIGPIPE is ignored, `run` serves until `stop` returns it. Call before any
// other thread starts, so every thread inherits the blocked signals.
class SignalScope {
 public:
  SignalScope();
  // Runs `run` until a signal calls `stop` (or `run` returns by itself).
  int Serve(const std::function<void()>& run, const std::function<void()>& stop);
};

}  // namespace kvgpu::https
