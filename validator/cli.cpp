#include "validator/cli.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <thread>

#include "common/duration.h"
#include "kube/config.h"
#include "validator/record.h"
#include "validator/validator.h"

namespace kvgpu::validator {

namespace {

constexpr int kNotValidated = 1;
constexpr int kUsage = 2;

struct Flags {
  ValidatorOptions options;
  std::string kubeconfig;
  std::string metrics_addr;
  std::string metrics_file;
  std::map<std::string, std::string> durations = {
      {"--doctor-timeout", "30s"},  {"--schedule-timeout", "60s"}, {"--attach-timeout", "180s"},
      {"--driver-timeout", "60s"},  {"--licence-timeout", "120s"}, {"--cuda-timeout", "60s"},
      {"--cleanup-timeout", "60s"}, {"--poll-interval", "1s"},     {"--licence-interval", "10s"},
      {"--interval", "0s"}};
};

void AddFlags(CLI::App& app, Flags& f) {
  auto& o = f.options;
  const char* node = std::getenv("NODE_NAME");
  if (node != nullptr) o.node = node;
  app.add_option("--node-name", o.node, "the node to validate (default: $NODE_NAME)");
  app.add_option("--namespace", o.namespace_name, "where the probe pod runs")
      ->capture_default_str();
  app.add_option("--kubeconfig", f.kubeconfig, "kubeconfig file (default: in-cluster)");
  app.add_option("--image", o.image, "the probe pod's image: nvidia-smi and the CUDA sample")
      ->capture_default_str();
  app.add_option("--cuda-sample", o.guest.cuda_sample, "the CUDA sample in the image")
      ->capture_default_str();
  app.add_option("--nvidia-smi", o.guest.nvidia_smi, "nvidia-smi in the guest")
      ->capture_default_str();
  app.add_option("--vgpuctl", o.vgpuctl, "the vgpuctl program")->capture_default_str();
  app.add_option("--host-root", o.host_root, "the node's / (read-only), for the doctor")
      ->capture_default_str();
  app.add_option("--sysfs-root", o.sysfs_root,
                 "root of the sysfs vgpuctl lists vGPUs under (default: --host-root)");
  app.add_option("--state-file", o.state_file, "the device plugin's state file")
      ->capture_default_str();
  app.add_option("--metrics-addr", f.metrics_addr, "serve /metrics here (host:port)");
  app.add_option("--metrics-file", f.metrics_file,
                 "write the metrics here after each run (node-exporter textfile collector)");
  for (auto& [flag, value] : f.durations) {
    app.add_option(flag, value, "a duration: 500ms, 30s, 2m")->capture_default_str();
  }
}

// The durations as parsed; a bad one is an error naming its flag.
Status ParseDurations(Flags& f, std::chrono::milliseconds* interval) {
  auto& t = f.options.timeouts;
  const std::map<std::string, std::chrono::milliseconds*> targets = {
      {"--doctor-timeout", &t.doctor},
      {"--schedule-timeout", &t.schedule},
      {"--attach-timeout", &t.attach},
      {"--driver-timeout", &t.driver},
      {"--licence-timeout", &t.licence},
      {"--cuda-timeout", &t.cuda},
      {"--cleanup-timeout", &t.cleanup},
      {"--poll-interval", &f.options.poll},
      {"--licence-interval", &f.options.guest.licence_interval},
      {"--interval", interval}};
  for (const auto& [flag, target] : targets) {
    auto parsed = ParseDuration(f.durations.at(flag));
    if (!parsed.ok())
      return Status::Error(ErrorCode::kInvalid, flag + ": " + parsed.status().message());
    *target = parsed.value();
  }
  if (f.options.poll.count() == 0 || f.options.guest.licence_interval.count() == 0) {
    return Status::Error(ErrorCode::kInvalid, "--poll-interval and --licence-interval must be > 0");
  }
  if (f.options.node.empty()) return Status::Error(ErrorCode::kInvalid, "--node-name is required");
  return Status();
}

Result<std::unique_ptr<kube::ApiClient>> Connect(const Flags& f) {
  auto config = f.kubeconfig.empty() ? kube::LoadInCluster(kube::InClusterFromEnvironment())
                                     : kube::LoadKubeconfig(f.kubeconfig);
  if (!config.ok()) return config.status();
  return kube::ApiClient::Create(config.value());
}

// One validation, its result recorded everywhere; whether the node is validated.
bool RunOnce(kube::ApiTransport& api, const Flags& f, Metrics& metrics) {
  Validator validator(api, f.options);
  const Outcome outcome = validator.Run();
  const Status recorded = RecordOnNode(api, f.options.node, outcome);
  if (!recorded.ok()) spdlog::error("validator: result not recorded: {}", recorded.ToString());
  metrics.Observe(outcome, std::chrono::system_clock::now());
  if (!f.metrics_file.empty()) {
    const Status written = metrics.WriteFile(f.metrics_file);
    if (!written.ok()) spdlog::error("validator: {}", written.ToString());
  }
  const auto condition = ConditionFor(outcome);
  spdlog::info("validator: node {} {}: {}", f.options.node,
               outcome.validated() ? "validated" : "NOT validated", condition.message);
  return outcome.validated();
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{
      "kvgpu-validator: proves a vGPU works in a Kata pod on this node (docs/validator.md)"};
  Flags flags;
  AddFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  std::chrono::milliseconds interval{0};
  if (Status parsed = ParseDurations(flags, &interval); !parsed.ok()) {
    spdlog::error("validator: {}", parsed.message());
    return kUsage;
  }
  auto api = Connect(flags);
  if (!api.ok()) {
    spdlog::error("validator: no API server: {}", api.status().ToString());
    return kUsage;
  }
  Metrics metrics;
  if (!flags.metrics_addr.empty()) {
    if (Status served = metrics.Serve(flags.metrics_addr); !served.ok()) {
      spdlog::error("validator: {}", served.ToString());
      return kUsage;
    }
  }
  while (true) {
    const bool validated = RunOnce(*api.value(), flags, metrics);
    if (interval.count() == 0) return validated ? 0 : kNotValidated;
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace kvgpu::validator
