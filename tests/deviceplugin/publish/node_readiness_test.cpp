// The node-readiness gate's check and reporter: each prerequisite named alone when missing, each
// front end judged by what it needs (a DRA node by its registration and slices, not by device
// plugin resources), and the log/Event/metrics told once per change.
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

FrontEndFacts DevicePluginOnly(bool offers) {
  return {offers, std::nullopt};
}

DraFacts ServingDra() {
  DraFacts dra;
  dra.offers_vgpus = true;
  dra.registered = true;
  dra.published = true;
  dra.driver = "vgpu.tencent.com";
  dra.registration_socket = "/var/lib/kubelet/plugins_registry/vgpu.tencent.com-reg.sock";
  return dra;
}

TEST_F(NodeReadinessTest, APreparedNodeIsReady) {
  EXPECT_TRUE(CheckNodeReadiness(root(), DevicePluginOnly(true)).empty());
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
    auto missing = CheckNodeReadiness(root(), DevicePluginOnly(c.offers_vgpus));
    ASSERT_EQ(Items(missing), std::vector<std::string>{c.item});
    EXPECT_NE(missing[0].reason.find(c.advice), std::string::npos) << missing[0].reason;
  }
}

TEST_F(NodeReadinessTest, AnAbsentIommuDirectoryCountsAsOff) {
  fs::remove_all(root() / "sys");
  EXPECT_EQ(Items(CheckNodeReadiness(root(), DevicePluginOnly(true))),
            std::vector<std::string>{"iommu"});
}

TEST_F(NodeReadinessTest, EveryItemIsOneTheMetricKnows) {
  fs::remove_all(root());
  fs::create_directories(root());
  DraFacts dra;
  dra.registered = false;
  const FrontEndFacts facts{false, dra};
  std::vector<std::pair<std::string, std::string>> reported;
  for (const auto& m : CheckNodeReadiness(root(), facts)) reported.emplace_back(m.frontend, m.item);
  EXPECT_EQ(reported, NodePrerequisiteItems(facts));
}

// The shipped `dra` overlay: every GPU on DRA, so the device plugin front end does not run and
// its empty resources say nothing; the DRA front end serving is a ready node.
TEST_F(NodeReadinessTest, ANodeWhoseGpusAllServeDraIsReadyWhenDraServes) {
  const FrontEndFacts facts{std::nullopt, ServingDra()};
  EXPECT_TRUE(CheckNodeReadiness(root(), facts).empty());
}

TEST_F(NodeReadinessTest, ADraPluginKubeletHasNotRegisteredIsNotReadyWithTheReason) {
  DraFacts dra = ServingDra();
  dra.registered.reset();
  auto missing = CheckNodeReadiness(root(), {std::nullopt, dra});
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].frontend, "dra");
  EXPECT_EQ(missing[0].item, "registration");
  EXPECT_NE(missing[0].reason.find("kubelet has not registered the DRA plugin vgpu.tencent.com"),
            std::string::npos)
      << missing[0].reason;
  EXPECT_NE(missing[0].reason.find(dra.registration_socket), std::string::npos);
  EXPECT_FALSE(FrontEndReady(missing, "dra"));

  dra.registered = false;
  dra.registration_error = "plugin version not supported";
  missing = CheckNodeReadiness(root(), {std::nullopt, dra});
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_NE(missing[0].reason.find("refused the DRA plugin vgpu.tencent.com: plugin version not "
                                   "supported"),
            std::string::npos)
      << missing[0].reason;
}

TEST_F(NodeReadinessTest, UnpublishedSlicesOrNoTypeMakeDraNotReady) {
  DraFacts dra = ServingDra();
  dra.published = false;
  EXPECT_EQ(Items(CheckNodeReadiness(root(), {std::nullopt, dra})),
            std::vector<std::string>{"slices"});
  dra = ServingDra();
  dra.offers_vgpus = false;
  EXPECT_EQ(Items(CheckNodeReadiness(root(), {std::nullopt, dra})),
            std::vector<std::string>{"vgpu"});
}

TEST_F(NodeReadinessTest, AStartingDraFrontEndIsNotJudgedByWhatItAwaits) {
  DraFacts dra = ServingDra();
  dra.settling = true;
  dra.registered.reset();
  dra.published = false;
  EXPECT_TRUE(CheckNodeReadiness(root(), {std::nullopt, dra}).empty());
}

