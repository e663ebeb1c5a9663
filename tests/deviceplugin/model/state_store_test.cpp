// The record of vGPUs this plugin created: round trip, atomic replacement, corrupt input.
#include "deviceplugin/model/state_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "fakes/common/temp_dir.h"

namespace kvgpu::deviceplugin {
namespace {

std::vector<CreatedVgpu> Sample() {
  return {
      {"0000:3b:00.0-nvidia-222-0", "tencent.com/vgpu-222", "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
       "0000:3b:00.0", "0000:3b:00.0", "nvidia-222", 0, 1700000000, std::nullopt},
      {"0000:41:00.4-1414-0", "tencent.com/vgpu-1414", "0000:41:00.4", "0000:41:00.4",
       "0000:41:00.0", "1414", 0, 1700000001, "default/train-0",
       "5f0a2c1e-8d3b-4b7e-9a61-2c4d8e0f7a13"}};
}

TEST(DevicePluginStateTest, WhatIsSavedLoadsBackTheSame) {
  kvgpu::testing::TempDir dir;
  JsonFileStateStore store(dir.path() / "state");
  auto empty = store.Load();
  ASSERT_TRUE(empty.ok()) << "no file yet is an empty record";
  EXPECT_TRUE(empty->empty());
  ASSERT_TRUE(store.Save(Sample()).ok());
  auto loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, Sample());
  EXPECT_FALSE(std::filesystem::exists(store.file().string() + ".tmp"));
}

TEST(DevicePluginStateTest, CorruptRecordsAreErrorsNamingTheProblem) {
  struct Case {
    std::string description;
    std::string text;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"truncated", R"({"version":1,"vgpus":[{"deviceID":)", "not a JSON object"},
      {"unknown version", R"({"version":7,"vgpus":[]})", "version"},
      {"no list", R"({"version":1})", "vgpus"},
      {"entry without a field", R"({"version":1,"vgpus":[{"deviceID":"x"}]})", "entry 0"},
      {"wrong type", R"({"version":1,"vgpus":[{"deviceID":1}]})", "entry 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    auto decoded = DecodeState(c.text);
    ASSERT_FALSE(decoded.ok());
    EXPECT_NE(decoded.status().message().find(c.message_part), std::string::npos)
        << decoded.status().message();
  }
}

TEST(DevicePluginStateTest, AFailedWriteLeavesThePreviousRecord) {
  if (::geteuid() == 0) {
    // Root ignores directory permissions; fill the temp file's place with a directory instead.
    kvgpu::testing::TempDir dir;
    JsonFileStateStore store(dir.path());
    ASSERT_TRUE(store.Save(Sample()).ok());
    std::filesystem::create_directory(store.file().string() + ".tmp");
    EXPECT_FALSE(store.Save({}).ok());
    auto loaded = store.Load();
    ASSERT_TRUE(loaded.ok());
    EXPECT_EQ(*loaded, Sample());
    return;
  }
  kvgpu::testing::TempDir dir;
  JsonFileStateStore store(dir.path());
  ASSERT_TRUE(store.Save(Sample()).ok());
  ::chmod(dir.path().c_str(), 0500);
  EXPECT_FALSE(store.Save({}).ok());
  ::chmod(dir.path().c_str(), 0700);
  EXPECT_EQ(*store.Load(), Sample());
}

}  // namespace
}  // namespace kvgpu::deviceplugin
