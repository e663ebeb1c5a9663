#include "deviceplugin/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <mutex>

namespace kvgpu::deviceplugin {

namespace {
// Create/remove take about 0.6 ms under emulation and can take seconds on a loaded driver.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

double Seconds(std::chrono::nanoseconds took) {
  return std::chrono::duration<double>(took).count();
}
}  // namespace

struct Metrics::Families {
  prometheus::Family<prometheus::Gauge>& devices;
  prometheus::Family<prometheus::Counter>& allocations;
  prometheus::Family<prometheus::Counter>& failures;
  prometheus::Family<prometheus::Histogram>& create_seconds;
  prometheus::Family<prometheus::Histogram>& remove_seconds;
  prometheus::Family<prometheus::Counter>& registrations;
  prometheus::Family<prometheus::Histogram>& push_seconds;
  std::mutex mutex;  // Family::Add is thread-safe, but keeps Histogram bucket args together
};

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& reg = *registry_;
  families_.reset(new Families{
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_devices")
          .Help("Devices advertised to kubelet, by resource and state "
                "(available, allocated, unhealthy)")
          .Register(reg),
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_allocations_total")
          .Help("Allocate calls that succeeded, by resource")
          .Register(reg),
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_allocation_failures_total")
          .Help("Allocate calls that failed, by resource and reason")
          .Register(reg),
      prometheus::BuildHistogram()
          .Name("kvgpu_deviceplugin_vgpu_create_seconds")
          .Help("Time the kernel took to create a vGPU (write to create until it shows)")
          .Register(reg),
      prometheus::BuildHistogram()
          .Name("kvgpu_deviceplugin_vgpu_remove_seconds")
          .Help("Time the kernel took to remove a vGPU")
          .Register(reg),
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_registrations_total")
          .Help("Registrations with kubelet, by resource and result")
          .Register(reg),
      prometheus::BuildHistogram()
          .Name("kvgpu_deviceplugin_listandwatch_push_seconds")
          .Help("From a change of the device lists to the new list written to kubelet's stream")
          .Register(reg),
      {}});
}

Metrics::~Metrics() = default;

mdev::Status Metrics::Serve(const std::string& host_port) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(host_port);
  } catch (const std::exception& e) {
    return mdev::Status::Error(mdev::ErrorCode::kIo,
                               "metrics endpoint " + host_port + " not served: " + e.what());
  }
  exposer_->RegisterCollectable(registry_);
  return mdev::Status::Ok();
}

void Metrics::OnVgpuCreated(const std::string& resource, std::chrono::nanoseconds took, bool ok) {
  std::lock_guard lock(families_->mutex);
  families_->create_seconds
      .Add({{"resource", resource}, {"result", ok ? "ok" : "error"}}, kLatencyBuckets)
      .Observe(Seconds(took));
}

void Metrics::OnVgpuRemoved(const std::string& resource, std::chrono::nanoseconds took, bool ok) {
  std::lock_guard lock(families_->mutex);
  families_->remove_seconds
      .Add({{"resource", resource}, {"result", ok ? "ok" : "error"}}, kLatencyBuckets)
      .Observe(Seconds(took));
}

void Metrics::OnAllocation(const std::string& resource, const Status& result) {
  if (result.ok()) {
    families_->allocations.Add({{"resource", resource}}).Increment();
  } else {
    families_->failures
        .Add({{"resource", resource}, {"reason", mdev::ErrorCodeName(result.code())}})
        .Increment();
  }
}

void Metrics::OnDevices(const std::map<std::string, DeviceCounts>& per_resource) {
  for (const auto& [resource, counts] : per_resource) {
    families_->devices.Add({{"resource", resource}, {"state", "available"}}).Set(counts.available);
    families_->devices.Add({{"resource", resource}, {"state", "allocated"}}).Set(counts.allocated);
    families_->devices.Add({{"resource", resource}, {"state", "unhealthy"}}).Set(counts.unhealthy);
  }
}

void Metrics::OnPush(const std::string& resource, std::chrono::nanoseconds took) {
  static const prometheus::Histogram::BucketBoundaries kPushBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1};
  std::lock_guard lock(families_->mutex);
  families_->push_seconds.Add({{"resource", resource}}, kPushBuckets).Observe(Seconds(took));
}

void Metrics::OnRegistration(const std::string& resource, bool ok) {
  families_->registrations.Add({{"resource", resource}, {"result", ok ? "ok" : "error"}})
      .Increment();
}

std::string Metrics::Render() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry_->Collect());
}

}  // namespace kvgpu::deviceplugin