// A mixed node: each front end is judged by its own needs; a whole-node item stops both.
TEST_F(NodeReadinessTest, OnAMixedNodeEachFrontEndIsJudgedAlone) {
  DraFacts dra = ServingDra();
  dra.registered.reset();
  auto missing = CheckNodeReadiness(root(), {true, dra});
  EXPECT_TRUE(FrontEndReady(missing, "device-plugin"));
  EXPECT_FALSE(FrontEndReady(missing, "dra"));

  missing = CheckNodeReadiness(root(), {false, ServingDra()});
  EXPECT_FALSE(FrontEndReady(missing, "device-plugin"));
  EXPECT_TRUE(FrontEndReady(missing, "dra"));

  fs::remove(root() / "dev" / "kvm");
  missing = CheckNodeReadiness(root(), {true, ServingDra()});
  EXPECT_FALSE(FrontEndReady(missing, "device-plugin"));
  EXPECT_FALSE(FrontEndReady(missing, "dra"));
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
  NodeReadinessReporter reporter(registry, &recorder, "gpu-7", DevicePluginOnly(true));
  auto text = [&] { return prometheus::TextSerializer().Serialize(registry.Collect()); };
  const std::vector<MissingPrerequisite> no_kvm = {{"node", "kvm", "/dev/kvm is missing"}};

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
  EXPECT_NE(text().find("kvgpu_node_prerequisite_missing{frontend=\"node\",item=\"kvm\"} 1"),
            std::string::npos);
  EXPECT_NE(text().find("kvgpu_node_prerequisite_missing{frontend=\"node\",item=\"iommu\"} 0"),
            std::string::npos);

  EXPECT_TRUE(reporter.Update({}));
  ASSERT_EQ(recorder.events.size(), 2u);
  EXPECT_EQ(recorder.events[1].type, kube::EventType::kNormal);
  EXPECT_EQ(recorder.events[1].reason, "NodeReadyForVgpu");
  EXPECT_NE(text().find("kvgpu_node_prerequisite_missing{frontend=\"node\",item=\"kvm\"} 0"),
            std::string::npos);
}

TEST(NodeReadinessReporterTest, WithoutAnApiServerOrNodeNameItStillLogsAndCounts) {
  prometheus::Registry registry;
  NodeReadinessReporter reporter(registry, nullptr, "", DevicePluginOnly(true));
  EXPECT_FALSE(reporter.Update({{"device-plugin", "vgpu", "no types"}}));
  EXPECT_NE(prometheus::TextSerializer().Serialize(registry.Collect()).find("\nkvgpu_node_ready 0"),
            std::string::npos);
}

// The metrics and Event say which front end is not ready; DRA not ready leaves the device
// plugin's lists alone on a mixed node.
TEST(NodeReadinessReporterTest, SaysWhichFrontEndIsNotReady) {
  prometheus::Registry registry;
  Recorder recorder;
  NodeReadinessReporter reporter(registry, &recorder, "gpu-7", {true, ServingDra()});
  auto text = [&] { return prometheus::TextSerializer().Serialize(registry.Collect()); };

  EXPECT_TRUE(reporter.Update({{"dra", "registration", "kubelet has not registered it"}}))
      << "the device plugin still advertises";
  EXPECT_NE(text().find("\nkvgpu_node_ready 0"), std::string::npos);
  EXPECT_NE(text().find("kvgpu_frontend_ready{frontend=\"dra\"} 0"), std::string::npos);
  EXPECT_NE(text().find("kvgpu_frontend_ready{frontend=\"device-plugin\"} 1"), std::string::npos);
  EXPECT_NE(
      text().find("kvgpu_node_prerequisite_missing{frontend=\"dra\",item=\"registration\"} 1"),
      std::string::npos)
      << text();
  EXPECT_NE(
      text().find("kvgpu_node_prerequisite_missing{frontend=\"device-plugin\",item=\"vgpu\"} 0"),
      std::string::npos);
  ASSERT_EQ(recorder.events.size(), 1u);
  EXPECT_EQ(recorder.events[0].reason, "NodeNotReadyForVgpu");
  EXPECT_NE(recorder.events[0].message.find("device-plugin ready, dra not ready"),
            std::string::npos)
      << recorder.events[0].message;
  EXPECT_NE(recorder.events[0].message.find("dra: registration (kubelet has not registered it)"),
            std::string::npos)
      << recorder.events[0].message;
  EXPECT_EQ(recorder.events[0].message.find("advertises no vGPUs"), std::string::npos);

  EXPECT_TRUE(reporter.Update({}));
  EXPECT_NE(text().find("kvgpu_frontend_ready{frontend=\"dra\"} 1"), std::string::npos);
  EXPECT_NE(text().find("\nkvgpu_node_ready 1"), std::string::npos);
}

// An all-DRA node has no device plugin series: nothing for the alert to see but DRA's and the
// node's own.
TEST(NodeReadinessReporterTest, AnAllDraNodeHasNoDevicePluginSeries) {
  prometheus::Registry registry;
  NodeReadinessReporter reporter(registry, nullptr, "gpu-7", {std::nullopt, ServingDra()});
  EXPECT_TRUE(reporter.Update({}));
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_EQ(text.find("frontend=\"device-plugin\""), std::string::npos) << text;
  EXPECT_NE(text.find("kvgpu_frontend_ready{frontend=\"dra\"} 1"), std::string::npos);
  EXPECT_EQ(text.find("kvgpu_node_prerequisite_missing{frontend=\"dra\",item=\"vgpu\"} 1"),
            std::string::npos);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
