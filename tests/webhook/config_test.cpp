// Config: defaults are valid, overrides merge, and every broken file is refused with a message
// naming the key (a reload then keeps the old config).
#include "webhook/config.h"

#include <gtest/gtest.h>

namespace kvgpu::webhook {
namespace {

TEST(Config, DefaultsDescribeTheDocumentedSetup) {
  auto config = DefaultConfig();
  // The RuntimeClasses kata-config/runtimeclass.yaml ships, plus Kata's own default name.
  EXPECT_EQ(config->runtime_class_names,
            (std::vector<std::string>{"kata", "kata-vgpu", "kata-vgpu-vf"}));
  // Only the VF class cold-plugs (kata-config/configuration-kata-vgpu-vf.toml).
  EXPECT_EQ(config->cold_plug_runtime_class_names, std::vector<std::string>{"kata-vgpu-vf"});
  EXPECT_EQ(config->AttachModeOf("kata-vgpu-vf"), AttachMode::kColdPlug);
  EXPECT_EQ(config->AttachModeOf("kata-vgpu"), AttachMode::kHotPlug);
  EXPECT_EQ(config->AttachModeOf("kata"), AttachMode::kHotPlug);
  EXPECT_EQ(config->resource_prefixes, std::vector<std::string>{"tencent.com/vgpu-"});
  EXPECT_EQ(config->non_kata_policy, NonKataPolicy::kDeny);
  EXPECT_EQ(config->sidecar_mode, SidecarMode::kNative);
  EXPECT_EQ(config->volumes.size(), 4u);
  const std::string licensed =
      "/usr/local/nvidia/bin/nvidia-smi -q | grep -Eq 'License Status +: +Licensed'";
  EXPECT_EQ(config->cold_plug.gridd.object["startupProbe"]["exec"]["command"][2], licensed);
  EXPECT_EQ(config->cold_plug.gridd.object["readinessProbe"]["exec"]["command"][2], licensed);
  EXPECT_EQ(config->hot_plug.gridd.object["readinessProbe"]["exec"]["command"][2], licensed);
  EXPECT_FALSE(config->hot_plug.gridd.object.contains("startupProbe"));
  EXPECT_EQ(config->cold_plug.driver.object["securityContext"]["privileged"], true);
  EXPECT_EQ(config->hot_plug.driver.object["securityContext"]["privileged"], true);
  EXPECT_FALSE(config->cold_plug.driver.object.contains("restartPolicy"));
  EXPECT_EQ(config->hot_plug.driver.object["restartPolicy"], "Always");
  for (const auto* injection : {&config->hot_plug, &config->cold_plug}) {
    EXPECT_EQ(injection->driver.text, injection->driver.object.dump());
    EXPECT_EQ(injection->gridd.text, injection->gridd.object.dump());
  }
}

TEST(Config, HotPlugDriverLoaderWaitsForTheNvidiaFunctionThenStays) {
  const std::string script = DefaultConfig()->hot_plug.driver.object["args"][0];
  const std::string cold = DefaultConfig()->cold_plug.driver.object["args"][0];
  auto before = [&](const char* a, const char* b) {
    return script.find(a) != std::string::npos && script.find(a) < script.find(b);
  };
  EXPECT_TRUE(before("/sys/bus/pci/devices/*/vendor", "modprobe -d"));
  EXPECT_NE(script.find("0x10de"), std::string::npos);
  EXPECT_TRUE(before("modprobe -d", "while :; do sleep"));
  EXPECT_EQ(cold.find("sleep"), std::string::npos) << "an init container must finish";
}

TEST(Config, ClassicModeAndDroppedProbes) {
  auto config = ParseConfig("sidecarMode: classic\ngridd: {readinessProbe: null}\n");
  ASSERT_TRUE(config.ok()) << config.status().message();
  for (const auto* injection : {&config.value()->hot_plug, &config.value()->cold_plug}) {
    EXPECT_FALSE(injection->driver.object.contains("restartPolicy"));
    EXPECT_FALSE(injection->gridd.object.contains("restartPolicy"));
    // A startup probe on an ordinary container holds nothing back; readiness was dropped.
    EXPECT_FALSE(injection->gridd.object.contains("startupProbe"));
    EXPECT_FALSE(injection->gridd.object.contains("readinessProbe"));
  }
}

TEST(Config, OverridesMergeIntoNestedDefaults) {
  auto config = ParseConfig(R"(
driverInit:
  image: registry.example/loader:2
gridd:
  startupProbe: {periodSeconds: 2}
excludedNamespaces: []
)");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config.value()->cold_plug.driver.object["image"], "registry.example/loader:2");
  EXPECT_EQ(config.value()->hot_plug.driver.object["image"], "registry.example/loader:2");
  EXPECT_EQ(config.value()->cold_plug.driver.object["command"],
            DefaultConfig()->cold_plug.driver.object["command"]);
  EXPECT_EQ(config.value()->cold_plug.gridd.object["startupProbe"]["periodSeconds"], 2);
  EXPECT_EQ(config.value()->cold_plug.gridd.object["startupProbe"]["failureThreshold"], 120);
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
  ASSERT_TRUE(config.ok()) << config.status().message();
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
      {"readiness probe without command", "gridd: {readinessProbe: {command: []}}\n",
       "readinessProbe.command"},
      {"cold-plug class not in scope", "coldPlugRuntimeClassNames: [kata-vgpu-fv]\n",
       "coldPlugRuntimeClassNames entry 'kata-vgpu-fv'"},
      {"hotPlugArgs belong to the driver loader", "gridd: {hotPlugArgs: [x]}\n",
       "unknown key 'hotPlugArgs'"},
      {"probes belong to gridd", "driverInit: {readinessProbe: {command: [x]}}\n",
       "unknown key 'readinessProbe'"},
      {"bad pull policy", "gridd: {imagePullPolicy: Sometimes}\n", "imagePullPolicy"},
      {"env without value", "workload: {env: [{name: A}]}\n", "value"},
      {"duplicate env", "workload: {env: [{name: A, value: x}, {name: A, value: y}]}\n", "unique"},
      // What would make every mutated pod invalid, refused at start with the key named.
      {"annotation key with a space", "markerAnnotation: kata vgpu/injected\n",
       "markerAnnotation 'kata vgpu/injected' is not a valid annotation key"},
      {"annotation key with an upper-case prefix", "optOutAnnotation: Kata-vGPU.io/inject\n",
       "optOutAnnotation 'Kata-vGPU.io/inject'"},
      {"annotation name over 63 characters",
       "markerAnnotation: "
       "kata-vgpu.io/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
       "markerAnnotation"},
      {"annotation key with two slashes", "markerAnnotation: a.io/b/c\n", "markerAnnotation"},
      {"marker and opt-out the same", "markerAnnotation: kata-vgpu.io/inject\n", "must differ"},
      {"unknown volume source", "volumes: [{name: a, hostpath: {path: /a}}]\n",
       "volume 'a': 'hostpath' is not a volume source"},
      {"hostPath without a path", "volumes: [{name: a, hostPath: {type: Directory}}]\n",
       "volume 'a'.hostPath.path must be an absolute path"},
      {"hostPath relative", "volumes: [{name: a, hostPath: {path: opt/x}}]\n", "absolute"},
      {"hostPath type misspelt", "volumes: [{name: a, hostPath: {path: /a, type: Dir}}]\n",
       "volume 'a'.hostPath.type"},
      {"hostPath unknown key", "volumes: [{name: a, hostPath: {path: /a, readOnly: true}}]\n",
       "unknown key 'readOnly' in volume 'a'.hostPath"},
      {"emptyDir medium", "volumes: [{name: a, emptyDir: {medium: Disk}}]\n",
       "volume 'a'.emptyDir.medium"},
      {"emptyDir size not a quantity", "volumes: [{name: a, emptyDir: {sizeLimit: 1GB}}]\n",
       "volume 'a'.emptyDir.sizeLimit"},
      {"configMap without a name", "volumes: [{name: a, configMap: {}}]\n",
       "volume 'a'.configMap.name must be a non-empty string"},
      {"secret without a name", "volumes: [{name: a, secret: {name: s}}]\n",
       "volume 'a'.secret.secretName"},
      {"quantity with a bad suffix", "gridd: {resources: {limits: {memory: 64MB}}}\n",
       "gridd.resources.limits.memory must be a quantity"},
      {"negative quantity", "gridd: {resources: {requests: {cpu: -1}}}\n",
       "gridd.resources.requests.cpu must be a quantity of at least 0"},
      {"quantity that is a word", "driverInit: {resources: {limits: {cpu: lots}}}\n",
       "driverInit.resources.limits.cpu"},
      {"resource name not a name", "gridd: {resources: {limits: {'my cpu': 1}}}\n",
       "'my cpu' is not a resource name"},
      {"request above limit",
       "gridd: {resources: {requests: {memory: 128Mi}, limits: {memory: 64Mi}}}\n",
       "gridd.resources.requests.memory must not exceed limits.memory"},
  };
  for (const auto& bad : table) {
    SCOPED_TRACE(bad.description);
    auto config = ParseConfig(bad.yaml);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find(bad.message_part), std::string::npos)
        << config.status().message();
  }
}

