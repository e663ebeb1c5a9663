#include "kube/events.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <ctime>

namespace kvgpu::kube {

std::string Rfc3339(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

nlohmann::json BuildEvent(const PodRef& pod, EventType type, const std::string& reason,
                          const std::string& message, const std::string& component,
                          const std::string& host, std::chrono::system_clock::time_point now) {
  const auto nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::string stamp = Rfc3339(now);
  nlohmann::json involved = {
      {"apiVersion", "v1"}, {"kind", pod.kind}, {"name", pod.name}, {"uid", pod.uid}};
  if (!pod.namespace_name.empty()) involved["namespace"] = pod.namespace_name;
  // Named like client-go's recorder names them: the object's name and a unique hex suffix.
  return {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata",
       {{"name", fmt::format("{}.{:x}", pod.name, nanos)}, {"namespace", pod.EventNamespace()}}},
      {"involvedObject", involved},
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

Status ApiEventRecorder::Record(const PodRef& pod, EventType type, const std::string& reason,
                                const std::string& message) {
  if (pod.name.empty() || (pod.kind == "Pod" && pod.namespace_name.empty())) {
    return Status::Error(ErrorCode::kConfig,
                         "an event needs the object's name (and a pod's namespace)");
  }
  const auto event =
      BuildEvent(pod, type, reason, message, component_, host_, std::chrono::system_clock::now());
  auto answer =
      transport_.Post("/api/v1/namespaces/" + pod.EventNamespace() + "/events", event, &cancel_);
  return answer.ok() ? Status() : answer.status();
}

AsyncEventRecorder::AsyncEventRecorder(EventRecorder& inner, std::size_t capacity)
    : inner_(inner), capacity_(capacity == 0 ? 1 : capacity) {
  // A stop breaks the event in hand.
  worker_.Start([this](BackgroundWorker::Handle& worker) { Run(worker); },
                [this] { inner_.Cancel(); });
}

AsyncEventRecorder::~AsyncEventRecorder() {
  worker_.Stop();
}

Status AsyncEventRecorder::Record(const PodRef& pod, EventType type, const std::string& reason,
                                  const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (cancelled_) {
      ++dropped_;
      return Status();
    }
    if (queue_.size() >= capacity_) {
      queue_.pop_front();
      ++dropped_;
    }
    queue_.push_back({pod, type, reason, message});
  }
  worker_.Wake();
  return Status();
}

void AsyncEventRecorder::Flush() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && !sending_; });
}

void AsyncEventRecorder::Cancel() {
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    dropped_ += queue_.size();
    queue_.clear();
    idle_.notify_all();
  }
  inner_.Cancel();
}

bool AsyncEventRecorder::Flush(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, limit, [this] { return queue_.empty() && !sending_; });
}

std::size_t AsyncEventRecorder::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

std::size_t AsyncEventRecorder::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void AsyncEventRecorder::Run(BackgroundWorker::Handle& worker) {
  std::unique_lock lock(mutex_);
  while (true) {
    // Record wakes the worker after queueing, so a wake that comes before this wait is kept.
    while (!worker.stopping() && queue_.empty()) {
      lock.unlock();
      worker.Wait();
      lock.lock();
    }
    if (worker.stopping()) {
      // Shutting down must not wait on an API server that may be gone.
      dropped_ += queue_.size();
      queue_.clear();
      idle_.notify_all();
      return;
    }
    Pending event = std::move(queue_.front());
    queue_.pop_front();
    sending_ = true;
    lock.unlock();
    const Status error = inner_.Record(event.pod, event.type, event.reason, event.message);
    if (!error.ok()) {
      spdlog::warn("kube: event {} on pod {}/{} not recorded: {}", event.reason,
                   event.pod.namespace_name, event.pod.name, error.ToString());
    }
    lock.lock();
    if (!error.ok()) ++failed_;
    sending_ = false;
    idle_.notify_all();
  }
}

}  // namespace kvgpu::kube
