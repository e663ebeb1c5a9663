// Hand-built pod facts for the tests of who holds a vGPU (holder tracker, lifecycle, state
// rebuild): a record of ours on the mtty sample driver's node, an API-server pod, and a pod as
// kubelet's PodResources lists it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deviceplugin/model/state_store.h"
#include "kube/kubelet/podresources.h"
#include "kube/pod.h"

namespace kvgpu::deviceplugin::testing {

inline const std::string kResource = "tencent.com/vgpu-mtty-2";

inline CreatedVgpu Record(const std::string& id, int64_t created_unix_ms = 1'000'000) {
  CreatedVgpu r;
  r.device_id = id;
  r.resource = kResource;
  r.vgpu_id = "uuid-" + id;
  r.parent = "mtty";
  r.physical_gpu = "mtty";
  r.type_id = "mtty-2";
  r.created_unix_ms = created_unix_ms;
  return r;
}

inline kube::PodInfo Pod(const std::string& uid, const std::string& name, const std::string& phase,
                         bool deleting = false) {
  kube::PodInfo pod;
  pod.uid = uid;
  pod.namespace_name = "default";
  pod.name = name;
  pod.node_name = "node-1";
  pod.phase = phase;
  pod.deleting = deleting;
  return pod;
}

inline kubelet::PodResources PodHolding(const std::string& name,
                                        const std::vector<std::string>& ids) {
  return {"default", name, {{"main", {{kResource, ids}}}}};
}

}  // namespace kvgpu::deviceplugin::testing
