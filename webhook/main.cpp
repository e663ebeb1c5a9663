// kvgpu-webhook: the mutating admission webhook that sets up vGPU pods for Kata.
#include <malloc.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <thread>

#include "webhook/cpus.h"
#include "webhook/server.h"

int main(int argc, char** argv) {
  kvgpu::webhook::ServerOptions options;
  CLI::App app{"kvgpu-webhook: mutating admission webhook giving Kata pods their vGPU setup"};
  app.add_option("--listen", options.listen, "HTTPS address HOST:PORT")->capture_default_str();
  app.add_option("--tls-cert-file", options.tls_cert_file,
                 "PEM certificate (chain), reloaded on change")
      ->required();
  app.add_option("--tls-key-file", options.tls_key_file, "PEM private key, reloaded on change")
      ->required();
  app.add_option("--client-ca-file", options.client_ca_file,
                 "PEM CA bundle; when set, clients must present a certificate it signed");
  app.add_option("--config", options.config_file, "YAML config, reloaded on change");
  app.add_option("--metrics-addr", options.metrics_addr, "plain-HTTP Prometheus address HOST:PORT");
  size_t workers = 0;
  app.add_option("--workers", workers,
                 "event loops serving HTTPS; 0 = one per CPU this process may run on")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  options.worker_threads = workers != 0 ? workers : kvgpu::webhook::UsableCpus();
  spdlog::set_default_logger(spdlog::stderr_color_mt("kvgpu-webhook"));

  // Many short-lived connection threads would otherwise each grow their own malloc arena.
  mallopt(M_ARENA_MAX, 2);

  // Signals are taken by a thread with sigwait, so Stop() never runs in a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = kvgpu::webhook::Server::Create(options);
  if (!server.ok()) {
    spdlog::error("{}", server.status().message());
    return 1;
  }
  std::thread waiter([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    spdlog::info("signal {}: stopping", signal_number);
    server.value()->Stop();
  });
  server.value()->Run();
  // Run() returns once stopped; wake the waiter in case it was not a signal that stopped it.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return 0;
}
