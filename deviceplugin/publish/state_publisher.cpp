#include "deviceplugin/publish/state_publisher.h"

#include <spdlog/spdlog.h>

#include "common/clock.h"

namespace kvgpu::deviceplugin {

using Clock = std::chrono::steady_clock;

StatePublisher::StatePublisher(kube::ApiTransport& api, Source source,
                               StatePublisherOptions options, Observer observer)
    : api_(api),
      source_(std::move(source)),
      options_(std::move(options)),
      observer_(std::move(observer)) {}

StatePublisher::~StatePublisher() {
  Stop();
}

nlohmann::json StatePublisher::AnnotationPatch(const std::string& text) {
  return {{"metadata", {{"annotations", {{scheduling::kNodeStateAnnotation, text}}}}}};
}

uint64_t StatePublisher::generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

Result<bool> StatePublisher::PublishIfDue() {
  scheduling::NodeVgpuState state = source_();
  state.node = options_.node_name;
  uint64_t generation = 0;
  {
    std::lock_guard lock(mutex_);
    const bool heartbeat_due = Clock::now() - last_time_ >= options_.heartbeat;
    if (last_ && last_->SameContent(state) && !heartbeat_due) return false;
    generation = generation_ + 1;
  }
  state.generation = generation;
  state.published_unix_ms = UnixNowMs();
  Result<nlohmann::json> patched =
      api_.Patch("/api/v1/nodes/" + kube::QueryEscape(options_.node_name),
                 AnnotationPatch(scheduling::RenderNodeState(state)),
                 "application/merge-patch+json", &cancel_);
  if (!patched.ok() && patched.status().code() == ErrorCode::kCancelled) return patched.status();
  if (observer_) observer_(patched.ok(), generation);
  if (!patched.ok()) return patched.status();
  std::lock_guard lock(mutex_);
  generation_ = generation;
  last_ = std::move(state);
  last_time_ = Clock::now();
  return true;
}

void StatePublisher::Start() {
  Stop();
  cancel_.Reset();
  worker_.Start([this](BackgroundWorker::Handle& worker) { Loop(worker); });
}

void StatePublisher::Stop() {
  worker_.RequestStop();
  // A patch the API server never answers would hold shutdown for the client's 30 s timeout. What
  // it carried is dropped: the state is the plugin's view, rebuilt and published at the next start.
  cancel_.Cancel();
  worker_.Stop();
}

void StatePublisher::Loop(BackgroundWorker::Handle& worker) {
  Backoff backoff(options_.min_interval, std::max(options_.min_interval, options_.retry_max));
  bool failing = false;
  auto next = Clock::now();
  while (true) {
    if (!worker.SleepUntil(next)) return;
    Result<bool> published = PublishIfDue();
    if (!published.ok() && published.status().code() == ErrorCode::kCancelled) return;
    if (published.ok()) {
      if (failing) spdlog::info("vGPU state published on node {} again", options_.node_name);
      failing = false;
      backoff.Reset();
      next = Clock::now() + options_.min_interval;
      continue;
    }
    spdlog::log(failing ? spdlog::level::debug : spdlog::level::warn,
                "vGPU state not published on node {}: {}; the scheduler extender sees the last "
                "one until it ages out",
                options_.node_name, published.status().ToString());
    failing = true;
    next = Clock::now() + backoff.Next();
  }
}

}  // namespace kvgpu::deviceplugin
