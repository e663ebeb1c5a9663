#include "validator/record.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "common/host_port.h"
#include "https/metrics_listener.h"
#include "kube/events.h"
#include "kube/node.h"

namespace kvgpu::validator {

kube::NodeCondition ConditionFor(const Outcome& outcome) {
  if (outcome.validated()) {
    std::string message = "a Kata pod ran nvidia-smi, was licensed and passed the CUDA sample";
    for (const auto& step : outcome.steps) {
      if (step.step == Step::kDriver || step.step == Step::kLicence) message += "; " + step.message;
    }
    return {kConditionType, "True", "Validated", message, ""};
  }
  const StepResult* failed = outcome.failed();
  if (failed == nullptr) {
    return {kConditionType, "False", "Incomplete", "the run ended before its last step", ""};
  }
  return {kConditionType, "False", StepReason(failed->step),
          std::string("step ") + StepName(failed->step) + " failed: " + failed->message, ""};
}

Status RecordOnNode(kube::ApiTransport& api, const std::string& node, const Outcome& outcome) {
  const kube::NodeCondition condition = ConditionFor(outcome);
  Status first;
  auto keep = [&first](Status status) {
    if (first.ok() && !status.ok()) first = std::move(status);
  };
  auto current = kube::GetNode(api, node);
  if (current.ok()) {
    keep(kube::SetNodeCondition(api, *current, condition, std::chrono::system_clock::now()));
  } else {
    keep(current.status());
  }
  keep(kube::SetNodeLabel(api, node, kValidatedLabel, outcome.validated() ? "true" : "false"));
  kube::ApiEventRecorder events(api, "kvgpu-validator", node);
  keep(events.Record(kube::ObjectRef::Node(node),
                     outcome.validated() ? kube::EventType::kNormal : kube::EventType::kWarning,
                     outcome.validated() ? "KataVgpuValidated" : "KataVgpuValidationFailed",
                     condition.message));
  return first;
}

struct Metrics::Families {
  prometheus::Family<prometheus::Gauge>* step_result;
  prometheus::Family<prometheus::Gauge>* step_duration;
  prometheus::Gauge* validated;
  prometheus::Gauge* last_run;
  prometheus::Family<prometheus::Counter>* runs;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()), families_(std::make_unique<Families>()) {
  families_->step_result = &prometheus::BuildGauge()
                                .Name("kvgpu_validator_step_result")
                                .Help("Last run's result per step: 1 passed, 0 failed, -1 not run")
                                .Register(*registry_);
  families_->step_duration = &prometheus::BuildGauge()
                                  .Name("kvgpu_validator_step_duration_seconds")
                                  .Help("How long each step of the last run took")
                                  .Register(*registry_);
  families_->validated = &prometheus::BuildGauge()
                              .Name("kvgpu_validator_validated")
                              .Help("1 when the last run validated the node, else 0")
                              .Register(*registry_)
                              .Add({});
  families_->last_run = &prometheus::BuildGauge()
                             .Name("kvgpu_validator_last_run_timestamp_seconds")
                             .Help("When the last run ended (Unix time)")
                             .Register(*registry_)
                             .Add({});
  families_->runs = &prometheus::BuildCounter()
                         .Name("kvgpu_validator_runs_total")
                         .Help("Runs by result (validated true or false)")
                         .Register(*registry_);
}

Metrics::~Metrics() = default;

void Metrics::Observe(const Outcome& outcome, std::chrono::system_clock::time_point when) {
  for (const Step step : kSteps) {
    families_->step_result->Add({{"step", StepName(step)}}).Set(-1);
    families_->step_duration->Add({{"step", StepName(step)}}).Set(0);
  }
  for (const auto& step : outcome.steps) {
    families_->step_result->Add({{"step", StepName(step.step)}}).Set(step.ok ? 1 : 0);
    families_->step_duration->Add({{"step", StepName(step.step)}})
        .Set(std::chrono::duration<double>(step.took).count());
  }
  families_->validated->Set(outcome.validated() ? 1 : 0);
  families_->last_run->Set(std::chrono::duration<double>(when.time_since_epoch()).count());
  families_->runs->Add({{"result", outcome.validated() ? "true" : "false"}}).Increment();
}

Status Metrics::Serve(const std::string& host_port) {
  Result<HostPort> at = ParseHostPort(host_port);
  if (!at.ok())
    return Status::Error(ErrorCode::kConfig, "--metrics-addr: " + at.status().message());
  // The listener the other daemons use: asynchronous, so an idle connection never holds a scrape.
  auto listener = https::MetricsListener::Start(
      at->host, at->port,
      [registry = registry_] {
        return prometheus::TextSerializer().Serialize(registry->Collect());
      },
      {});
  if (!listener.ok()) {
    return Status::Error(ErrorCode::kConfig, "cannot serve metrics at " + host_port + ": " +
                                                 listener.status().message());
  }
  listener_ = std::move(*listener);
  return Status();
}

std::string Metrics::Render() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

Status Metrics::WriteFile(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << Render();
    if (!out.flush()) return Status::FromErrno(errno, "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::FromErrno(errno, "cannot rename " + tmp + " to " + path);
  }
  return Status();
}

}  // namespace kvgpu::validator
