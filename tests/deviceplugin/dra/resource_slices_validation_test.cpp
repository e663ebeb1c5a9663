// The API server's ResourceSlice checks that the OpenAPI schema does not carry
// (deviceplugin/dra/resource_slices_validation.cpp), on slices built for a simulated node and
// then broken one rule at a time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "deviceplugin/dra/resource_slices.h"
#include "fakes/common/sim_node.h"

namespace kvgpu::deviceplugin::dra {
namespace {

using kvgpu::testing::SimNode;
using nlohmann::json;

// Named apart from resource_slices_test.cpp's helpers: the two files share a unity batch.
mdev::Inventory ValidatedScan(SimNode& node) {
  Result<mdev::Inventory> inventory = node.node().Scan();
  EXPECT_TRUE(inventory.ok()) << inventory.status().ToString();
  return inventory.ok() ? *inventory : mdev::Inventory{};
}

SliceOptions ValidatedOptions() {
  SliceOptions options;
  options.node_name = "node-a";
  return options;
}

std::vector<json> ValidatedBuild(const mdev::Inventory& inventory, const SliceOptions& options) {
  const GpuRules rules(inventory, options.model.occupancy, nullptr, nullptr);
  Result<std::vector<json>> slices = BuildResourceSlices(inventory, rules, options, 1);
  EXPECT_TRUE(slices.ok()) << slices.status().ToString();
  return slices.ok() ? *slices : std::vector<json>{};
}

json ValidSlice() {
  SimNode node("t4x2");
  return ValidatedBuild(ValidatedScan(node), ValidatedOptions())[1];  // a device slice
}

TEST(ValidateSliceTest, RefusesWhatTheApiServerRefuses) {
  const json good = ValidSlice();
  ASSERT_TRUE(ValidateSlice(good).ok());
  ASSERT_FALSE(good["spec"]["devices"].empty());

  json both = good;
  both["spec"]["sharedCounters"] =
      json::array({{{"name", "x"}, {"counters", {{"framebuffer", {{"value", "1Gi"}}}}}}});
  EXPECT_FALSE(ValidateSlice(both).ok()) << "devices and sharedCounters in one slice";

  json many = good;
  while (many["spec"]["devices"].size() <= kMaxDevicesPerSliceConsumingCounters) {
    json d = many["spec"]["devices"][0];
    d["name"] = "extra-" + std::to_string(many["spec"]["devices"].size());
    many["spec"]["devices"].push_back(d);
  }
  EXPECT_FALSE(ValidateSlice(many).ok()) << "65 devices consuming counters";
  for (json& d : many["spec"]["devices"]) d.erase("consumesCounters");
  EXPECT_TRUE(ValidateSlice(many).ok()) << "65 devices are fine without counters";

  json bad_name = good;
  bad_name["spec"]["devices"][0]["name"] = "GPU_0";
  EXPECT_FALSE(ValidateSlice(bad_name).ok());
  bad_name["spec"]["devices"][0]["name"] = std::string(64, 'a');
  EXPECT_FALSE(ValidateSlice(bad_name).ok());

  json long_value = good;
  long_value["spec"]["devices"][0]["attributes"]["type"]["string"] = std::string(65, 'a');
  EXPECT_FALSE(ValidateSlice(long_value).ok());

  json bad_attribute = good;
  bad_attribute["spec"]["devices"][0]["attributes"]["1type"] = {{"string", "x"}};
  EXPECT_FALSE(ValidateSlice(bad_attribute).ok());

  json too_many = good;
  for (int i = 0; i < 32; ++i) {
    too_many["spec"]["devices"][0]["attributes"]["a" + std::to_string(i)] = {{"int", i}};
  }
  EXPECT_FALSE(ValidateSlice(too_many).ok()) << "over 32 attributes and capacities";

  json three_uses = good;
  json& uses = three_uses["spec"]["devices"][0]["consumesCounters"];
  uses.push_back(uses[0]);
  uses[1]["counterSet"] = "b";
  uses.push_back(uses[0]);
  uses[2]["counterSet"] = "c";
  EXPECT_FALSE(ValidateSlice(three_uses).ok());

  json groups = good;
  json& use = groups["spec"]["devices"][0]["consumesCounters"][0];
  use["compatibilityGroups"] = json::array({"type-nvidia-222"});
  EXPECT_TRUE(ValidateSlice(groups).ok());
  use["compatibilityGroups"] = json::array({"a", "b", "c"});
  EXPECT_FALSE(ValidateSlice(groups).ok()) << "three compatibility groups";
  use["compatibilityGroups"] = json::array({"a", "a"});
  EXPECT_FALSE(ValidateSlice(groups).ok()) << "a group twice";
  use["compatibilityGroups"] = json::array({"Type:222"});
  EXPECT_FALSE(ValidateSlice(groups).ok()) << "not a DNS label";

  json no_count = good;
  no_count["spec"]["pool"]["resourceSliceCount"] = 0;
  EXPECT_FALSE(ValidateSlice(no_count).ok());

  json two_selections = good;
  two_selections["spec"]["allNodes"] = true;
  EXPECT_FALSE(ValidateSlice(two_selections).ok());

  json upper_driver = good;
  upper_driver["spec"]["driver"] = "VGPU.tencent.com";
  EXPECT_FALSE(ValidateSlice(upper_driver).ok());
}

TEST(ValidateSliceTest, NineCounterSetsAreTooMany) {
  json slice = ValidSlice();
  slice["spec"].erase("devices");
  slice["spec"]["sharedCounters"] = json::array();
  for (int i = 0; i < 9; ++i) {
    slice["spec"]["sharedCounters"].push_back(
        {{"name", "s" + std::to_string(i)}, {"counters", {{"framebuffer", {{"value", "1Gi"}}}}}});
  }
  EXPECT_FALSE(ValidateSlice(slice).ok());
  slice["spec"]["sharedCounters"].erase(8);
  EXPECT_TRUE(ValidateSlice(slice).ok());
}

TEST(ValidatePoolTest, RefusesAWrongCountAnUndefinedSetAndDuplicates) {
  SimNode node("t4x2");
  const std::vector<json> slices = ValidatedBuild(ValidatedScan(node), ValidatedOptions());
  ASSERT_TRUE(ValidatePool(slices).ok());

  std::vector<json> missing(slices.begin() + 1, slices.end());  // the counter slice gone
  EXPECT_FALSE(ValidatePool(missing).ok());
  for (json& s : missing) s["spec"]["pool"]["resourceSliceCount"] = missing.size();
  EXPECT_FALSE(ValidatePool(missing).ok()) << "devices consume a counter set nobody defines";

  std::vector<json> mixed = slices;
  mixed[2]["spec"]["pool"]["generation"] = 2;
  EXPECT_FALSE(ValidatePool(mixed).ok());

  std::vector<json> twice = slices;
  twice[2]["spec"]["devices"][0]["name"] = twice[1]["spec"]["devices"][0]["name"];
  EXPECT_FALSE(ValidatePool(twice).ok());
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
