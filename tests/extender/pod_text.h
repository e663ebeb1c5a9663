// Every field of a kube::PodInfo as one line of text, for tests that compare two readings of a pod
// (kube::ContainerInfo has no operator==) and show the difference when they disagree.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kube/pod.h"

namespace kvgpu::extender {

inline std::string PodText(const kube::PodInfo& pod) {
  nlohmann::json containers = nlohmann::json::array();
  for (const kube::ContainerInfo& c : pod.containers) {
    containers.push_back({c.name, c.init, c.requests, c.limits});
  }
  return nlohmann::json{pod.uid,   pod.namespace_name, pod.name,     pod.node_name,
                        pod.phase, pod.nominated_node, pod.deleting, pod.resource_version,
                        containers}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvgpu::extender
