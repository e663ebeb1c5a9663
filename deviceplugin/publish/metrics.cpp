#include "deviceplugin/publish/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <mutex>

#include "common/host_port.h"
#include "https/metrics_listener.h"

namespace kvgpu::deviceplugin {

namespace {
// Create/remove take about 0.6 ms under emulation and can take seconds on a loaded driver.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

double Seconds(std::chrono::nanoseconds took) {
  return std::chrono::duration<double>(took).count();
}
}  // namespace

namespace detail {
struct HealthState {
  std::mutex mutex;
  std::function<bool()> check;  // guarded by mutex
};
}  // namespace detail

struct Metrics::Families {
  prometheus::Family<prometheus::Gauge>& devices;
  prometheus::Family<prometheus::Counter>& allocations;
  prometheus::Family<prometheus::Counter>& failures;
  prometheus::Family<prometheus::Histogram>& allocate_seconds;
  prometheus::Family<prometheus::Histogram>& create_seconds;
  prometheus::Family<prometheus::Histogram>& remove_seconds;
  prometheus::Family<prometheus::Counter>& registrations;
  prometheus::Family<prometheus::Histogram>& push_seconds;
  prometheus::Family<prometheus::Counter>& state_publications;
  prometheus::Gauge& state_generation;
  prometheus::Family<prometheus::Gauge>& backend_connected;
  prometheus::Family<prometheus::Counter>& backend_reconnects;
  prometheus::Family<prometheus::Histogram>& dra_claim_seconds;
  prometheus::Gauge& dra_prepared_claims;
  prometheus::Family<prometheus::Counter>& dra_slice_passes;
  prometheus::Gauge& dra_pool_generation;
  prometheus::Gauge& dra_compatibility_groups;
  prometheus::Family<prometheus::Counter>& dra_verdicts;
  prometheus::Gauge& dra_metadata_enabled;
  prometheus::Counter& dra_metadata_writes;
  prometheus::Counter& dra_metadata_write_errors;
  prometheus::Histogram& dra_metadata_write_seconds;
  prometheus::Gauge& dra_metadata_files;
  prometheus::Family<prometheus::Gauge>& gpu_info;
  prometheus::Family<prometheus::Gauge>& gpu_vgpus;
  prometheus::Family<prometheus::Gauge>& gpu_free;
  std::mutex mutex;  // Family::Add is thread-safe, but keeps Histogram bucket args together
  // The per-GPU series set by the last OnGpus, by family (guarded by gpus_mutex).
  std::mutex gpus_mutex;
  std::map<prometheus::Labels, prometheus::Gauge*> gpu_info_now, gpu_vgpus_now, gpu_free_now;
  // Per GPU, the resources (and their types) it has offered since start: a lock withdraws the
  // other types from the GPU's list, and their series then say 0 rather than vanish.
  std::map<std::string, std::map<std::string, std::string>> gpu_resources_seen;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      health_(std::make_shared<detail::HealthState>()) {
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
          .Name("kvgpu_deviceplugin_allocate_seconds")
          .Help("Allocate calls, from kubelet's request to the answer (removals waited for, "
                "creates, the CDI spec), by resource and result")
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
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_state_publications_total")
          .Help("Writes of the node's vGPU state to its Node for the scheduler extender, by result")
          .Register(reg),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_state_generation")
          .Help("Generation of the node's vGPU state last written to its Node")
          .Register(reg)
          .Add({}),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_backend_connected")
          .Help("1 while the vGPU backend (label backend: sysfs, libvirt) is reachable, else 0")
          .Register(reg),
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_backend_reconnects_total")
          .Help("Connections to the vGPU backend regained after a loss (libvirt)")
          .Register(reg),
      prometheus::BuildHistogram()
          .Name("kvgpu_deviceplugin_dra_claim_seconds")
          .Help("One claim through kubelet's NodePrepareResources or NodeUnprepareResources, by "
                "call (prepare, unprepare) and result; the kernel's create and remove included")
          .Register(reg),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_dra_prepared_claims")
          .Help("ResourceClaims prepared on this node (the DRA claim checkpoint)")
          .Register(reg)
          .Add({}),
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_dra_slice_passes_total")
          .Help("Passes of the ResourceSlice publisher, by result (written, unchanged, error)")
          .Register(reg),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_dra_pool_generation")
          .Help("Generation of the node's ResourceSlice pool last written")
          .Register(reg)
          .Add({}),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_dra_compatibility_groups")
          .Help("1 while the node's ResourceSlice devices declare compatibility groups (the API "
                "server keeps them, KEP-5963), 0 otherwise")
          .Register(reg)
          .Add({}),
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_dra_occupancy_verdicts_total")
          .Help("Occupancy verdicts written to allocated claims' devices (binding conditions), by "
                "verdict (confirmed, conflict)")
          .Register(reg),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_dra_metadata_feature_enabled")
          .Help("1 when DRA device metadata (KEP-5304) is written for new prepares")
          .Register(reg)
          .Add({}),
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_dra_metadata_writes_total")
          .Help("Device-metadata files written (one per claim request, with its CDI spec)")
          .Register(reg)
          .Add({}),
      prometheus::BuildCounter()
          .Name("kvgpu_deviceplugin_dra_metadata_write_errors_total")
          .Help("Claims whose device metadata could not be written (the prepare failed)")
          .Register(reg)
          .Add({}),
      prometheus::BuildHistogram()
          .Name("kvgpu_deviceplugin_dra_metadata_write_duration_seconds")
          .Help("Writing one claim's device-metadata files and CDI specs")
          .Register(reg)
          .Add({}, kLatencyBuckets),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_dra_metadata_files_active")
          .Help("Device-metadata files the prepared claims hold")
          .Register(reg)
          .Add({}),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_gpu_info")
          .Help("1 per GPU of the device plugin, labelled with its occupancy mode (strict, "
                "equal-size, mixed-size, mig), the type its vGPUs lock it to (locked_type, empty "
                "while it carries none) and the lock key")
          .Register(reg),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_gpu_vgpus")
          .Help("vGPUs on a GPU, by resource and vGPU type")
          .Register(reg),
      prometheus::BuildGauge()
          .Name("kvgpu_deviceplugin_gpu_free_vgpus")
          .Help("vGPUs of a resource a GPU can still create now (0 where its lock or room "
                "forbids one)")
          .Register(reg),
      {},
      {},
      {},
      {},
      {},
      {}});
}

