// Kubernetes Events on a pod ("vGPU created", "vGPU removed", failures), so `kubectl describe
// pod` tells the user what happened to their device; and on the Node (not ready for vGPUs).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/background_worker.h"
#include "common/status.h"
#include "kube/api_client.h"

namespace kvgpu::kube {

// The object an Event is about. Pods are namespaced; a Node is not, and its Events go to the
// "default" namespace with the node's name as its UID, as kubelet's own do.
struct ObjectRef {
  std::string namespace_name;
  std::string name;
  std::string uid;
  std::string kind = "Pod";

  static ObjectRef Node(const std::string& name) { return {"", name, name, "Node"}; }
  // Where the Event object itself lives.
  std::string EventNamespace() const { return namespace_name.empty() ? "default" : namespace_name; }
};
using PodRef = ObjectRef;

enum class EventType { kNormal, kWarning };

// What the lifecycle code depends on; tests record events without HTTP.
class EventRecorder {
 public:
  virtual ~EventRecorder() = default;
  // `reason` is short CamelCase (VgpuCreated); `message` is for humans.
  virtual Status Record(const PodRef& pod, EventType type, const std::string& reason,
                        const std::string& message) = 0;
  // Breaks the event being sent and every later one: shutdown does not wait for an API server
  // that accepts and never answers.
  virtual void Cancel() {}
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
  Status Record(const PodRef& pod, EventType type, const std::string& reason,
                const std::string& message) override;
  void Cancel() override { cancel_.Cancel(); }

 private:
  ApiTransport& transport_;
  Canceller cancel_;
  std::string component_;
  std::string host_;
};

// Hands events to another recorder on its own thread, so a slow or absent API server never
// holds up the caller (an Allocate). At most `capacity` events wait; beyond that the oldest is
// dropped and counted, because the newest say most about the pod now. Failures are logged.
class AsyncEventRecorder : public EventRecorder {
 public:
  AsyncEventRecorder(EventRecorder& inner, std::size_t capacity = 256);
  // Breaks the event in hand (inner's Cancel); what still waits is dropped.
  ~AsyncEventRecorder() override;
  AsyncEventRecorder(const AsyncEventRecorder&) = delete;
  AsyncEventRecorder& operator=(const AsyncEventRecorder&) = delete;

  // Queues the event; always ok.
  Status Record(const PodRef& pod, EventType type, const std::string& reason,
                const std::string& message) override;
  // Waits until the queue is empty and the event in hand sent (tests, shutdown).
  void Flush();
  // The same for at most `limit`; false when events were still waiting or in hand then.
  bool Flush(std::chrono::milliseconds limit);
  // Drops what waits and everything recorded from now on, and breaks the event in hand.
  void Cancel() override;
  std::size_t dropped() const;
  std::size_t failed() const;

 private:
  struct Pending {
    PodRef pod;
    EventType type;
    std::string reason;
    std::string message;
  };
  void Run(BackgroundWorker::Handle& worker);

  EventRecorder& inner_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::deque<Pending> queue_;
  bool sending_ = false;
  bool cancelled_ = false;
  std::size_t dropped_ = 0;
  std::size_t failed_ = 0;
  BackgroundWorker worker_;  // last: stopped before the members its body uses go
};

}  // namespace kvgpu::kube
