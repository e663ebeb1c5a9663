// The config's builders on their own: volumes, mounts and workload additions (volume_builder.h)
// and the injected containers (container_builder.h). Each refuses what the API server would
// refuse, with a message naming the key, and renders what it accepts once.
#include <gtest/gtest.h>

#include "webhook/container_builder.h"
#include "webhook/volume_builder.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

TEST(VolumeBuilder, VolumesAreRenderedOnceAndTheirNamesCollected) {
  Checker check;
  std::vector<InjectedVolume> volumes;
  std::set<std::string> names;
  ASSERT_TRUE(BuildVolumes(
      check, json::parse(R"([{"name":"drv","hostPath":{"path":"/opt/nvidia"}}])"), volumes, names))
      << check.failure;
  ASSERT_EQ(volumes.size(), 1u);
  EXPECT_EQ(volumes[0].text, volumes[0].object.dump());
  EXPECT_EQ(names, std::set<std::string>{"drv"});
}

TEST(VolumeBuilder, AVolumeTheApiServerWouldRefuseIsRefusedByName) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"([{"name":"drv","hostPath":{"path":"relative"}}])", "absolute path"},
      {R"([{"name":"drv","nfsv9":{}}])", "not a volume source"},
      {R"([{"name":"drv"}])", "exactly one source"},
      {R"([{"name":"drv","emptyDir":{}},{"name":"drv","emptyDir":{}}])", "listed twice"},
      {R"({"name":"drv"})", "must be a list"},
  };
  for (const auto& [text, part] : cases) {
    Checker check;
    std::vector<InjectedVolume> volumes;
    std::set<std::string> names;
    EXPECT_FALSE(BuildVolumes(check, json::parse(text), volumes, names)) << text;
    EXPECT_NE(check.failure.find(part), std::string::npos) << check.failure;
  }
}

TEST(VolumeBuilder, WorkloadMountsNeedAKnownVolumeAndEnvNamesAreUnique) {
  Checker check;
  std::vector<RenderedObject> mounts, env;
  ASSERT_TRUE(BuildWorkload(
      check, json::parse(R"({"volumeMounts":[{"name":"drv","mountPath":"/usr/local/nvidia"}],
                      "env":[{"name":"A","value":"1"}]})"),
      {"drv"}, mounts, env))
      << check.failure;
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0].text, mounts[0].object.dump());
  ASSERT_EQ(env.size(), 1u);

  Checker unknown;
  EXPECT_FALSE(BuildWorkload(unknown,
                             json::parse(R"({"volumeMounts":[{"name":"x","mountPath":"/x"}]})"),
                             {"drv"}, mounts, env));
  EXPECT_NE(unknown.failure.find("not in volumes"), std::string::npos) << unknown.failure;
  Checker twice;
  EXPECT_FALSE(BuildWorkload(
      twice, json::parse(R"({"env":[{"name":"A","value":"1"},{"name":"A","value":"2"}]})"), {"drv"},
      mounts, env));
  EXPECT_NE(twice.failure.find("unique"), std::string::npos) << twice.failure;
}

TEST(ContainerBuilder, AContainerAskingForAVgpuOrAboveItsLimitIsRefused) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"name":"d","image":"i","command":["c"],
           "resources":{"limits":{"tencent.com/vgpu-222":"1"}}})",
       "must not ask for a vGPU"},
      {R"({"name":"d","image":"i","command":["c"],
           "resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}}})",
       "must not exceed"},
      {R"({"name":"D","image":"i","command":["c"]})", "DNS label"},
      {R"({"name":"d","image":"i","command":["c"],"imagePullPolicy":"Sometimes"})",
       "imagePullPolicy"},
  };
  for (const auto& [text, part] : cases) {
    Checker check;
    ContainerSpec spec;
    EXPECT_FALSE(
        BuildContainer(check, json::parse(text), "driverInit", {}, {"tencent.com/vgpu"}, {}, spec))
        << text;
    EXPECT_NE(check.failure.find(part), std::string::npos) << check.failure;
  }
}

TEST(ContainerBuilder, OnlyColdPlugWithNativeSidecarsKeepsGriddsStartupProbe) {
  Checker check;
  ContainerSpec driver, gridd;
  ASSERT_TRUE(BuildContainer(check, json::parse(R"({"name":"d","image":"i","command":["c"]})"),
                             "driverInit", {}, {}, {"hotPlugArgs"}, driver));
  ASSERT_TRUE(BuildContainer(check, json::parse(R"({"name":"g","image":"i","command":["c"],
                      "startupProbe":{"command":["ok"]},"readinessProbe":{"command":["ok"]}})"),
                             "gridd", {}, {}, {"startupProbe", "readinessProbe"}, gridd))
      << check.failure;
  Injection hot_plug, cold_plug;
  ComposeInjections(driver, gridd, SidecarMode::kNative, hot_plug, cold_plug);
  EXPECT_TRUE(cold_plug.gridd.object.contains("startupProbe"));
  EXPECT_FALSE(hot_plug.gridd.object.contains("startupProbe"));
  EXPECT_EQ(hot_plug.driver.object["restartPolicy"], "Always");
  EXPECT_EQ(cold_plug.gridd.text, cold_plug.gridd.object.dump());
  ComposeInjections(driver, gridd, SidecarMode::kClassic, hot_plug, cold_plug);
  EXPECT_FALSE(cold_plug.gridd.object.contains("startupProbe"));
  EXPECT_FALSE(hot_plug.driver.object.contains("restartPolicy"));
}

}  // namespace
}  // namespace kvgpu::webhook
