#include "deviceplugin/front_end_metrics.h"

#include <string>
#include <utility>

namespace kvgpu::deviceplugin {

DevicePluginObservers DevicePluginMetrics(Metrics& metrics,
                                          decltype(DevicePluginObservers::on_push) on_push) {
  return DevicePluginObservers{
      .on_push =
          [&metrics, on_push = std::move(on_push)](const std::string& resource,
                                                   std::chrono::nanoseconds took) {
            metrics.OnPush(resource, took);
            if (on_push) on_push(resource, took);
          },
      .on_registration = [&metrics](const std::string& resource,
                                    bool ok) { metrics.OnRegistration(resource, ok); },
      .kubelet_restarted = nullptr,
      .on_turn = nullptr};
}

dra::DraObservers DraMetrics(Metrics& metrics) {
  return dra::DraObservers{
      .model = &metrics,
      .request_rescan = nullptr,
      .on_claim =
          [&metrics](dra::DraCall call, std::chrono::nanoseconds took, bool ok, size_t claims,
                     size_t metadata_files) {
            metrics.OnDraClaim(dra::DraCallName(call), took, ok, claims);
            metrics.SetDraMetadataFiles(metadata_files);
          },
      .on_slices = [&metrics](bool ok, bool wrote, int64_t generation,
                              bool groups) { metrics.OnDraSlices(ok, wrote, generation, groups); },
      .on_verdict =
          [&metrics](dra::Verdict verdict) {
            metrics.OnDraVerdict(verdict == dra::Verdict::kConfirmed);
          },
      .on_metadata_write = [&metrics](
                               bool ok, std::chrono::nanoseconds took,
                               size_t files) { metrics.OnDraMetadataWrite(ok, took, files); }};
}

}  // namespace kvgpu::deviceplugin
