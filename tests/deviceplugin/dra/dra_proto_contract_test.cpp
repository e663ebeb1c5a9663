// The generated DRA and plugin-registration APIs must match upstream's wire contract: kubelet
// routes calls by full method name and decodes fields by number. Values from kubernetes/kubernetes
// staging/src/k8s.io/kubelet/pkg/apis/dra/{v1,v1beta1}/api.proto and
// pluginregistration/v1/api.proto (commits in proto/kubelet/*).
#include <gtest/gtest.h>

#include "kubelet/dra/v1/api.pb.h"
#include "kubelet/dra/v1beta1/api.pb.h"
#include "kubelet/pluginregistration/v1/api.pb.h"

namespace {

using google::protobuf::DescriptorPool;

const DescriptorPool* Pool() {
  (void)k8s::io::kubelet::pkg::apis::dra::v1::Claim::descriptor();
  (void)k8s::io::kubelet::pkg::apis::dra::v1beta1::Claim::descriptor();
  (void)pluginregistration::PluginInfo::descriptor();
  return DescriptorPool::generated_pool();
}

TEST(DraProtoContract, ServicesAndMethodsAreUpstreams) {
  const DescriptorPool* pool = Pool();
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
       {"NodePrepareResources", "NodeUnprepareResources"}},
      {"k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
       {"NodePrepareResources", "NodeUnprepareResources"}},
      {"pluginregistration.Registration", {"GetInfo", "NotifyRegistrationStatus"}},
  };
  for (const auto& [name, methods] : cases) {
    SCOPED_TRACE(name);
    const auto* service = pool->FindServiceByName(name);
    ASSERT_NE(service, nullptr);
    ASSERT_EQ(service->method_count(), static_cast<int>(methods.size()));
    for (int i = 0; i < service->method_count(); ++i) {
      EXPECT_EQ(service->method(i)->name(), methods[static_cast<size_t>(i)]);
    }
  }
}

TEST(DraProtoContract, FieldNumbersAreUpstreams) {
  const DescriptorPool* pool = Pool();
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, int>>>> messages = {
      {"NodePrepareResourcesRequest", {{"claims", 1}}},
      {"NodePrepareResourcesResponse", {{"claims", 1}}},
      {"NodePrepareResourceResponse", {{"devices", 1}, {"error", 2}}},
      {"Device",
       {{"request_names", 1}, {"pool_name", 2}, {"device_name", 3}, {"cdi_device_ids", 4}}},
      {"NodeUnprepareResourcesRequest", {{"claims", 1}}},
      {"NodeUnprepareResourcesResponse", {{"claims", 1}}},
      {"NodeUnprepareResourceResponse", {{"error", 1}}},
      {"Claim", {{"namespace", 1}, {"uid", 2}, {"name", 3}}},
  };
  for (const std::string package :
       {"k8s.io.kubelet.pkg.apis.dra.v1.", "k8s.io.kubelet.pkg.apis.dra.v1beta1."}) {
    for (const auto& [message, fields] : messages) {
      SCOPED_TRACE(package + message);
      const auto* descriptor = pool->FindMessageTypeByName(package + message);
      ASSERT_NE(descriptor, nullptr);
      EXPECT_EQ(descriptor->field_count(), static_cast<int>(fields.size()));
      for (const auto& [field, number] : fields) {
        const auto* f = descriptor->FindFieldByName(field);
        ASSERT_NE(f, nullptr) << field;
        EXPECT_EQ(f->number(), number) << field;
      }
    }
  }
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, int>>>> reg = {
      {"pluginregistration.PluginInfo",
       {{"type", 1}, {"name", 2}, {"endpoint", 3}, {"supported_versions", 4}}},
      {"pluginregistration.RegistrationStatus", {{"plugin_registered", 1}, {"error", 2}}},
      {"pluginregistration.RegistrationStatusResponse", {}},
      {"pluginregistration.InfoRequest", {}},
  };
  for (const auto& [message, fields] : reg) {
    SCOPED_TRACE(message);
    const auto* descriptor = pool->FindMessageTypeByName(message);
    ASSERT_NE(descriptor, nullptr);
    EXPECT_EQ(descriptor->field_count(), static_cast<int>(fields.size()));
    for (const auto& [field, number] : fields) {
      const auto* f = descriptor->FindFieldByName(field);
      ASSERT_NE(f, nullptr) << field;
      EXPECT_EQ(f->number(), number) << field;
    }
  }
}

}  // namespace
