// A vGPU resource kube-scheduler does not send to the extender is placed on counts alone: the
// extender reads the scheduler's managedResources and reports each node advertising another: a
// metric, and a Warning Event on the Node once per appearance, within an event budget.
#include "extender/coverage.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <fstream>
#include <iterator>

#include "fakes/apiserver/in_memory_kube.h"

namespace kvgpu::extender {
namespace {

nlohmann::json NodeOffering(const std::string& name, const std::vector<std::string>& resources) {
  nlohmann::json allocatable = {{"cpu", "8"}};
  for (const std::string& r : resources) allocatable[r] = "16";
  return {{"metadata", {{"name", name}}}, {"status", {{"allocatable", allocatable}}}};
}

std::string MetricsText(prometheus::Registry& registry) {
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
  coverage.SyncNodes({NodeOffering("a", {"tencent.com/vgpu-222"}),
                      NodeOffering("b", {"tencent.com/vgpu-222", "tencent.com/vgpu-999"}),
                      NodeOffering("c", {"example.com/gpu"})});
  auto unmanaged = coverage.Unmanaged();
  ASSERT_EQ(unmanaged.size(), 1u);
  EXPECT_EQ(unmanaged.at("tencent.com/vgpu-999"), std::set<std::string>{"b"});
  EXPECT_NE(MetricsText(registry).find(
                "kvgpu_scheduler_extender_unmanaged_resource_nodes{resource=\"tencent.com/"
                "vgpu-999\"} 1"),
            std::string::npos)
      << MetricsText(registry);

  coverage.NodeChanged(kube::WatchEventType::kModified,
                       NodeOffering("b", {"tencent.com/vgpu-222"}));
  EXPECT_TRUE(coverage.Unmanaged().empty());
  EXPECT_NE(MetricsText(registry).find(
                "kvgpu_scheduler_extender_unmanaged_resource_nodes{resource=\"tencent.com/"
                "vgpu-999\"} 0"),
            std::string::npos)
      << "the gauge drops back to 0, so the alert resolves";
}

std::vector<std::string> Told(const kvgpu::testing::RecordingEventRecorder& events) {
  std::vector<std::string> out;
  for (const auto& e : events.events()) {
    EXPECT_EQ(e.pod.kind, "Node");
    EXPECT_EQ(e.type, kube::EventType::kWarning);
    EXPECT_EQ(e.reason, kBypassReason);
    EXPECT_NE(e.message.find("managedResources"), std::string::npos) << e.message;
    const size_t at = e.message.find("tencent.com/");
    out.push_back(e.pod.name + " " + e.message.substr(at, e.message.find(',', at) - at));
  }
  return out;
}

TEST(CoverageTest, ANodeIsToldByAnEventOncePerAppearanceOfAnUnmanagedResource) {
  prometheus::Registry registry;
  kvgpu::testing::RecordingEventRecorder events;
  Coverage coverage({"tencent.com/vgpu-222"}, "tencent.com/vgpu-", registry, &events);
  const auto b = NodeOffering("b", {"tencent.com/vgpu-222", "tencent.com/vgpu-999"});
  coverage.SyncNodes({NodeOffering("a", {"tencent.com/vgpu-222"}), b});
  EXPECT_EQ(Told(events), std::vector<std::string>{"b tencent.com/vgpu-999"});
  coverage.SyncNodes({NodeOffering("a", {"tencent.com/vgpu-222"}), b});
  coverage.NodeChanged(kube::WatchEventType::kModified, b);
  EXPECT_EQ(events.events().size(), 1u) << "not again while it stays";

  coverage.NodeChanged(kube::WatchEventType::kModified,
                       NodeOffering("b", {"tencent.com/vgpu-999", "tencent.com/vgpu-998"}));
  EXPECT_EQ(Told(events),
            (std::vector<std::string>{"b tencent.com/vgpu-999", "b tencent.com/vgpu-998"}));
  coverage.NodeChanged(kube::WatchEventType::kModified,
                       NodeOffering("b", {"tencent.com/vgpu-222"}));
  coverage.NodeChanged(kube::WatchEventType::kModified, b);
  coverage.NodeChanged(kube::WatchEventType::kDeleted, b);
  coverage.NodeChanged(kube::WatchEventType::kAdded, b);
  EXPECT_EQ(Told(events),
            (std::vector<std::string>{"b tencent.com/vgpu-999", "b tencent.com/vgpu-998",
                                      "b tencent.com/vgpu-999", "b tencent.com/vgpu-999"}))
      << "each return after it went is a new appearance";
}

TEST(CoverageTest, EventsStayWithinTheBudgetAndThoseHeldBackAreToldLater) {
  prometheus::Registry registry;
  kvgpu::testing::RecordingEventRecorder events;
  auto now = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  Coverage coverage({}, "tencent.com/vgpu-", registry, &events,
                    EventBudget{2, std::chrono::minutes(1)}, [&] { return now; });
  std::vector<nlohmann::json> nodes;
  for (int i = 0; i < 5; ++i)
    nodes.push_back(NodeOffering("n" + std::to_string(i), {"tencent.com/vgpu-1"}));
  coverage.SyncNodes(nodes);
  EXPECT_EQ(events.events().size(), 2u) << "a burst of 2";
  now += std::chrono::seconds(59);
  coverage.SyncNodes(nodes);
  EXPECT_EQ(events.events().size(), 2u);
  now += std::chrono::seconds(1);
  coverage.SyncNodes(nodes);
  EXPECT_EQ(events.events().size(), 3u) << "one more a minute";
  now += std::chrono::hours(1);
  coverage.SyncNodes(nodes);
  coverage.SyncNodes(nodes);
  EXPECT_EQ(Told(events).size(), 5u) << "every node told once, none twice";
  EXPECT_NE(MetricsText(registry).find(
                "kvgpu_scheduler_extender_unmanaged_resource_nodes{resource=\"tencent.com/"
                "vgpu-1\"} 5"),
            std::string::npos)
      << "the metric counts every node at once, whatever the budget";
}

TEST(CoverageTest, AFileThatIsNoSchedulerConfigurationIsRefusedWithTheReason) {
  EXPECT_EQ(ManagedResources("extenders: [").status().code(), ErrorCode::kInvalid);
  auto none = ManagedResources("apiVersion: v1\nkind: ConfigMap\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("extenders"), std::string::npos);
}

}  // namespace
}  // namespace kvgpu::extender
