// Config dra (deviceplugin/config.h DraConfig): which GPUs DRA serves and its driver name; bad
// values are errors naming the key, and the two ways of naming GPUs exclude each other.
#include <gtest/gtest.h>

#include "deviceplugin/config.h"
#include "deviceplugin/dra/device_name.h"

namespace kvgpu::deviceplugin {
namespace {

TEST(DraConfig, OffByDefaultWithTheSharedDriverName) {
  auto config = ParseConfig("");
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(config->dra.enabled());
  EXPECT_EQ(config->dra.driver_name, dra::kDefaultDraDriverName);
}

TEST(DraConfig, GpusAndDriverNameAreRead) {
  auto config = ParseConfig("dra:\n  gpus: [0000:3b:00.0]\n  driverName: gpu.example.com\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->dra.enabled());
  EXPECT_EQ(config->dra.gpus, std::vector<std::string>{"0000:3b:00.0"});
  EXPECT_EQ(config->dra.driver_name, "gpu.example.com");
  auto all = ParseConfig("dra:\n  allGPUs: true\n");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->dra.enabled());
}

TEST(DraConfig, BadValuesNameTheKey) {
  auto bad_gpu = ParseConfig("dra:\n  gpus: [3b:00.0]\n");
  ASSERT_FALSE(bad_gpu.ok());
  EXPECT_NE(bad_gpu.status().message().find("dra.gpus"), std::string::npos);
  auto bad_name = ParseConfig("dra:\n  driverName: Not_A_Name\n");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.status().message().find("dra.driverName"), std::string::npos);
  auto unknown = ParseConfig("dra:\n  gpu: [0000:3b:00.0]\n");
  EXPECT_FALSE(unknown.ok());
}

TEST(DraConfig, AllGpusAndAListExcludeEachOther) {
  auto both = ParseConfig("dra:\n  allGPUs: true\n  gpus: [0000:3b:00.0]\n");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("exclude"), std::string::npos);
}

}  // namespace
}  // namespace kvgpu::deviceplugin
