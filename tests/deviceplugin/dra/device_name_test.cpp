// DRA device names (deviceplugin/dra/device_name.h): the one rule the slices publish and the
// kubelet plugin resolves; valid DNS labels for real addresses and kernel type ids, stable and
// distinct when a name has to be shortened.
#include "deviceplugin/dra/device_name.h"

#include <gtest/gtest.h>

#include <regex>

namespace kvgpu::deviceplugin::dra {
namespace {

bool IsDnsLabel(const std::string& s) {
  static const std::regex label("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  return s.size() <= 63 && std::regex_match(s, label);
}

TEST(DraDeviceName, GpuAddressTypeAndSlotBecomeADnsLabel) {
  const std::string name = DraDeviceName("0000:3b:00.0", "nvidia-222", 3);
  EXPECT_EQ(name, "gpu-0000-3b-00-0-nvidia-222-3");
  EXPECT_TRUE(IsDnsLabel(name));
}

TEST(DraDeviceName, CapitalsAndUnderscoresOfKernelTypeIdsAreLowered) {
  const std::string name = DraDeviceName("0000:00:02.0", "i915-GVTg_V5_4", 0);
  EXPECT_EQ(name, "gpu-0000-00-02-0-i915-gvtg-v5-4-0");
  EXPECT_TRUE(IsDnsLabel(name));
}

TEST(DraDeviceName, RunsOfOtherCharactersBecomeOneDash) {
  EXPECT_EQ(DraSanitize("::A__b.."), "a-b");
  EXPECT_EQ(DraGpuKey("mtty"), "gpu-mtty");
}

TEST(DraDeviceName, LongNamesAreCutWithAHashAndKeepTheirSlot) {
  const std::string type_a(80, 'a');
  const std::string type_b = std::string(79, 'a') + "b";
  const std::string a = DraDeviceName("0000:3b:00.0", type_a, 12);
  const std::string b = DraDeviceName("0000:3b:00.0", type_b, 12);
  EXPECT_TRUE(IsDnsLabel(a)) << a;
  EXPECT_EQ(a.size(), 63u);
  EXPECT_EQ(a.substr(a.size() - 3), "-12");
  EXPECT_NE(a, b);  // the hash of the whole name tells them apart
  EXPECT_EQ(a, DraDeviceName("0000:3b:00.0", type_a, 12));  // stable
}

TEST(DraDeviceName, DistinctSlotsGiveDistinctNames) {
  EXPECT_NE(DraDeviceName("mtty", "mtty-1", 1), DraDeviceName("mtty", "mtty-1", 11));
}

TEST(DraDeviceName, PoolIsTheNodeName) {
  EXPECT_EQ(DraPoolName("node-a"), "node-a");
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
