// kvgpu-webhook: the mutating admission webhook that sets up vGPU pods for Kata.
#include <malloc.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "https/daemon_shell.h"
#include "webhook/cpus.h"
#include "webhook/server.h"

int main(int argc, char** argv) {
  kvgpu::https::SignalScope signals;
  kvgpu::webhook::ServerOptions options;
  CLI::App app{"kvgpu-webhook: mutating admission webhook giving Kata pods their vGPU setup"};
  kvgpu::https::AddShellFlags(app, options, "clients");
  app.add_option("--config", options.config_file, "YAML config, reloaded on change");
  app.add_option("--kubeconfig", options.kubeconfig,
                 "API server for DRA claim lookups (resource.k8s.io ResourceClaims and "
                 "templates); default: none, claims are not looked at");
  app.add_flag("--in-cluster", options.in_cluster,
               "look DRA claims up through the pod's service account");
  size_t workers = 0;
  app.add_option("--workers", workers,
                 "event loops serving HTTPS; 0 = one per CPU this process may run on")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  options.worker_threads = workers != 0 ? workers : kvgpu::webhook::UsableCpus();
  spdlog::set_default_logger(spdlog::stderr_color_mt("kvgpu-webhook"));

  // Many short-lived connection threads would otherwise each grow their own malloc arena.
  mallopt(M_ARENA_MAX, 2);

  auto server = kvgpu::webhook::Server::Create(options);
  if (!server.ok()) {
    spdlog::error("{}", server.status().message());
    return 1;
  }
  return signals.Serve([&] { (*server)->Run(); }, [&] { (*server)->Stop(); });
}
