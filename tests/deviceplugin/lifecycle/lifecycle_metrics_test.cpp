// What operators alert on: the lifecycle's gauges follow the last pass (without_pod counts the
// vGPUs waiting out their grace period and those due for removal), removals are counted by
// outcome (a vGPU already gone counts as removed), and each pod-fact source shows up or down.
#include "deviceplugin/lifecycle/lifecycle_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <string>

namespace kvgpu::deviceplugin {
namespace {

class LifecycleMetricsTest : public ::testing::Test {
 protected:
  std::string Text() { return prometheus::TextSerializer().Serialize(registry_.Collect()); }
  bool Has(const std::string& line) { return Text().find("\n" + line + "\n") != std::string::npos; }

  prometheus::Registry registry_;
  LifecycleMetrics metrics_{registry_};
};

TEST_F(LifecycleMetricsTest, TheGaugesShowTheLastPassAndWithoutPodCountsWaitingAndDue) {
  PassPlan plan;
  plan.held = 3;
  plan.waiting = 2;
  plan.unknown = 1;
  plan.remove.resize(4);
  metrics_.OnPass(plan, 5, std::chrono::milliseconds(2));
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_vgpus{state=\"without_pod\"} 6")) << Text();
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_vgpus{state=\"held\"} 3"));
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_vgpus{state=\"unknown\"} 1"));
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_vgpus{state=\"foreign\"} 5"));
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_pass_seconds_count 1"));
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_pass_seconds_bucket{le=\"0.0025\"} 1"));
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_pass_seconds_bucket{le=\"0.001\"} 0"));

  metrics_.OnPass(PassPlan{}, 0, std::chrono::milliseconds(0));
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_vgpus{state=\"without_pod\"} 0"))
      << "a gauge, not a sum over passes";
}

TEST_F(LifecycleMetricsTest, RemovalsAreCountedByOutcomeAndAVanishedVgpuCountsAsRemoved) {
  const std::string resource = "tencent.com/vgpu-222";
  metrics_.OnRemoval(resource, Status::Ok());
  metrics_.OnRemoval(resource, Status::Error(ErrorCode::kGone, "already gone"));
  metrics_.OnRemoval(resource, Status::Error(ErrorCode::kBusy, "the VM holds it"));
  metrics_.OnRemoval(resource, Status::Error(ErrorCode::kIo, "write failed"));
  const std::string prefix =
      "kvgpu_deviceplugin_lifecycle_removals_total{resource=\"" + resource + "\",result=";
  EXPECT_TRUE(Has(prefix + "\"ok\"} 2")) << Text();
  EXPECT_TRUE(Has(prefix + "\"busy\"} 1"));
  EXPECT_TRUE(Has(prefix + "\"error\"} 1"));
}

TEST_F(LifecycleMetricsTest, EachSourceShowsWhetherItAnswers) {
  metrics_.OnSources(true, false);
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_source_up{source=\"podresources\"} 1")) << Text();
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_source_up{source=\"apiserver\"} 0"));
  metrics_.OnSources(false, true);
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_source_up{source=\"podresources\"} 0"));
  EXPECT_TRUE(Has("kvgpu_deviceplugin_lifecycle_source_up{source=\"apiserver\"} 1"));
}

}  // namespace
}  // namespace kvgpu::deviceplugin