TEST(Config, ValidNamesAndQuantitiesAreAccepted) {
  for (const char* yaml : {
           "markerAnnotation: example.com/injected\noptOutAnnotation: inject\n",
           "markerAnnotation: a.b.c/X_y.Z-9\n",
           "gridd: {resources: {requests: {cpu: 50m, memory: 0.5Gi}, limits: {cpu: '1', "
           "memory: 1e9, example.com/widget: 2}}}\n",
           "gridd: {resources: {requests: {cpu: .5, memory: 1E3}, limits: {cpu: 1.}}}\n",
           "volumes: [{name: kvgpu-driver, hostPath: {path: /opt/kata-vgpu/driver}}, "
           "{name: kvgpu-dev, hostPath: {path: /dev, type: ''}}, "
           "{name: kvgpu-gridd-conf, emptyDir: {medium: Memory, sizeLimit: 64Mi}}, "
           "{name: kvgpu-client-token, secret: {secretName: token}}, "
           "{name: extra, csi: {driver: x}}]\n",
       }) {
    SCOPED_TRACE(yaml);
    auto config = ParseConfig(yaml);
    EXPECT_TRUE(config.ok()) << config.status().message();
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
  EXPECT_NE(config.status().message().find("/nonexistent/kvgpu-webhook.yaml"), std::string::npos);
}

}  // namespace
}  // namespace kvgpu::webhook
