// What each kubelet front end tells the daemon's metrics (publish/metrics.h): the observers the
// daemon hands a front end, with the metrics' part filled in. The daemon adds its own (rescans,
// kubelet restarts, the heartbeat).
#pragma once

#include "deviceplugin/dra/dra_front_end.h"
#include "deviceplugin/kubelet/device_plugin_front_end.h"
#include "deviceplugin/publish/metrics.h"

namespace kvgpu::deviceplugin {

// Pushes (also told to `on_push` when set, for benchmarks) and registration attempts.
DevicePluginObservers DevicePluginMetrics(Metrics& metrics,
                                          decltype(DevicePluginObservers::on_push) on_push);

// The DRA model's creations, claims, slice passes, occupancy verdicts and metadata writes.
dra::DraObservers DraMetrics(Metrics& metrics);

}  // namespace kvgpu::deviceplugin
