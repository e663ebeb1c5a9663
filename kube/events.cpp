#include "kube/events.h"

#include <fmt/format.h>

#include <ctime>

namespace kvgpu::kube {

namespace {

std::string Rfc3339(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

nlohmann::json BuildEvent(const PodRef& pod, EventType type, const std::string& reason,
                          const std::string& message, const std::string& component,
                          const std::string& host, std::chrono::system_clock::time_point now) {
  const auto nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::string stamp = Rfc3339(now);
  // Named like client-go's recorder names them: the object's name and a unique hex suffix.
  return {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata",
       {{"name", fmt::format("{}.{:x}", pod.name, nanos)}, {"namespace", pod.namespace_name}}},
      {"involvedObject",
       {{"apiVersion", "v1"},
        {"kind", "Pod"},
        {"namespace", pod.namespace_name},
        {"name", pod.name},
        {"uid", pod.uid}}},
      {"reason", reason},
      {"message", message},
      {"type", type == EventType::kWarning ? "Warning" : "Normal"},
      {"source", {{"component", component}, {"host", host}}},
      {"firstTimestamp", stamp},
      {"lastTimestamp", stamp},
      {"count", 1},
      {"reportingComponent", component},
      {"reportingInstance", host},
  };
}

ApiEventRecorder::ApiEventRecorder(ApiTransport& transport, std::string component, std::string host)
    : transport_(transport), component_(std::move(component)), host_(std::move(host)) {}

Error ApiEventRecorder::Record(const PodRef& pod, EventType type, const std::string& reason,
                               const std::string& message) {
  if (pod.namespace_name.empty() || pod.name.empty()) {
    return Error(ErrorKind::kConfig, "an event needs the pod's namespace and name");
  }
  const auto event =
      BuildEvent(pod, type, reason, message, component_, host_, std::chrono::system_clock::now());
  auto answer = transport_.Post("/api/v1/namespaces/" + pod.namespace_name + "/events", event);
  return answer.ok() ? Error() : answer.error();
}

}  // namespace kvgpu::kube
