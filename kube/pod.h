// The few facts about a pod that vGPU lifecycle decisions rest on, decoded from core/v1 Pod JSON.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgpu::kube {

struct ContainerInfo {
  std::string name;
  bool init = false;  // from spec.initContainers (native sidecars included)
  // Resource name -> quantity as written ("1", "500m"), from resources.requests / .limits.
  std::map<std::string, std::string> requests;
  std::map<std::string, std::string> limits;
};

struct PodInfo {
  std::string uid;
  std::string namespace_name;
  std::string name;
  std::string node_name;
  // status.nominatedNodeName: where kube-scheduler means the pod to go after preempting there.
  std::string nominated_node;
  std::string phase;      // Pending, Running, Succeeded, Failed, Unknown; empty when not yet set
  bool deleting = false;  // metadata.deletionTimestamp is set
  std::string resource_version;
  std::vector<ContainerInfo> containers;

  // Succeeded or Failed: the containers will not run again, their devices are free to go.
  bool Finished() const { return phase == "Succeeded" || phase == "Failed"; }
  // Whether any container asks for `resource` in its requests or limits.
  bool Requests(const std::string& resource) const;
  std::string Key() const { return namespace_name + "/" + name; }

  bool operator==(const PodInfo&) const = default;
};

// Needs metadata.uid, .namespace and .name; everything else may be missing.
Result<PodInfo> ParsePod(const nlohmann::json& pod);

}  // namespace kvgpu::kube
