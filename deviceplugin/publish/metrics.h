// Prometheus metrics (prometheus-cpp), served at --metrics-addr on /metrics, with GET /healthz
// on the same address for the deployment's probes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "deviceplugin/model/resource_manager.h"
#include "mdev/backend.h"
#include "scheduling/gpu_fit.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace kvgpu::https {
class MetricsListener;
}  // namespace kvgpu::https

namespace kvgpu::deviceplugin {

namespace detail {
struct HealthState;  // what /healthz asks
}  // namespace detail

class Metrics : public ManagerObserver {
 public:
  Metrics();
  ~Metrics() override;

  // Starts the HTTP endpoint; a busy or malformed address is an error.
  Status Serve(const std::string& host_port);
  // What GET /healthz answers: 200 "ok" while `check` returns true, 503 otherwise; without a
  // check, 200 as long as the endpoint answers. Called on the HTTP listener's one thread, so it
  // must be quick and thread-safe. May be set before or after Serve.
  void SetHealthCheck(std::function<bool()> check);
  // Ports the endpoint listens on (resolves port 0); empty when not serving.
  std::vector<int> Ports() const;

  void OnVgpuCreated(const std::string& resource, std::chrono::nanoseconds took, bool ok) override;
  void OnVgpuRemoved(const std::string& resource, std::chrono::nanoseconds took, bool ok) override;
  void OnAllocation(const std::string& resource, const Status& result,
                    std::chrono::nanoseconds took) override;
  void OnDevices(const std::map<std::string, DeviceCounts>& per_resource) override;
  void OnRegistration(const std::string& resource, bool ok);
  void OnPush(const std::string& resource, std::chrono::nanoseconds took);
  // The node's vGPU state written to its Node (ok), or not; the generation it carries.
  void OnStatePublished(bool ok, uint64_t generation);
  // After each rescan: whether the backend is reachable, and how often it came back.
  void OnBackend(const std::string& backend, const mdev::BackendHealth& health);
  // After each rescan, the device plugin's GPUs as the placement rule sees them (the scheduler
  // state's): per GPU its occupancy mode and lock (kvgpu_deviceplugin_gpu_info), and per GPU and
  // resource the vGPUs on it and the room left (kvgpu_deviceplugin_gpu_vgpus,
  // kvgpu_deviceplugin_gpu_free_vgpus). Series of a GPU gone or a lock changed are removed.
  void OnGpus(const std::vector<scheduling::GpuSlots>& gpus);

  // DRA (docs/dra-kubelet-plugin.md): one claim through NodePrepareResources or
  // NodeUnprepareResources (`call` "prepare" / "unprepare"), and the claims prepared after it.
  void OnDraClaim(const std::string& call, std::chrono::nanoseconds took, bool ok,
                  size_t prepared_claims);
  // A pass of the ResourceSlice publisher: failed, wrote the pool at `generation`, or unchanged.
  void OnDraSlices(bool ok, bool wrote, int64_t generation, bool compatibility_groups = false);
  // An occupancy verdict written to a claim's device (binding conditions): confirmed or conflict.
  void OnDraVerdict(bool confirmed);
  // DRA device metadata (KEP-5304's metrics): the feature on, one claim's files written or not,
  // and how many files the prepared claims hold now.
  void SetDraMetadataEnabled(bool enabled);
  void OnDraMetadataWrite(bool ok, std::chrono::nanoseconds took, size_t files);
  void SetDraMetadataFiles(size_t files);

  // Text exposition of everything, for tests.
  std::string Render() const;
  // Where other parts of the daemon (the lifecycle) add their families.
  prometheus::Registry& registry() { return *registry_; }

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<detail::HealthState> health_;
  std::unique_ptr<Families> families_;
  std::unique_ptr<https::MetricsListener> listener_;
};

}  // namespace kvgpu::deviceplugin
