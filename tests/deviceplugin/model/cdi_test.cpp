// CDI names and spec files.
#include "deviceplugin/model/cdi.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fakes/common/temp_dir.h"

namespace kvgpu::deviceplugin {
namespace {

TEST(DevicePluginCdiTest, KindsAndDeviceNamesFollowTheCdiRules) {
  EXPECT_TRUE(ValidateCdiKind("tencent.com/vgpu-222").ok());
  EXPECT_TRUE(ValidateCdiKind("tencent.com/vgpu-mtty-2").ok());
  EXPECT_FALSE(ValidateCdiKind("tencent.com/vgpu_1.q").ok()) << "no '.' in a CDI class";
  EXPECT_FALSE(ValidateCdiKind("tencent.com").ok());
  EXPECT_TRUE(IsValidCdiDeviceName("0000:3b:00.0-nvidia-222-0"));
  EXPECT_FALSE(IsValidCdiDeviceName("-x"));
  EXPECT_FALSE(IsValidCdiDeviceName("a/b"));
}

TEST(DevicePluginCdiTest, SpecNamesEachDeviceWithItsVfioGroupAndIsRemovedWhenEmpty) {
  kvgpu::testing::TempDir dir;
  ASSERT_TRUE(WriteCdiSpec(dir.path(), "tencent.com/vgpu-222",
                           {{"0000:3b:00.0-nvidia-222-0", "/dev/vfio/12", "uuid-a"}})
                  .ok());
  std::filesystem::path path = CdiSpecPath(dir.path(), "tencent.com/vgpu-222");
  EXPECT_EQ(path.filename(), "kata-vgpu_tencent.com_vgpu-222.json");
  auto spec = nlohmann::json::parse(std::ifstream(path));
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "tencent.com/vgpu-222");
  EXPECT_EQ(spec["devices"][0]["name"], "0000:3b:00.0-nvidia-222-0");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/vfio/12");
  EXPECT_EQ(spec["containerEdits"]["deviceNodes"][0]["path"], "/dev/vfio/vfio");
  ASSERT_TRUE(WriteCdiSpec(dir.path(), "tencent.com/vgpu-222", {}).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace kvgpu::deviceplugin
