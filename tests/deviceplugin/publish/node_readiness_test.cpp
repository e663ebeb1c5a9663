// The node-readiness gate's check and reporter: each prerequisite named alone when missing, and
// the log/Event/metrics told once per change.
#include "deviceplugin/publish/node_readiness.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <fstream>

#include "fakes/common/temp_dir.h"

namespace kvgpu::deviceplugin {
namespace {

namespace fs = std::filesystem;

class NodeReadinessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root() / "dev");
    std::ofstream(root() / "dev" / "kvm");
    std::ofstream(root() / "dev" / "vhost-vsock");
    fs::create_directories(root() / "sys" / "kernel" / "iommu_groups" / "7");
  }
  const fs::path& root() const { return dir_.path(); }

  kvgpu::testing::TempDir dir_;
};

std::vector<std::string> Items(const std::vector<MissingPrerequisite>& missing) {
  std::vector<std::string> items;
  for (const auto& m : missing) items.push_back(m.item);
  return items;
}

TEST_F(NodeReadinessTest, APreparedNodeIsReady) {
  EXPECT_TRUE(CheckNodeReadiness(root(), true).empty());
}

TEST_F(NodeReadinessTest, EachPrerequisiteMissingAloneIsNamedWithWhatToDo) {
  struct Case {
    std::string item;
    std::function<void()> take_away;
    bool offers_vgpus;
    std::string advice;
  };
  const std::vector<Case> cases = {
      {"kvm", [&] { fs::remove(root() / "dev" / "kvm"); }, true, "kvm_intel or kvm_amd"},
      {"vhost-vsock", [&] { fs::remove(root() / "dev" / "vhost-vsock"); }, true, "vhost_vsock"},
      {"iommu", [&] { fs::remove(root() / "sys" / "kernel" / "iommu_groups" / "7"); }, true,
       "intel_iommu=on"},
      {"vgpu", [] {}, false, "vGPU manager"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.item);
    SetUp();
    c.take_away();
    auto missing = CheckNodeReadiness(root(), c.offers_vgpus);
    ASSERT_EQ(Items(missing), std::vector<std::string>{c.item});
    EXPECT_NE(missing[0].reason.find(c.advice), std::string::npos) << missing[0].reason;
  }
}

TEST_F(NodeReadinessTest, AnAbsentIommuDirectoryCountsAsOff) {
  fs::remove_all(root() / "sys");
  EXPECT_EQ(Items(CheckNodeReadiness(root(), true)), std::vector<std::string>{"iommu"});
}

TEST_F(NodeReadinessTest, EveryItemIsOneTheMetricKnows) {
  fs::remove_all(root());
  fs::create_directories(root());
  auto missing = CheckNodeReadiness(root(), false);
  EXPECT_EQ(Items(missing), NodePrerequisiteItems());
}

class Recorder : public kube::EventRecorder {
 public:
  Status Record(const kube::ObjectRef& ref, kube::EventType type, const std::string& reason,
                const std::string& message) override {
    events.push_back({ref.kind + "/" + ref.name, type, reason, message});
    return {};
  }
  struct Event {
    std::string object;
    kube::EventType type;
    std::string reason;
    std::string message;
  };
  std::vector<Event> events;
};

TEST(NodeReadinessReporterTest, TellsOfEachChangeOnceWithAnEventOnTheNode) {
  prometheus::Registry registry;
  Recorder recorder;
  NodeReadinessReporter reporter(registry, &recorder, "gpu-7");
  auto text = [&] { return prometheus::TextSerializer().Serialize(registry.Collect()); };
  const std::vector<MissingPrerequisite> no_kvm = {{"kvm", "/dev/kvm is missing"}};

  EXPECT_TRUE(reporter.Update({}));
  EXPECT_TRUE(recorder.events.empty()) << "a node ready from the start needs no Event";
  EXPECT_NE(text().find("\nkvgpu_node_ready 1"), std::string::npos);

  EXPECT_FALSE(reporter.Update(no_kvm));
  EXPECT_FALSE(reporter.Update(no_kvm));
  ASSERT_EQ(recorder.events.size(), 1u) << "one Event per change, not per recheck";
  EXPECT_EQ(recorder.events[0].object, "Node/gpu-7");
  EXPECT_EQ(recorder.events[0].type, kube::EventType::kWarning);
  EXPECT_EQ(recorder.events[0].reason, "NodeNotReadyForVgpu");
  EXPECT_NE(recorder.events[0].message.find("/dev/kvm is missing"), std::string::npos);
  EXPECT_NE(text().find("\nkvgpu_node_ready 0"), std::string::npos);
  EXPECT_NE(text().find("kvgpu_node_prerequisite_missing{item=\"kvm\"} 1"), std::string::npos);
  EXPECT_NE(text().find("kvgpu_node_prerequisite_missing{item=\"iommu\"} 0"), std::string::npos);

  EXPECT_TRUE(reporter.Update({}));
  ASSERT_EQ(recorder.events.size(), 2u);
  EXPECT_EQ(recorder.events[1].type, kube::EventType::kNormal);
  EXPECT_EQ(recorder.events[1].reason, "NodeReadyForVgpu");
  EXPECT_NE(text().find("kvgpu_node_prerequisite_missing{item=\"kvm\"} 0"), std::string::npos);
}

TEST(NodeReadinessReporterTest, WithoutAnApiServerOrNodeNameItStillLogsAndCounts) {
  prometheus::Registry registry;
  NodeReadinessReporter reporter(registry, nullptr, "");
  EXPECT_FALSE(reporter.Update({{"vgpu", "no types"}}));
  EXPECT_NE(prometheus::TextSerializer().Serialize(registry.Collect()).find("\nkvgpu_node_ready 0"),
            std::string::npos);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
