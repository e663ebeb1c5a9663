// Kubernetes Events on a pod ("vGPU created", "vGPU removed", failures), so `kubectl describe
// pod` tells the user what happened to their device.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "kube/api_client.h"
#include "kube/result.h"

namespace kvgpu::kube {

struct PodRef {
  std::string namespace_name;
  std::string name;
  std::string uid;
};

enum class EventType { kNormal, kWarning };

// What the lifecycle code depends on; tests record events without HTTP.
class EventRecorder {
 public:
  virtual ~EventRecorder() = default;
  // `reason` is short CamelCase (VgpuCreated); `message` is for humans.
  virtual Error Record(const PodRef& pod, EventType type, const std::string& reason,
                       const std::string& message) = 0;
};

// The core/v1 Event as the API takes it; `now` makes the timestamps and the name.
nlohmann::json BuildEvent(const PodRef& pod, EventType type, const std::string& reason,
                          const std::string& message, const std::string& component,
                          const std::string& host, std::chrono::system_clock::time_point now);

// POSTs each event to /api/v1/namespaces/<pod namespace>/events.
class ApiEventRecorder : public EventRecorder {
 public:
  // `component` and `host` fill source/reportingController/reportingInstance.
  ApiEventRecorder(ApiTransport& transport, std::string component, std::string host);
  Error Record(const PodRef& pod, EventType type, const std::string& reason,
               const std::string& message) override;

 private:
  ApiTransport& transport_;
  std::string component_;
  std::string host_;
};

}  // namespace kvgpu::kube
