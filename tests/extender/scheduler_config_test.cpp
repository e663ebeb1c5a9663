// The shipped kube-scheduler configuration sends the extender every resource a device plugin can
// advertise: kube-scheduler calls an extender only for pods asking for one of its
// managedResources (exact names), and a pod asking for any other vGPU resource would be placed on
// counts alone and fail admission. The resources are what the plugin's own naming makes of every
// type the project's simulated GPUs (T4, A100 with SR-IOV, H200 vendor VFIO, mtty) show to a scan,
// in both naming styles.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "deviceplugin/model/resource_naming.h"
#include "fakes/common/sim_node.h"
#include "sim/kernel_model.h"

namespace kvgpu::testing {
namespace {

std::set<std::string> AdvertisableResources() {
  std::set<std::string> names;
  for (const std::string& profile : sim::ProfileNames()) {
    SimNode node(profile);
    Result<mdev::Inventory> inventory = node.node().Scan();
    EXPECT_TRUE(inventory.ok()) << profile;
    if (!inventory.ok()) continue;
    for (const mdev::Parent& parent : inventory->parents) {
      for (const mdev::VgpuType& type : parent.types) {
        for (auto style : {deviceplugin::NamingStyle::kType, deviceplugin::NamingStyle::kProfile}) {
          Result<std::string> name = deviceplugin::ResourceNameFor({"tencent.com", style}, type);
          EXPECT_TRUE(name.ok()) << type.id;
          if (name.ok()) names.insert(*name);
        }
      }
    }
  }
  return names;
}

std::set<std::string> ManagedResources(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  const std::string yaml = text.str();
  std::set<std::string> names;
  static const std::regex kEntry(R"(\n  - name: (\S+)\n    ignoredByScheduler: false)");
  for (std::sregex_iterator it(yaml.begin(), yaml.end(), kEntry), end; it != end; ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

TEST(SchedulerConfigTest, TheShippedConfigManagesEveryResourceThePluginsCanAdvertise) {
  const std::set<std::string> advertisable = AdvertisableResources();
  const std::set<std::string> managed =
      ManagedResources(KVGPU_SOURCE_DIR "/deploy/scheduler/kube-scheduler-config.yaml");
  ASSERT_GT(advertisable.size(), 20u);
  std::string missing;
  std::string expected;
  for (const std::string& name : advertisable) {
    if (!managed.contains(name)) missing += " " + name;
    expected += "  - name: " + name + "\n    ignoredByScheduler: false\n";
  }
  EXPECT_TRUE(missing.empty()) << "not in managedResources:" << missing
                               << "\nthe whole list, to paste:\n"
                               << expected;
}

}  // namespace
}  // namespace kvgpu::testing
