// The generated API must match upstream's wire contract: kubelet routes calls by full method
// name and decodes fields by number. Values below are from kubernetes/kubelet
// pkg/apis/deviceplugin/v1beta1/api.proto and pkg/apis/podresources/v1/api.proto.
#include <gtest/gtest.h>

#include "kubelet/deviceplugin/v1beta1/api.pb.h"
#include "kubelet/podresources/v1/api.pb.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;

// Touching one message of each file links and registers its descriptors in the generated pool.
const DescriptorPool* Pool() {
  (void)v1beta1::RegisterRequest::descriptor();
  (void)v1::ListPodResourcesRequest::descriptor();
  return DescriptorPool::generated_pool();
}

TEST(KubeletProtoContractTest, ServicesAndMethodsAreUpstreams) {
  const DescriptorPool* pool = Pool();
  struct Case {
    std::string service;
    std::vector<std::string> methods;
  };
  const std::vector<Case> cases = {
      {"v1beta1.Registration", {"Register"}},
      {"v1beta1.DevicePlugin",
       {"GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate",
        "PreStartContainer"}},
      {"v1.PodResourcesLister", {"List", "GetAllocatableResources", "Get"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.service);
    const auto* service = pool->FindServiceByName(c.service);
    ASSERT_NE(service, nullptr);
    ASSERT_EQ(service->method_count(), static_cast<int>(c.methods.size()));
    for (int i = 0; i < service->method_count(); ++i) {
      EXPECT_EQ(service->method(i)->name(), c.methods[static_cast<size_t>(i)]);
    }
  }
  EXPECT_TRUE(pool->FindMethodByName("v1beta1.DevicePlugin.ListAndWatch")->server_streaming());
}

TEST(KubeletProtoContractTest, FieldNumbersAreUpstreams) {
  const DescriptorPool* pool = Pool();
  struct Case {
    std::string message;
    std::string field;
    int number;
  };
  const std::vector<Case> cases = {
      {"v1beta1.DevicePluginOptions", "pre_start_required", 1},
      {"v1beta1.DevicePluginOptions", "get_preferred_allocation_available", 2},
      {"v1beta1.RegisterRequest", "version", 1},
      {"v1beta1.RegisterRequest", "endpoint", 2},
      {"v1beta1.RegisterRequest", "resource_name", 3},
      {"v1beta1.RegisterRequest", "options", 4},
      {"v1beta1.ListAndWatchResponse", "devices", 1},
      {"v1beta1.TopologyInfo", "nodes", 1},
      {"v1beta1.NUMANode", "ID", 1},
      {"v1beta1.Device", "ID", 1},
      {"v1beta1.Device", "health", 2},
      {"v1beta1.Device", "topology", 3},
      {"v1beta1.PreStartContainerRequest", "devices_ids", 1},
      {"v1beta1.PreferredAllocationRequest", "container_requests", 1},
      {"v1beta1.ContainerPreferredAllocationRequest", "available_deviceIDs", 1},
      {"v1beta1.ContainerPreferredAllocationRequest", "must_include_deviceIDs", 2},
      {"v1beta1.ContainerPreferredAllocationRequest", "allocation_size", 3},
      {"v1beta1.PreferredAllocationResponse", "container_responses", 1},
      {"v1beta1.ContainerPreferredAllocationResponse", "deviceIDs", 1},
      {"v1beta1.AllocateRequest", "container_requests", 1},
      {"v1beta1.ContainerAllocateRequest", "devices_ids", 1},
      {"v1beta1.CDIDevice", "name", 1},
      {"v1beta1.AllocateResponse", "container_responses", 1},
      {"v1beta1.ContainerAllocateResponse", "envs", 1},
      {"v1beta1.ContainerAllocateResponse", "mounts", 2},
      {"v1beta1.ContainerAllocateResponse", "devices", 3},
      {"v1beta1.ContainerAllocateResponse", "annotations", 4},
      {"v1beta1.ContainerAllocateResponse", "cdi_devices", 5},
      {"v1beta1.Mount", "container_path", 1},
      {"v1beta1.Mount", "host_path", 2},
      {"v1beta1.Mount", "read_only", 3},
      {"v1beta1.DeviceSpec", "container_path", 1},
      {"v1beta1.DeviceSpec", "host_path", 2},
      {"v1beta1.DeviceSpec", "permissions", 3},
      {"v1.ListPodResourcesResponse", "pod_resources", 1},
      {"v1.PodResources", "name", 1},
      {"v1.PodResources", "namespace", 2},
      {"v1.PodResources", "containers", 3},
      {"v1.ContainerResources", "name", 1},
      {"v1.ContainerResources", "devices", 2},
      {"v1.ContainerDevices", "resource_name", 1},
      {"v1.ContainerDevices", "device_ids", 2},
      {"v1.GetPodResourcesRequest", "pod_name", 1},
      {"v1.GetPodResourcesRequest", "pod_namespace", 2},
      {"v1.DynamicResource", "claim_name", 2},
      {"v1.ClaimResource", "share_id", 5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message + "." + c.field);
    const Descriptor* message = pool->FindMessageTypeByName(c.message);
    ASSERT_NE(message, nullptr);
    const auto* field = message->FindFieldByName(c.field);
    ASSERT_NE(field, nullptr);
    EXPECT_EQ(field->number(), c.number);
  }
}

}  // namespace
