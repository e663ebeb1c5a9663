// The allocation env contract (allocation_env.h): what Allocate answers is what state recovery
// reads back, for every resource name shape.
#include "deviceplugin/model/allocation_env.h"

#include <gtest/gtest.h>

namespace kvgpu::deviceplugin {
namespace {

TEST(AllocationEnvTest, WhatIsRenderedParsesBackPerResource) {
  std::map<std::string, std::string> envs = {{"PATH", "/bin"}};
  EnvVgpus t4{{"0000:3b:00.0-nvidia-222-0", "0000:3b:00.0-nvidia-222-1"},
              {"uuid-a", "uuid-b"},
              {"nvidia-222", "nvidia-222"}};
  EnvVgpus h200{{"0000:c1:00.2-1414-0"}, {"0000:c1:00.2"}, {"1414"}};
  RenderAllocationEnv("tencent.com/vgpu-222", t4, envs);
  RenderAllocationEnv("example.com/vgpu-h200x-1-18c", h200, envs);
  EXPECT_EQ(envs.at("KVGPU_VGPU_222_UUIDS"), "uuid-a,uuid-b");
  EXPECT_EQ(envs.at("KVGPU_VGPU_H200X_1_18C_DEVICE_IDS"), "0000:c1:00.2-1414-0");
  std::vector<std::string> notes;
  std::vector<ParsedEnv> parsed = ParseAllocationEnv(envs, notes);
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(parsed[0].prefix, "KVGPU_VGPU_222_");
  EXPECT_EQ(parsed[0].vgpus.device_ids, t4.device_ids);
  EXPECT_EQ(parsed[0].vgpus.vgpu_ids, t4.vgpu_ids);
  EXPECT_EQ(parsed[0].vgpus.types, t4.types);
  EXPECT_EQ(parsed[1].vgpus.vgpu_ids, h200.vgpu_ids);
}

TEST(AllocationEnvTest, ListsOfDifferentLengthsAreSkippedWithANote) {
  std::map<std::string, std::string> envs = {{"KVGPU_VGPU_222_DEVICE_IDS", "a,b"},
                                             {"KVGPU_VGPU_222_UUIDS", "u"},
                                             {"KVGPU_OTHER_DEVICE_IDS", "x"}};
  std::vector<std::string> notes;
  EXPECT_TRUE(ParseAllocationEnv(envs, notes).empty()) << "no UUIDS for OTHER: not ours";
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("differ in length"), std::string::npos) << notes[0];
}

}  // namespace
}  // namespace kvgpu::deviceplugin
