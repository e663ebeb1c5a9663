// DRA device names (deviceplugin/dra/device_name.h): valid DNS labels, one name per key, and
// names two keys collapse onto left out rather than resolved to either.
#include <gtest/gtest.h>

#include <regex>

#include "deviceplugin/dra/device_name.h"

namespace kvgpu::deviceplugin::dra {
namespace {

bool IsDnsLabel(const std::string& s) {
  static const std::regex label("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  return s.size() <= 63 && std::regex_match(s, label);
}

TEST(DraDeviceName, PciParentAndTypeBecomeADnsLabel) {
  auto name = DraDeviceName({"0000:3b:00.0", "nvidia-222", 3});
  ASSERT_TRUE(name);
  EXPECT_EQ(*name, "0000-3b-00-0-nvidia-222-3");
  EXPECT_TRUE(IsDnsLabel(*name));
}

TEST(DraDeviceName, CapitalsAndUnderscoresOfKernelTypeIdsAreLowered) {
  auto name = DraDeviceName({"0000:00:02.0", "i915-GVTg_V5_4", 0});
  ASSERT_TRUE(name);
  EXPECT_EQ(*name, "0000-00-02-0-i915-gvtg-v5-4-0");
  EXPECT_TRUE(IsDnsLabel(*name));
}

TEST(DraDeviceName, TooLongOrEmptyGivesNoName) {
  EXPECT_FALSE(DraDeviceName({std::string(60, 'a'), "nvidia-222", 1}));
  EXPECT_FALSE(DraDeviceName({"", "nvidia-222", 1}));
  EXPECT_FALSE(DraDeviceName({"0000:3b:00.0", "", 1}));
  EXPECT_FALSE(DraDeviceName({":weird", "nvidia-1", 1}));  // would start with '-'
}

TEST(DraDeviceName, DistinctSlotsGiveDistinctNames) {
  EXPECT_NE(DraDeviceName({"mtty", "mtty-1", 1}), DraDeviceName({"mtty", "mtty-1", 11}));
}

TEST(DraDeviceName, CollidingKeysAreLeftOutOnBothSides) {
  std::vector<DeviceKey> keys = {{"p", "a_b", 0}, {"p", "a-b", 0}, {"p", "c", 0}};
  std::vector<std::string> collisions;
  auto names = UniqueDraNames(keys, &collisions);
  EXPECT_EQ(names.size(), 1u);
  EXPECT_EQ(names.count("p-c-0"), 1u);
  ASSERT_EQ(collisions.size(), 1u);
  EXPECT_EQ(collisions[0], "p-a-b-0");
}

TEST(DraDeviceName, TheSameKeyTwiceIsNoCollision) {
  auto names = UniqueDraNames({{"p", "c", 0}, {"p", "c", 0}});
  EXPECT_EQ(names.size(), 1u);
}

TEST(DraDeviceName, PoolIsTheNodeName) {
  EXPECT_EQ(DraPoolName("node-a"), "node-a");
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
