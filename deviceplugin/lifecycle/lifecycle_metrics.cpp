#include "deviceplugin/lifecycle/lifecycle_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace kvgpu::deviceplugin {

struct LifecycleMetrics::Families {
  prometheus::Gauge& without_pod;
  prometheus::Gauge& held;
  prometheus::Gauge& unknown;
  prometheus::Gauge& foreign;
  prometheus::Family<prometheus::Counter>& removals;
  prometheus::Family<prometheus::Gauge>& source_up;
  prometheus::Histogram& pass_seconds;
};

namespace {

prometheus::Gauge& VgpuGauge(prometheus::Family<prometheus::Gauge>& family, const char* state) {
  return family.Add({{"state", state}});
}

}  // namespace

LifecycleMetrics::LifecycleMetrics(prometheus::Registry& registry) {
  auto& vgpus = prometheus::BuildGauge()
                    .Name("kvgpu_deviceplugin_lifecycle_vgpus")
                    .Help(
                        "vGPUs by what the lifecycle knows of them: held (a live pod), "
                        "without_pod (none: removed after the grace period), unknown (kubelet "
                        "not answering), foreign (not created by this plugin; never touched)")
                    .Register(registry);
  auto& removals = prometheus::BuildCounter()
                       .Name("kvgpu_deviceplugin_lifecycle_removals_total")
                       .Help(
                           "Removals of vGPUs whose pod is gone, by resource and result "
                           "(ok, busy, error)")
                       .Register(registry);
  auto& source_up = prometheus::BuildGauge()
                        .Name("kvgpu_deviceplugin_lifecycle_source_up")
                        .Help("1 while a source of pod facts answers (podresources, apiserver)")
                        .Register(registry);
  auto& pass = prometheus::BuildHistogram()
                   .Name("kvgpu_deviceplugin_lifecycle_pass_seconds")
                   .Help("Time of one reconcile pass (kubelet asked, decisions made)")
                   .Register(registry);
  families_.reset(new Families{
      VgpuGauge(vgpus, "without_pod"), VgpuGauge(vgpus, "held"), VgpuGauge(vgpus, "unknown"),
      VgpuGauge(vgpus, "foreign"), removals, source_up,
      pass.Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                           0.025, 0.05, 0.1, 0.25, 1, 5})});
}

LifecycleMetrics::~LifecycleMetrics() = default;

void LifecycleMetrics::OnPass(const PassPlan& plan, size_t foreign, std::chrono::nanoseconds took) {
  families_->without_pod.Set(static_cast<double>(plan.waiting + plan.remove.size()));
  families_->held.Set(static_cast<double>(plan.held));
  families_->unknown.Set(static_cast<double>(plan.unknown));
  families_->foreign.Set(static_cast<double>(foreign));
  families_->pass_seconds.Observe(std::chrono::duration<double>(took).count());
}

void LifecycleMetrics::OnRemoval(const std::string& resource, const Status& result) {
  const char* outcome = result.ok()                         ? "ok"
                        : result.code() == ErrorCode::kBusy ? "busy"
                        : result.code() == ErrorCode::kGone ? "ok"
                                                            : "error";
  families_->removals.Add({{"resource", resource}, {"result", outcome}}).Increment();
}

void LifecycleMetrics::OnSources(bool kubelet, bool api) {
  families_->source_up.Add({{"source", "podresources"}}).Set(kubelet ? 1 : 0);
  families_->source_up.Add({{"source", "apiserver"}}).Set(api ? 1 : 0);
}

}  // namespace kvgpu::deviceplugin
