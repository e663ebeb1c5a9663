#include "kube/pod_watcher.h"

#include <spdlog/spdlog.h>

namespace kvgpu::kube {

namespace {

ListWatchOptions ForPodsOn(const PodWatchOptions& options) {
  ListWatchOptions watch = options.watch;
  watch.path = "/api/v1/pods?fieldSelector=" + QueryEscape("spec.nodeName=" + options.node_name);
  watch.what = "pods on " + options.node_name;
  return watch;
}

}  // namespace

ApiPodWatcher::ApiPodWatcher(ApiTransport& transport, PodWatchOptions options)
    : watcher_(transport, ForPodsOn(options)) {}

ApiPodWatcher::~ApiPodWatcher() {
  Stop();
}

void ApiPodWatcher::Start(PodWatchCallbacks callbacks) {
  ListWatchCallbacks decoded;
  decoded.on_connection = std::move(callbacks.on_connection);
  decoded.on_synced =
      [on_synced = std::move(callbacks.on_synced)](const std::vector<nlohmann::json>& objects) {
        std::vector<PodInfo> pods;
        for (const nlohmann::json& object : objects) {
          auto pod = ParsePod(object);
          if (!pod.ok()) {
            spdlog::error("kube: skipping a pod in the list: {}", pod.status().message());
            continue;
          }
          pods.push_back(std::move(pod.value()));
        }
        if (on_synced) on_synced(pods);
      };
  decoded.on_event = [on_event = std::move(callbacks.on_event)](WatchEventType type,
                                                                const nlohmann::json& object) {
    auto pod = ParsePod(object);
    if (!pod.ok()) {
      spdlog::error("kube: skipping a {} event: {}", WatchEventTypeName(type),
                    pod.status().message());
      return;
    }
    if (on_event) on_event(type, pod.value());
  };
  watcher_.Start(std::move(decoded));
}

void ApiPodWatcher::Stop() {
  watcher_.Stop();
}

}  // namespace kvgpu::kube
