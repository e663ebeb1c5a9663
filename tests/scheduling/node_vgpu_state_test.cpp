// The published node state: what the plugin renders the extender parses back to the same value,
// and anything else (another version, a missing or mistyped field, not JSON) is refused with the
// field named, never half read.
#include "scheduling/node_vgpu_state.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvgpu::scheduling {
namespace {

NodeVgpuState Sample() {
  NodeVgpuState state;
  state.node = "gpu-node-1";
  state.generation = 12;
  state.published_unix_ms = 1'764'130'000'000;
  state.policy = Policy::kSpread;
  GpuSlots gpu;
  gpu.id = "0000:3b:00.0";
  gpu.LockTo("nvidia-222");
  gpu.resources["tencent.com/vgpu-222"] = {"nvidia-222", 2, 14};
  gpu.resources["tencent.com/vgpu-223"] = {"nvidia-223", 0, 0};
  GpuSlots idle;
  idle.id = "0000:af:00.0";
  idle.resources["tencent.com/vgpu-222"] = {"nvidia-222", 0, 16};
  state.gpus = {gpu, idle};
  state.holders = {"ml/train-0"};
  state.unattributed = {{"tencent.com/vgpu-222", 1}};
  return state;
}

TEST(NodeVgpuStateTest, WhatThePluginRendersTheExtenderReadsBackUnchanged) {
  const NodeVgpuState state = Sample();
  Result<NodeVgpuState> parsed = ParseNodeState(RenderNodeState(state));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->SameContent(state));
  EXPECT_EQ(parsed->generation, 12u);
  EXPECT_EQ(parsed->published_unix_ms, 1'764'130'000'000);
}

TEST(NodeVgpuStateTest, SameContentIgnoresGenerationAndTimeOnly) {
  NodeVgpuState a = Sample();
  NodeVgpuState b = Sample();
  b.generation = 13;
  b.published_unix_ms += 1000;
  EXPECT_TRUE(a.SameContent(b));
  b.gpus[1].resources["tencent.com/vgpu-222"].free = 15;
  EXPECT_FALSE(a.SameContent(b));
  b = Sample();
  b.holders.insert("ml/train-1");
  EXPECT_FALSE(a.SameContent(b));
}

// Version 2: an equal-size GPU (locked to 1024 MiB), and one whose rule is not modelled.
NodeVgpuState SampleV2() {
  NodeVgpuState state = Sample();
  state.version = 2;
  state.gpus[0].occupancy = Occupancy::kEqualSize;
  state.gpus[0].resources["tencent.com/vgpu-222"].framebuffer_mib = 1024;
  state.gpus[0].resources["tencent.com/vgpu-223"].framebuffer_mib = 2048;
  state.gpus[0].LockTo("nvidia-222", 1024);
  state.gpus[1].occupancy = Occupancy::kMixedSize;
  state.gpus[1].resources["tencent.com/vgpu-222"].framebuffer_mib = 1024;
  return state;
}

TEST(NodeVgpuStateTest, VersionTwoCarriesEachGpusModeLockAndTypeFramebuffers) {
  const NodeVgpuState state = SampleV2();
  Result<NodeVgpuState> parsed = ParseNodeState(RenderNodeState(state));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->SameContent(state));
  EXPECT_EQ(parsed->gpus[0].lock, "framebuffer:1024MiB");
  EXPECT_EQ(parsed->gpus[1].occupancy, Occupancy::kMixedSize);
}

// The upgrade rule's safe direction: an extender that reads only version 1 sees an equal-size GPU
// as locked to the type of its first vGPU - stricter than the GPU, never looser.
TEST(NodeVgpuStateTest, VersionOneOfAnEqualSizeGpuReadsBackAsTheStrictRuleOnItsFirstType) {
  NodeVgpuState state = SampleV2();
  state.version = 1;
  const nlohmann::json doc = nlohmann::json::parse(RenderNodeState(state));
  EXPECT_FALSE(doc["gpus"][0].contains("occupancy")) << "version 1 has no such field";
  Result<NodeVgpuState> parsed = ParseNodeState(doc.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->gpus[0].occupancy, Occupancy::kStrict);
  EXPECT_EQ(parsed->gpus[0].lock, "type:nvidia-222");
  EXPECT_EQ(parsed->gpus[1].occupancy, Occupancy::kStrict)
      << "a GPU with a rule not in version 1 is written as strict";
}

// N+1: a later plugin's version 3 only adds fields; this reader takes what it knows.
TEST(NodeVgpuStateTest, TheNextVersionIsReadAsTheNewestKnownIgnoringWhatItAdds) {
  nlohmann::json doc = nlohmann::json::parse(RenderNodeState(SampleV2()));
  doc["version"] = 3;
  doc["gpus"][0]["placements"] = {{"free", {0, 4, 8}}};
  doc["somethingNew"] = true;
  Result<NodeVgpuState> parsed = ParseNodeState(doc.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->gpus[0].lock, "framebuffer:1024MiB");
}

TEST(NodeVgpuStateTest, AnythingButTheFormatIsRefusedWithTheFieldNamed) {
  const nlohmann::json good = nlohmann::json::parse(RenderNodeState(Sample()));
  struct Case {
    std::string description;
    std::function<void(nlohmann::json&)> spoil;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"two versions on", [](nlohmann::json& j) { j["version"] = 4; }, "version 4"},
      {"version 0", [](nlohmann::json& j) { j["version"] = 0; }, "1 to 3"},
      {"no gpus", [](nlohmann::json& j) { j.erase("gpus"); }, "gpus"},
      {"a negative count",
       [](nlohmann::json& j) { j["gpus"][0]["resources"]["tencent.com/vgpu-222"]["free"] = -1; },
       "gpus[0].resources[tencent.com/vgpu-222].free"},
      {"a count as text",
       [](nlohmann::json& j) { j["gpus"][1]["resources"]["tencent.com/vgpu-222"]["used"] = "0"; },
       "gpus[1].resources[tencent.com/vgpu-222].used"},
      {"an unknown policy", [](nlohmann::json& j) { j["policy"] = "binpack"; }, "binpack"},
      {"a holder that is not a name", [](nlohmann::json& j) { j["holders"] = {1}; }, "holders"},
      {"oneType as text", [](nlohmann::json& j) { j["gpus"][0]["oneType"] = "true"; },
       "gpus[0].oneType"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    nlohmann::json spoiled = good;
    c.spoil(spoiled);
    Result<NodeVgpuState> parsed = ParseNodeState(spoiled.dump());
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalid);
    EXPECT_NE(parsed.status().message().find(c.says), std::string::npos)
        << parsed.status().message();
  }
  const nlohmann::json good2 = nlohmann::json::parse(RenderNodeState(SampleV2()));
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"occupancy", "equal"}, {"occupancy", 1}, {"lock", nullptr}}) {
    nlohmann::json spoiled = good2;
    spoiled["gpus"][0][field] = value;
    Result<NodeVgpuState> parsed = ParseNodeState(spoiled.dump());
    ASSERT_FALSE(parsed.ok()) << field;
    EXPECT_NE(parsed.status().message().find("gpus[0]." + field), std::string::npos)
        << parsed.status().message();
  }
  for (const std::string text : {"", "null", "[1]", "{\"version\":1", "not json"}) {
    EXPECT_FALSE(ParseNodeState(text).ok()) << text;
  }
}

}  // namespace
}  // namespace kvgpu::scheduling
