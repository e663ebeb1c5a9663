// DeviceClasses (deviceplugin/dra/device_classes.h): the shipped ones select each type the
// device plugin names, with the same extended resource name, so a pod asking for
// tencent.com/vgpu-<type> runs through DRA unchanged. The catalogue is the one the scheduler
// config test uses: every type the project's simulated GPUs show to a scan.
#include "deviceplugin/dra/device_classes.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include "deviceplugin/dra/resource_slices.h"
#include "fakes/common/sim_node.h"
#include "sim/kernel_model.h"

namespace kvgpu::deviceplugin::dra {
namespace {

using nlohmann::json;

std::vector<mdev::VgpuType> SimulatedTypes() {
  std::vector<mdev::VgpuType> types;
  for (const std::string& profile : sim::ProfileNames()) {
    kvgpu::testing::SimNode node(profile);
    Result<mdev::Inventory> inventory = node.node().Scan();
    EXPECT_TRUE(inventory.ok()) << profile;
    if (!inventory.ok()) continue;
    for (const mdev::Parent& parent : inventory->parents) {
      types.insert(types.end(), parent.types.begin(), parent.types.end());
    }
  }
  return types;
}

// The shipped classes as {name: (expression, extendedResourceName)}.
std::map<std::string, std::pair<std::string, std::string>> Shipped() {
  std::map<std::string, std::pair<std::string, std::string>> out;
  for (const YAML::Node& doc :
       YAML::LoadAllFromFile(KVGPU_SOURCE_DIR "/deploy/components/dra/device-classes.yaml")) {
    if (!doc || doc["kind"].as<std::string>() != "DeviceClass") continue;
    const YAML::Node spec = doc["spec"];
    std::string resource =
        spec["extendedResourceName"] ? spec["extendedResourceName"].as<std::string>() : "";
    out[doc["metadata"]["name"].as<std::string>()] = {
        spec["selectors"][0]["cel"]["expression"].as<std::string>(), resource};
  }
  return out;
}

std::string Yaml(const json& device_class) {
  std::string text = "---\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: " +
                     device_class["metadata"]["name"].get<std::string>() +
                     "\nspec:\n  selectors:\n  - cel:\n      expression: '" +
                     device_class["spec"]["selectors"][0]["cel"]["expression"].get<std::string>() +
                     "'\n";
  if (device_class["spec"].contains("extendedResourceName")) {
    text += "  extendedResourceName: " +
            device_class["spec"]["extendedResourceName"].get<std::string>() + "\n";
  }
  return text;
}

TEST(DeviceClassesTest, TheShippedClassesAreThoseOfEveryTypeThePluginNames) {
  Result<std::vector<json>> classes =
      TypeDeviceClasses(kDefaultDriverName, NamingOptions{}, SimulatedTypes());
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  classes->insert(classes->begin(), DriverDeviceClass(kDefaultDriverName));
  ASSERT_GT(classes->size(), 20u);
  std::map<std::string, std::pair<std::string, std::string>> expected;
  std::string paste;
  for (const json& c : *classes) {
    expected[c["metadata"]["name"]] = {c["spec"]["selectors"][0]["cel"]["expression"],
                                       c["spec"].value("extendedResourceName", "")};
    paste += Yaml(c);
  }
  EXPECT_EQ(Shipped(), expected) << "deploy/components/dra/device-classes.yaml should be:\n"
                                 << paste;
}

TEST(DeviceClassesTest, ATypeClassSelectsItsDriverAndTypeAndMapsTheExtendedResource) {
  mdev::VgpuType type;
  type.id = "nvidia-230";
  Result<std::vector<json>> classes =
      TypeDeviceClasses("vgpu.tencent.com", NamingOptions{}, {type});
  ASSERT_TRUE(classes.ok());
  ASSERT_EQ(classes->size(), 1u);
  const json& c = classes->front();
  EXPECT_EQ(c["metadata"]["name"], "vgpu-230.vgpu.tencent.com");
  EXPECT_EQ(c["spec"]["extendedResourceName"], "tencent.com/vgpu-230");
  EXPECT_EQ(c["spec"]["selectors"][0]["cel"]["expression"],
            "device.driver == \"vgpu.tencent.com\" && "
            "device.attributes[\"vgpu.tencent.com\"].type == \"nvidia-230\"");
}

TEST(DeviceClassesTest, TypeIdsThatShareAResourceShareAClass) {
  mdev::VgpuType mdev_type;
  mdev_type.id = "nvidia-230";
  mdev::VgpuType vfio_type;
  vfio_type.id = "230";
  Result<std::vector<json>> classes =
      TypeDeviceClasses("vgpu.tencent.com", NamingOptions{}, {mdev_type, vfio_type});
  ASSERT_TRUE(classes.ok());
  ASSERT_EQ(classes->size(), 1u);
  EXPECT_EQ(classes->front()["spec"]["selectors"][0]["cel"]["expression"],
            "device.driver == \"vgpu.tencent.com\" && "
            "device.attributes[\"vgpu.tencent.com\"].type in [\"230\", \"nvidia-230\"]");
}

TEST(DeviceClassesTest, RefusesABadDriverName) {
  EXPECT_FALSE(TypeDeviceClasses("Not_A_Domain", NamingOptions{}, {}).ok());
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
