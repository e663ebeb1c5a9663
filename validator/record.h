// Where a validation's result goes: the Node (condition KataVgpuValidated, label
// kata-vgpu.io/validated), an Event on the Node, and the kvgpu_validator_* metrics.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "kube/api_client.h"
#include "validator/validator.h"

namespace kvgpu::https {
class MetricsListener;
}  // namespace kvgpu::https

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace kvgpu::validator {

inline constexpr const char* kConditionType = "KataVgpuValidated";
inline constexpr const char* kValidatedLabel = "kata-vgpu.io/validated";

// The condition the outcome sets: True/Validated, or False with the failing step as reason and
// what it saw as message.
kube::NodeCondition ConditionFor(const Outcome& outcome);

// Condition, label and Event; the first error, after trying all three.
Status RecordOnNode(kube::ApiTransport& api, const std::string& node, const Outcome& outcome);

class Metrics {
 public:
  Metrics();
  ~Metrics();
  // kvgpu_validator_step_result{step} (1 passed, 0 failed, -1 not run this time),
  // kvgpu_validator_step_duration_seconds{step}, kvgpu_validator_validated,
  // kvgpu_validator_runs_total{result}, kvgpu_validator_last_run_timestamp_seconds.
  void Observe(const Outcome& outcome, std::chrono::system_clock::time_point when);
  // Serves /metrics at `host_port` ("0.0.0.0:9403").
  Status Serve(const std::string& host_port);
  std::string Render() const;
  // Writes Render() to `path` through a temp file and rename, for node-exporter's textfile
  // collector, which must never read half a file.
  Status WriteFile(const std::string& path) const;

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  std::unique_ptr<https::MetricsListener> listener_;
};

}  // namespace kvgpu::validator
