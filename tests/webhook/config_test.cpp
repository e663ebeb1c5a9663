// Config: defaults are valid, overrides merge, and every broken file is refused with a message
// naming the key (a reload then keeps the old config).
#include "webhook/config.h"

#include <gtest/gtest.h>

namespace kvgpu::webhook {
namespace {

TEST(Config, DefaultsDescribeTheDocumentedSetup) {
  auto config = DefaultConfig();
  EXPECT_EQ(config->runtime_class_names, std::vector<std::string>{"kata"});
  EXPECT_EQ(config->resource_prefixes, std::vector<std::string>{"tencent.com/vgpu-"});
  EXPECT_EQ(config->non_kata_policy, NonKataPolicy::kDeny);
  EXPECT_EQ(config->sidecar_mode, SidecarMode::kNative);
  EXPECT_EQ(config->volumes.size(), 4u);
  EXPECT_EQ(config->gridd.object["startupProbe"]["exec"]["command"][2],
            "/usr/local/nvidia/bin/nvidia-smi -q | grep -Eq 'License Status +: +Licensed'");
  EXPECT_EQ(config->driver_init.object["securityContext"]["privileged"], true);
}

TEST(Config, OverridesMergeIntoNestedDefaults) {
  auto config = ParseConfig(R"(
driverInit:
  image: registry.example/loader:2
gridd:
  startupProbe: {periodSeconds: 2}
excludedNamespaces: []
)");
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config.value()->driver_init.object["image"], "registry.example/loader:2");
  EXPECT_EQ(config.value()->driver_init.object["command"],
            DefaultConfig()->driver_init.object["command"]);
  EXPECT_EQ(config.value()->gridd.object["startupProbe"]["periodSeconds"], 2);
  EXPECT_EQ(config.value()->gridd.object["startupProbe"]["failureThreshold"], 120);
  EXPECT_TRUE(config.value()->excluded_namespaces.empty());
}

TEST(Config, YamlScalarsKeepTheirTypes) {
  auto config = ParseConfig(R"(
volumes:
  - name: token
    secret: {secretName: t, defaultMode: 256, optional: true}
  - name: kvgpu-driver
    hostPath: {path: "/opt/driver"}
  - name: kvgpu-dev
    hostPath: {path: /dev}
  - name: kvgpu-gridd-conf
    configMap: {name: "123"}
  - name: kvgpu-client-token
    secret: {secretName: x}
)");
  ASSERT_TRUE(config.ok()) << config.error();
  const auto& secret = config.value()->volumes[0].object["secret"];
  EXPECT_TRUE(secret["defaultMode"].is_number_integer());
  EXPECT_EQ(secret["optional"], true);
  EXPECT_TRUE(config.value()->volumes[3].object["configMap"]["name"].is_string());
  EXPECT_EQ(config.value()->volumes[1].object["hostPath"]["path"], "/opt/driver");
}

TEST(Config, BrokenConfigsAreRefusedNamingTheProblem) {
  struct Bad {
    const char* description;
    const char* yaml;
    const char* message_part;
  };
  std::vector<Bad> table = {
      {"not YAML", "runtimeClassNames: [kata", "not valid YAML"},
      {"a list at top level", "- a\n- b\n", "mapping"},
      {"typo in a key", "runtimeClassName: [kata]\n", "unknown key 'runtimeClassName'"},
      {"typo inside a container", "gridd: {imgae: x}\n", "unknown key 'imgae'"},
      {"empty runtime classes", "runtimeClassNames: []\n", "runtimeClassNames"},
      {"bad policy word", "nonKataPods: allow\n", "nonKataPods"},
      {"bad sidecar mode", "sidecarMode: sometimes\n", "sidecarMode"},
      {"class to set not in scope", "runtimeClassToSet: runc\n", "runtimeClassToSet"},
      {"injected container asks for a vGPU",
       "driverInit: {resources: {limits: {tencent.com/vgpu-1: 1}}}\n", "must not ask for a vGPU"},
      {"container name not a DNS label", "gridd: {name: Grid_D}\n", "DNS label"},
      {"same name twice", "gridd: {name: kvgpu-driver-init}\n", "must differ"},
      {"mount of unknown volume", "workload: {volumeMounts: [{name: nope, mountPath: /x}]}\n",
       "not in volumes"},
      {"relative mount path", "workload: {volumeMounts: [{name: kvgpu-driver, mountPath: x}]}\n",
       "absolute"},
      {"volume with two sources", "volumes: [{name: a, hostPath: {path: /a}, emptyDir: {}}]\n",
       "exactly one source"},
      {"duplicate volume", "volumes: [{name: a, emptyDir: {}}, {name: a, emptyDir: {}}]\n",
       "listed twice"},
      {"empty command", "gridd: {command: []}\n", "command"},
      {"probe period zero", "gridd: {startupProbe: {periodSeconds: 0}}\n", "periodSeconds"},
      {"bad pull policy", "gridd: {imagePullPolicy: Sometimes}\n", "imagePullPolicy"},
      {"env without value", "workload: {env: [{name: A}]}\n", "value"},
      {"duplicate env", "workload: {env: [{name: A, value: x}, {name: A, value: y}]}\n", "unique"},
  };
  for (const auto& bad : table) {
    SCOPED_TRACE(bad.description);
    auto config = ParseConfig(bad.yaml);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.error().find(bad.message_part), std::string::npos) << config.error();
  }
}

TEST(Config, ProbeNumbersMustBeWholeNumbers) {
  for (const char* text : {"1.5", "-3", "\"5\"", "1e3"}) {
    SCOPED_TRACE(text);
    auto config =
        ParseConfig(std::string("gridd: {startupProbe: {periodSeconds: ") + text + "}}\n");
    EXPECT_FALSE(config.ok());
  }
  EXPECT_TRUE(ParseConfig("gridd: {startupProbe: {periodSeconds: +7}}\n").ok());
}

TEST(Config, MissingFileIsAnError) {
  auto config = LoadConfigFile("/nonexistent/kvgpu-webhook.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.error().find("/nonexistent/kvgpu-webhook.yaml"), std::string::npos);
}

TEST(Config, DnsLabels) {
  EXPECT_TRUE(IsDnsLabel("nvidia-gridd"));
  EXPECT_TRUE(IsDnsLabel("a1"));
  EXPECT_FALSE(IsDnsLabel("-a"));
  EXPECT_FALSE(IsDnsLabel("a-"));
  EXPECT_FALSE(IsDnsLabel("A"));
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a')));
  EXPECT_FALSE(IsDnsLabel(""));
}

}  // namespace
}  // namespace kvgpu::webhook