Metrics::~Metrics() {
  listener_.reset();  // no request runs past this
}

Status Metrics::Serve(const std::string& host_port) {
  Result<HostPort> at = ParseHostPort(host_port);
  if (!at.ok())
    return Status::Error(ErrorCode::kInvalid, "metrics endpoint: " + at.status().message());
  https::MetricsListener::Options options;
  // Without a check, 200 as long as the endpoint answers; the check itself is quick (metrics.h).
  options.health = [health = health_] {
    std::function<bool()> check;
    {
      std::lock_guard lock(health->mutex);
      check = health->check;
    }
    return !check || check();
  };
  auto listener = https::MetricsListener::Start(
      at->host, at->port,
      [registry = registry_] {
        return prometheus::TextSerializer().Serialize(registry->Collect());
      },
      options);
  if (!listener.ok()) {
    return Status::Error(ErrorCode::kIo, "metrics endpoint " + host_port +
                                             " not served: " + listener.status().message());
  }
  listener_ = std::move(*listener);
  return Status::Ok();
}

void Metrics::SetHealthCheck(std::function<bool()> check) {
  std::lock_guard lock(health_->mutex);
  health_->check = std::move(check);
}

std::vector<int> Metrics::Ports() const {
  return listener_ ? std::vector<int>{listener_->port()} : std::vector<int>{};
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

void Metrics::OnAllocation(const std::string& resource, const Status& result,
                           std::chrono::nanoseconds took) {
  std::lock_guard lock(families_->mutex);
  families_->allocate_seconds
      .Add({{"resource", resource}, {"result", result.ok() ? "ok" : "error"}}, kLatencyBuckets)
      .Observe(Seconds(took));
  if (result.ok()) {
    families_->allocations.Add({{"resource", resource}}).Increment();
  } else {
    families_->failures.Add({{"resource", resource}, {"reason", ErrorCodeName(result.code())}})
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

void Metrics::OnStatePublished(bool ok, uint64_t generation) {
  families_->state_publications.Add({{"result", ok ? "ok" : "error"}}).Increment();
  if (ok) families_->state_generation.Set(static_cast<double>(generation));
}

void Metrics::OnBackend(const std::string& backend, const mdev::BackendHealth& health) {
  families_->backend_connected.Add({{"backend", backend}}).Set(health.connected ? 1 : 0);
  // The backend counts since the daemon's start; the counter follows it (one caller: the rescan).
  prometheus::Counter& reconnects = families_->backend_reconnects.Add({{"backend", backend}});
  const double since_start = static_cast<double>(health.reconnects);
  if (since_start > reconnects.Value()) reconnects.Increment(since_start - reconnects.Value());
}

namespace {
// Sets `family` to exactly `values`: the children of `now` not in it are removed.
void SetExactly(prometheus::Family<prometheus::Gauge>& family,
                std::map<prometheus::Labels, prometheus::Gauge*>& now,
                const std::map<prometheus::Labels, double>& values) {
  for (auto it = now.begin(); it != now.end();) {
    if (values.contains(it->first)) {
      ++it;
    } else {
      family.Remove(it->second);
      it = now.erase(it);
    }
  }
  for (const auto& [labels, value] : values) {
    auto [it, added] = now.try_emplace(labels, nullptr);
    if (added) it->second = &family.Add(labels);
    it->second->Set(value);
  }
}
}  // namespace

void Metrics::OnGpus(const std::vector<scheduling::GpuSlots>& gpus) {
  std::lock_guard lock(families_->gpus_mutex);
  auto& seen = families_->gpu_resources_seen;
  std::map<std::string, std::map<std::string, std::string>> still;  // GPUs present now
  std::map<prometheus::Labels, double> info, vgpus, free;
  for (const auto& gpu : gpus) {
    info[{{"gpu", gpu.id},
          {"occupancy", scheduling::OccupancyName(gpu.occupancy)},
          {"locked_type", gpu.locked_type},
          {"lock", gpu.lock}}] = 1;
    auto& offered = still[gpu.id];
    offered = seen[gpu.id];
    for (const auto& [resource, slots] : gpu.resources) offered[resource] = slots.type_id;
    for (const auto& [resource, type] : offered) {
      const prometheus::Labels labels = {{"gpu", gpu.id}, {"resource", resource}, {"type", type}};
      const auto slots = gpu.resources.find(resource);
      vgpus[labels] = slots == gpu.resources.end() ? 0 : slots->second.used;
      free[labels] = slots == gpu.resources.end() ? 0 : slots->second.free;
    }
  }
  seen = std::move(still);
  SetExactly(families_->gpu_info, families_->gpu_info_now, info);
  SetExactly(families_->gpu_vgpus, families_->gpu_vgpus_now, vgpus);
  SetExactly(families_->gpu_free, families_->gpu_free_now, free);
}

void Metrics::OnDraClaim(const std::string& call, std::chrono::nanoseconds took, bool ok,
                         size_t prepared_claims) {
  {
    std::lock_guard lock(families_->mutex);
    families_->dra_claim_seconds
        .Add({{"call", call}, {"result", ok ? "ok" : "error"}}, kLatencyBuckets)
        .Observe(Seconds(took));
  }
  families_->dra_prepared_claims.Set(static_cast<double>(prepared_claims));
}

void Metrics::OnDraSlices(bool ok, bool wrote, int64_t generation, bool compatibility_groups) {
  families_->dra_slice_passes.Add({{"result", !ok     ? "error"
                                              : wrote ? "written"
                                                      : "unchanged"}})
      .Increment();
  if (ok && wrote) families_->dra_pool_generation.Set(static_cast<double>(generation));
  if (ok) families_->dra_compatibility_groups.Set(compatibility_groups ? 1 : 0);
}

void Metrics::SetDraMetadataEnabled(bool enabled) {
  families_->dra_metadata_enabled.Set(enabled ? 1 : 0);
}

void Metrics::OnDraMetadataWrite(bool ok, std::chrono::nanoseconds took, size_t files) {
  if (ok) {
    families_->dra_metadata_writes.Increment(static_cast<double>(files));
  } else {
    families_->dra_metadata_write_errors.Increment();
  }
  families_->dra_metadata_write_seconds.Observe(Seconds(took));
}

void Metrics::SetDraMetadataFiles(size_t files) {
  families_->dra_metadata_files.Set(static_cast<double>(files));
}

void Metrics::OnDraVerdict(bool confirmed) {
  families_->dra_verdicts.Add({{"verdict", confirmed ? "confirmed" : "conflict"}}).Increment();
}

std::string Metrics::Render() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry_->Collect());
}

}  // namespace kvgpu::deviceplugin
