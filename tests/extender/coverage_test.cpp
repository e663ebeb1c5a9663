// A vGPU resource kube-scheduler does not send to the extender is placed on counts alone: the
// extender reads the scheduler's managedResources and reports each node advertising another.
#include "extender/coverage.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <fstream>
#include <iterator>

namespace kvgpu::extender {
namespace {

nlohmann::json Node(const std::string& name, const std::vector<std::string>& resources) {
  nlohmann::json allocatable = {{"cpu", "8"}};
  for (const std::string& r : resources) allocatable[r] = "16";
  return {{"metadata", {{"name", name}}}, {"status", {{"allocatable", allocatable}}}};
}

std::string Text(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(CoverageTest, TheShippedSchedulerConfigurationIsReadAndItsResourcesCount) {
  std::ifstream in(std::string(KVGPU_SOURCE_DIR) + "/deploy/scheduler/kube-scheduler-config.yaml");
  ASSERT_TRUE(in);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto managed = ManagedResources(text);
  ASSERT_TRUE(managed.ok()) << managed.status().ToString();
  EXPECT_TRUE(managed->contains("tencent.com/vgpu-222"));
  EXPECT_TRUE(managed->contains("tencent.com/vgpu-1414"));
}

TEST(CoverageTest, ANodeAdvertisingAResourceOutsideManagedResourcesIsCountedUntilItGoes) {
  prometheus::Registry registry;
  Coverage coverage({"tencent.com/vgpu-222"}, "tencent.com/vgpu-", registry);
  coverage.SyncNodes({Node("a", {"tencent.com/vgpu-222"}),
                      Node("b", {"tencent.com/vgpu-222", "tencent.com/vgpu-999"}),
                      Node("c", {"example.com/gpu"})});
  auto unmanaged = coverage.Unmanaged();
  ASSERT_EQ(unmanaged.size(), 1u);
  EXPECT_EQ(unmanaged.at("tencent.com/vgpu-999"), std::set<std::string>{"b"});
  EXPECT_NE(Text(registry).find(
                "kvgpu_scheduler_extender_unmanaged_resource_nodes{resource=\"tencent.com/"
                "vgpu-999\"} 1"),
            std::string::npos)
      << Text(registry);

  coverage.NodeChanged(kube::WatchEventType::kModified, Node("b", {"tencent.com/vgpu-222"}));
  EXPECT_TRUE(coverage.Unmanaged().empty());
  EXPECT_NE(Text(registry).find(
                "kvgpu_scheduler_extender_unmanaged_resource_nodes{resource=\"tencent.com/"
                "vgpu-999\"} 0"),
            std::string::npos)
      << "the gauge drops back to 0, so the alert resolves";
}

TEST(CoverageTest, AFileThatIsNoSchedulerConfigurationIsRefusedWithTheReason) {
  EXPECT_EQ(ManagedResources("extenders: [").status().code(), ErrorCode::kInvalid);
  auto none = ManagedResources("apiVersion: v1\nkind: ConfigMap\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("extenders"), std::string::npos);
}

}  // namespace
}  // namespace kvgpu::extender
