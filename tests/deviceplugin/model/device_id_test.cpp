// Device IDs are made and taken apart in one place (device_id.h); state recovery depends on the
// two agreeing for every parent and type name the kernel can show.
#include "deviceplugin/model/device_id.h"

#include <gtest/gtest.h>

namespace kvgpu::deviceplugin {
namespace {

TEST(DeviceIdTest, ParseTakesApartExactlyWhatMakeBuilds) {
  const std::vector<DeviceKey> keys = {{"0000:3b:00.0", "nvidia-222", 3},
                                       {"0000:41:00.4", "nvidia-692", 0},
                                       {"mtty", "mtty-2", 12},
                                       {"0000:c1:00.2", "1414", 999999}};
  for (const DeviceKey& key : keys) {
    std::string id = MakeDeviceId(key);
    EXPECT_EQ(ParseDeviceId(id, key.parent, key.type_id), key) << id;
  }
}

TEST(DeviceIdTest, ParseRefusesIdsOfAnotherParentTypeOrASlotThatIsNoNumber) {
  EXPECT_FALSE(ParseDeviceId("0000:3b:00.0-nvidia-222-3", "0000:af:00.0", "nvidia-222"));
  EXPECT_FALSE(ParseDeviceId("0000:3b:00.0-nvidia-222-3", "0000:3b:00.0", "nvidia-22"));
  EXPECT_FALSE(ParseDeviceId("mtty-mtty-2-", "mtty", "mtty-2")) << "no slot";
  EXPECT_FALSE(ParseDeviceId("mtty-mtty-2-x", "mtty", "mtty-2"));
  EXPECT_FALSE(ParseDeviceId("mtty-mtty-2-01", "mtty", "mtty-2")) << "Make never pads";
  EXPECT_FALSE(ParseDeviceId("mtty-mtty-2-1234567", "mtty", "mtty-2")) << "over 6 digits";
  EXPECT_FALSE(ParseDeviceId("mtty-mtty-2-1\n", "mtty", "mtty-2"));
}

}  // namespace
}  // namespace kvgpu::deviceplugin
