// The command line contract: flag spellings, defaults, $NODE_NAME, and --help content.
#include "deviceplugin/cli.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <sstream>

namespace kvgpu::deviceplugin {
namespace {

ParsedCommandLine Parse(std::vector<const char*> args, std::string* out = nullptr,
                        std::string* err = nullptr) {
  args.insert(args.begin(), "kvgpu-device-plugin");
  std::ostringstream o, e;
  ParsedCommandLine parsed = ParseCommandLine(static_cast<int>(args.size()), args.data(), o, e);
  if (out) *out = o.str();
  if (err) *err = e.str();
  return parsed;
}

TEST(DevicePluginCliTest, DefaultsAreTheDocumentedPaths) {
  ::unsetenv("NODE_NAME");
  ParsedCommandLine parsed = Parse({});
  ASSERT_FALSE(parsed.exit_code);
  EXPECT_EQ(parsed.args.sysfs_root, "/");
  EXPECT_EQ(parsed.args.kubelet_dir, "/var/lib/kubelet");
  EXPECT_EQ(parsed.args.state_dir, "/var/lib/kata-vgpu");
  EXPECT_EQ(parsed.args.KubeletSocket(), "/var/lib/kubelet/device-plugins/kubelet.sock");
  EXPECT_EQ(parsed.args.node_name, "");
  EXPECT_FALSE(parsed.args.config_file);
  EXPECT_EQ(parsed.args.metrics_addr, "");
  EXPECT_FALSE(parsed.args.kubeconfig);
  EXPECT_FALSE(parsed.args.licensing_source) << "nothing is published unless asked";
  EXPECT_EQ(parsed.args.licensing_dir, "/var/lib/kata-vgpu/licensing");
  EXPECT_EQ(parsed.args.PodResourcesSocket(), "/var/lib/kubelet/pod-resources/kubelet.sock");
}

TEST(DevicePluginCliTest, EveryFlagIsTaken) {
  ParsedCommandLine parsed =
      Parse({"--sysfs-root", "/tmp/s", "--kubelet-dir", "/tmp/k", "--state-dir", "/tmp/st",
             "--node-name", "node-1", "--config", "/etc/c.yaml", "--metrics-addr", "0.0.0.0:9402",
             "--kubeconfig", "/root/.kube/config", "--licensing-source", "/etc/kata-vgpu/licensing",
             "--licensing-dir", "/var/lib/kvgpu/lic"});
  ASSERT_FALSE(parsed.exit_code);
  EXPECT_EQ(parsed.args.sysfs_root, "/tmp/s");
  EXPECT_EQ(parsed.args.DevicePluginDir(), "/tmp/k/device-plugins");
  EXPECT_EQ(parsed.args.state_dir, "/tmp/st");
  EXPECT_EQ(parsed.args.node_name, "node-1");
  EXPECT_EQ(parsed.args.config_file, "/etc/c.yaml");
  EXPECT_EQ(parsed.args.metrics_addr, "0.0.0.0:9402");
  EXPECT_EQ(parsed.args.kubeconfig, "/root/.kube/config");
  EXPECT_EQ(parsed.args.licensing_source, "/etc/kata-vgpu/licensing");
  EXPECT_EQ(parsed.args.licensing_dir, "/var/lib/kvgpu/lic");
}

TEST(DevicePluginCliTest, NodeNameDefaultsToTheEnvironment) {
  ::setenv("NODE_NAME", "from-env", 1);
  EXPECT_EQ(Parse({}).args.node_name, "from-env");
  EXPECT_EQ(Parse({"--node-name", "flag"}).args.node_name, "flag");
  ::unsetenv("NODE_NAME");
}

TEST(DevicePluginCliTest, HelpDocumentsEveryFlagAndConfigKey) {
  std::string out;
  ParsedCommandLine parsed = Parse({"--help"}, &out);
  ASSERT_EQ(parsed.exit_code, 0);
  for (const char* word :
       {"--sysfs-root",   "--kubelet-dir",    "--state-dir",    "--node-name",
        "--config",       "--metrics-addr",   "resourceDomain", "namingStyle",
        "allowedTypes",   "pinning",          "pciAddress",     "model",
        "all:",           "spreadAcrossGPUs", "cdi:",           "enabled",
        "dir:",           "rescanInterval",   "udevEvents",     "logLevel",
        "--kubeconfig",   "lifecycle:",       "gracePeriod",    "pollInterval",
        "retryMax",       "watchPods",        "events:",        "--licensing-source",
        "--licensing-dir"}) {
    EXPECT_NE(out.find(word), std::string::npos) << word;
  }
}

TEST(DevicePluginCliTest, UsageErrorsExitNonZero) {
  struct Case {
    std::string description;
    std::vector<const char*> args;
  };
  const std::vector<Case> cases = {
      {"unknown flag", {"--sysfs", "/"}},
      {"missing value", {"--state-dir"}},
      {"metrics address without port", {"--metrics-addr", "localhost"}},
      {"metrics port out of range", {"--metrics-addr", ":99999"}},
      {"empty directory", {"--kubelet-dir", ""}},
      {"relative licensing dir", {"--licensing-source", "/src", "--licensing-dir", "lic"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    std::string err;
    ParsedCommandLine parsed = Parse(c.args, nullptr, &err);
    ASSERT_TRUE(parsed.exit_code);
    EXPECT_NE(*parsed.exit_code, 0);
    EXPECT_FALSE(err.empty());
  }
}

}  // namespace
}  // namespace kvgpu::deviceplugin
