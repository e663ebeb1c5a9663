// kvgpu-scheduler-extender: kube-scheduler's extender for vGPU pods (docs/scheduler-extender.md).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "common/duration.h"
#include "extender/service.h"
#include "https/daemon_shell.h"

int main(int argc, char** argv) {
  kvgpu::https::SignalScope signals;
  kvgpu::extender::ServiceOptions options;
  std::string policy = "pack";
  std::string max_age = "10m";
  CLI::App app{"kvgpu-scheduler-extender: places vGPU pods where their GPUs can take them"};
  kvgpu::https::AddShellFlags(app, options, "kube-scheduler");
  app.add_option("--kubeconfig", options.kubeconfig,
                 "kubeconfig for the API server (default: in-cluster)");
  app.add_option("--resource-prefix", options.extender.resource_prefix,
                 "extended resources this extender places")
      ->capture_default_str();
  app.add_option("--policy", policy, "pack: fill nodes a type holds; spread: most free GPUs")
      ->check(CLI::IsMember({"pack", "spread"}))
      ->capture_default_str();
  app.add_option("--max-state-age", max_age,
                 "a node whose vGPU state is older is failed (beyond the plugins' heartbeat)")
      ->capture_default_str();
  app.add_flag("--bind", options.bind, "serve the bind verb (bindVerb in the scheduler config)");
  app.add_option("--scheduler-config", options.scheduler_config,
                 "kube-scheduler's configuration: report nodes advertising a vGPU resource its "
                 "managedResources leaves out");
  app.add_option("--workers", options.worker_threads, "event loops serving HTTPS")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("kvgpu-scheduler-extender"));
  options.extender.fit.policy = *kvgpu::scheduling::ParsePolicy(policy);
  auto age = kvgpu::ParseDuration(max_age);
  if (!age.ok()) {
    spdlog::error("--max-state-age: {}", age.status().message());
    return 1;
  }
  options.extender.fit.max_state_age = *age;

  auto service = kvgpu::extender::Service::Create(options);
  if (!service.ok()) {
    spdlog::error("{}", service.status().message());
    return 1;
  }
  return signals.Serve([&] { (*service)->Run(); }, [&] { (*service)->Stop(); });
}
