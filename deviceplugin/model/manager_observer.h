// Metrics and anything else that wants to watch the resource manager at work.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "deviceplugin/model/device_catalogue.h"

namespace kvgpu::deviceplugin {

// Called without locks held except OnDevices (cheap, called under the manager's lock).
class ManagerObserver {
 public:
  virtual ~ManagerObserver() = default;
  virtual void OnVgpuCreated(const std::string& /*resource*/, std::chrono::nanoseconds /*took*/,
                             bool /*ok*/) {}
  virtual void OnVgpuRemoved(const std::string& /*resource*/, std::chrono::nanoseconds /*took*/,
                             bool /*ok*/) {}
  // One Allocate call, from kubelet's request to the answer (removals waited for, creates, the
  // CDI spec), whatever its result.
  virtual void OnAllocation(const std::string& /*resource*/, const Status& /*result*/,
                            std::chrono::nanoseconds /*took*/) {}
  virtual void OnDevices(const std::map<std::string, DeviceCounts>& /*per_resource*/) {}
};

}  // namespace kvgpu::deviceplugin
