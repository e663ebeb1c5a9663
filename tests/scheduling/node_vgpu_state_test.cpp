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

// A mixed-size GPU carrying a 4 GiB vGPU at slot 0 and a MIG GPU with one 1g instance in use.
NodeVgpuState SampleV3() {
  NodeVgpuState state = SampleV2();
  state.version = 3;
  GpuSlots& mixed = state.gpus[1];
  mixed.resources["tencent.com/vgpu-222"].placements = {4, {0, 4, 8, 12}};
  mixed.used_slots = {{0, 4}};
  GpuSlots mig;
  mig.id = "0000:41:00.0";
  mig.occupancy = Occupancy::kMig;
  mig.resources["tencent.com/vgpu-1414"] = {"1414", 1, 3, 18432};
  mig.resources["tencent.com/vgpu-1414"].gi_profile = 19;
  mig.resources["tencent.com/vgpu-1414"].max_per_gi = 1;
  mig.gpu_instances = {{1, 19, 18432, 1}, {2, 19, 0, 0}};
  mig.LockTo("1414", 18432);
  state.gpus.push_back(mig);
  return state;
}

TEST(NodeVgpuStateTest, VersionThreeCarriesPlacementsSlotsAndGpuInstances) {
  const NodeVgpuState state = SampleV3();
  Result<NodeVgpuState> parsed = ParseNodeState(RenderNodeState(state));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->SameContent(state));
  EXPECT_EQ(parsed->gpus[1].used_slots, (std::vector<SlotRange>{{0, 4}}));
  EXPECT_EQ(parsed->gpus[2].gpu_instances.size(), 2u);
  EXPECT_EQ(parsed->gpus[2].resources.at("tencent.com/vgpu-1414").gi_profile, 19u);
}

// The upgrade rule's other direction: a version-2 reader (or a plugin told to write 2) has none of
// these facts, and places on such GPUs by the kernel's counts alone: after one vGPU there, nothing
// else is promised on that GPU.
TEST(NodeVgpuStateTest, WithoutVersionThreeAMixedSizeGpuPromisesNothingMoreAfterOneVgpu) {
  NodeVgpuState state = SampleV3();
  state.version = 2;
  nlohmann::json doc = nlohmann::json::parse(RenderNodeState(state));
  EXPECT_FALSE(doc["gpus"][1].contains("usedSlots"));
  Result<NodeVgpuState> parsed = ParseNodeState(doc.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->gpus[2].gpu_instances.empty());
  std::vector<GpuSlots> gpus = {parsed->gpus[1]};
  gpus[0].resources["tencent.com/vgpu-222"].free = 3;
  gpus[0].resources["tencent.com/vgpu-223"] = {"nvidia-223", 0, 2, 2048};
  ASSERT_TRUE(PlaceDemand(gpus, {{"tencent.com/vgpu-222", 1}}, Policy::kPack));
  EXPECT_EQ(gpus[0].resources.at("tencent.com/vgpu-223").free, 0u);
}

// N+1: a later plugin's version 4 only adds fields; this reader takes what it knows.
TEST(NodeVgpuStateTest, TheNextVersionIsReadAsTheNewestKnownIgnoringWhatItAdds) {
  nlohmann::json doc = nlohmann::json::parse(RenderNodeState(SampleV3()));
  doc["version"] = 4;
  doc["gpus"][0]["placements"] = {{"free", {0, 4, 8}}};
  doc["somethingNew"] = true;
  Result<NodeVgpuState> parsed = ParseNodeState(doc.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->gpus[0].lock, "framebuffer:1024MiB");
  EXPECT_EQ(parsed->gpus[1].used_slots.size(), 1u) << "version 3's facts are read";
}

TEST(NodeVgpuStateTest, AnythingButTheFormatIsRefusedWithTheFieldNamed) {
  const nlohmann::json good = nlohmann::json::parse(RenderNodeState(Sample()));
  struct Case {
    std::string description;
    std::function<void(nlohmann::json&)> spoil;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"two versions on", [](nlohmann::json& j) { j["version"] = 5; }, "version 5"},
      {"version 0", [](nlohmann::json& j) { j["version"] = 0; }, "1 to 4"},
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
  const nlohmann::json good3 = nlohmann::json::parse(RenderNodeState(SampleV3()));
  const std::vector<Case> v3_cases = {
      {"placement ids without a size",
       [](nlohmann::json& j) {
         j["gpus"][1]["resources"]["tencent.com/vgpu-222"].erase("placementSize");
       },
       "gpus[1].resources[tencent.com/vgpu-222].placementSize"},
      {"a placement id as text",
       [](nlohmann::json& j) {
         j["gpus"][1]["resources"]["tencent.com/vgpu-222"]["placementIds"] = {"0"};
       },
       "placementIds"},
      {"a slot range without a size",
       [](nlohmann::json& j) { j["gpus"][1]["usedSlots"][0].erase("size"); },
       "gpus[1].usedSlots[0].size"},
      {"a GPU instance without its profile",
       [](nlohmann::json& j) { j["gpus"][2]["gpuInstances"][0].erase("profileId"); },
       "gpus[2].gpuInstances[0].profileId"},
      {"a max per instance alone",
       [](nlohmann::json& j) {
         j["gpus"][2]["resources"]["tencent.com/vgpu-1414"].erase("gpuInstanceProfileId");
       },
       "gpuInstanceProfileId"},
  };
  for (const Case& c : v3_cases) {
    SCOPED_TRACE(c.description);
    nlohmann::json spoiled = good3;
    c.spoil(spoiled);
    Result<NodeVgpuState> parsed = ParseNodeState(spoiled.dump());
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.status().message().find(c.says), std::string::npos)
        << parsed.status().message();
  }
  for (const std::string text : {"", "null", "[1]", "{\"version\":1", "not json"}) {
    EXPECT_FALSE(ParseNodeState(text).ok()) << text;
  }
}

}  // namespace
}  // namespace kvgpu::scheduling
