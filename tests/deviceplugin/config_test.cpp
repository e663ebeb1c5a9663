// The YAML config: every key, and clear errors for bad input.
#include "deviceplugin/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "fakes/common/temp_dir.h"

namespace kvgpu::deviceplugin {
namespace {

TEST(DevicePluginConfigTest, EveryKeyIsRead) {
  auto config = ParseConfig(R"(
resourceDomain: gpu.example.org
namingStyle: profile
allowedTypes: [nvidia-222, nvidia-223]
pinning:
  - pciAddress: "0000:3b:00.0"
    type: nvidia-223
  - model: T4
    type: nvidia-222
  - all: true
    type: nvidia-222
spreadAcrossGPUs: true
cdi:
  enabled: true
  dir: /run/cdi
rescanInterval: 250ms
udevEvents: false
logLevel: debug
lifecycle:
  gracePeriod: 0s
  pollInterval: 2s
  retryMax: 5m
  watchPods: false
  events: false
schedulerState:
  publish: false
  minInterval: 500ms
  heartbeat: 5m
)");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->naming.domain, "gpu.example.org");
  EXPECT_EQ(config->naming.style, NamingStyle::kProfile);
  EXPECT_EQ(config->allowed_types, (std::vector<std::string>{"nvidia-222", "nvidia-223"}));
  ASSERT_EQ(config->pinning.size(), 3u);
  EXPECT_EQ(config->pinning[0], (PinRule{"0000:3b:00.0", std::nullopt, false, "nvidia-223"}));
  EXPECT_EQ(config->pinning[1], (PinRule{std::nullopt, "T4", false, "nvidia-222"}));
  EXPECT_EQ(config->pinning[2], (PinRule{std::nullopt, std::nullopt, true, "nvidia-222"}));
  EXPECT_TRUE(config->spread_across_gpus);
  EXPECT_TRUE(config->cdi_enabled);
  EXPECT_EQ(config->cdi_dir, "/run/cdi");
  EXPECT_EQ(config->rescan_interval, std::chrono::milliseconds(250));
  EXPECT_FALSE(config->udev_events);
  EXPECT_EQ(config->log_level, "debug");
  EXPECT_EQ(config->lifecycle.grace_period, std::chrono::milliseconds(0));
  EXPECT_EQ(config->lifecycle.poll_interval, std::chrono::seconds(2));
  EXPECT_EQ(config->lifecycle.retry_max, std::chrono::minutes(5));
  EXPECT_FALSE(config->lifecycle.watch_pods);
  EXPECT_FALSE(config->lifecycle.events);
  EXPECT_EQ(config->scheduler_state,
            (SchedulerStateConfig{false, std::chrono::milliseconds(500), std::chrono::minutes(5)}));
}

TEST(DevicePluginConfigTest, EmptyFileMeansDefaults) {
  auto config = ParseConfig("");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->naming.domain, "tencent.com");
  EXPECT_EQ(config->cdi_dir, "/var/run/cdi");
  EXPECT_FALSE(config->cdi_enabled);
  EXPECT_EQ(config->rescan_interval, std::chrono::seconds(5));
  EXPECT_EQ(config->lifecycle, LifecycleConfig{});
  EXPECT_EQ(config->lifecycle.grace_period, std::chrono::seconds(30));
  EXPECT_TRUE(config->lifecycle.watch_pods);
}

TEST(DevicePluginConfigTest, BadInputIsRefusedWithTheKeyNamed) {
  struct Case {
    std::string description;
    std::string yaml;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"not YAML", "a: [", "not valid YAML"},
      {"not a map", "- a\n- b\n", "YAML map"},
      {"unknown key (typo)", "resourcedomain: x.com\n",
       "unknown key 'resourcedomain' in the config"},
      {"unknown nested key", "cdi: {enable: true}\n", "unknown key 'enable' in cdi"},
      {"invalid domain", "resourceDomain: Tencent_com\n", "resourceDomain"},
      {"reserved domain", "resourceDomain: kubernetes.io\n", "reserved"},
      {"unknown naming style", "namingStyle: fancy\n", "namingStyle"},
      {"boolean expected", "spreadAcrossGPUs: maybe\n", "spreadAcrossGPUs"},
      {"pin with two selectors", "pinning: [{all: true, model: T4, type: nvidia-1}]\n",
       "exactly one of"},
      {"pin without type", "pinning: [{all: true}]\n", "pinning[0].type"},
      {"pinned type hidden by the allow-list",
       "allowedTypes: [nvidia-1]\npinning: [{all: true, type: nvidia-2}]\n", "allowedTypes"},
      {"relative CDI dir", "cdi: {dir: run/cdi}\n", "absolute"},
      {"duration without unit", "rescanInterval: 5\n", "rescanInterval"},
      {"too short a rescan", "rescanInterval: 1ms\n", "at least"},
      {"unknown log level", "logLevel: loud\n", "logLevel"},
      {"list expected", "allowedTypes: nvidia-1\n", "allowedTypes"},
      {"lifecycle not a map", "lifecycle: 30s\n", "lifecycle: expected a map"},
      {"unknown lifecycle key", "lifecycle: {grace: 1s}\n", "unknown key 'grace' in lifecycle"},
      {"negative-looking grace", "lifecycle: {gracePeriod: -1s}\n", "lifecycle.gracePeriod"},
      {"too fast a poll", "lifecycle: {pollInterval: 5ms}\n", "lifecycle.pollInterval"},
      {"boolean expected in lifecycle", "lifecycle: {events: often}\n", "lifecycle.events"},
      {"unknown schedulerState key", "schedulerState: {every: 1s}\n",
       "unknown key 'every' in schedulerState"},
      {"too fast a state look", "schedulerState: {minInterval: 1ms}\n",
       "schedulerState.minInterval"},
      {"a heartbeat inside the interval", "schedulerState: {minInterval: 10s, heartbeat: 5s}\n",
       "must be at least minInterval"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    auto config = ParseConfig(c.yaml);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find(c.message_part), std::string::npos)
        << config.status().message();
  }
}

TEST(DevicePluginConfigTest, FileErrorsNameTheFile) {
  kvgpu::testing::TempDir dir;
  auto missing = LoadConfigFile(dir.path() / "nope.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.yaml"), std::string::npos);
  std::ofstream(dir.path() / "bad.yaml") << "logLevel: loud\n";
  auto bad = LoadConfigFile(dir.path() / "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.yaml"), std::string::npos);
}

TEST(DevicePluginConfigTest, PinsMatchByAddressThenModelThenAll) {
  Config config;
  config.pinning = {{std::nullopt, std::nullopt, true, "all-type"},
                    {std::nullopt, "t4", false, "model-type"},
                    {"0000:3B:00.0", std::nullopt, false, "address-type"}};
  EXPECT_EQ(FindPin(config, "0000:3b:00.0", {"T4"})->type_id, "address-type");
  EXPECT_EQ(FindPin(config, "0000:af:00.0", {"T4"})->type_id, "model-type");
  EXPECT_EQ(FindPin(config, "0000:af:00.0", {"A100D"})->type_id, "all-type");
  config.pinning.erase(config.pinning.begin());
  EXPECT_EQ(FindPin(config, "0000:af:00.0", {"A100D"}), nullptr);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
