// The GPU mode probes. NVML's is loaded from a fake libnvidia-ml (fake_nvml.cpp: nvml.h's entry
// points and layouts) answering from a fixture made from the simulator's own facts for the same
// node, so the probe must read back exactly what SimGpuModeProbe reads from the simulator's file
// (modes, GPU instances, placements, GI profiles), tie NVML's types to sysfs's by name then by
// number, and leave a fact unknown where a symbol is missing or NVML answers an error.
#include "mdev/gpu_mode_probe.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fakes/common/sim_node.h"

namespace kvgpu::mdev {
namespace {

using kvgpu::testing::SimNode;

}  // namespace

// What a failed comparison shows.
void PrintTo(const GpuShapeFacts& f, std::ostream* out) {
  auto opt = [](const auto& v) { return v ? std::to_string(*v) : std::string("?"); };
  *out << "{mig " << opt(f.mig) << " heterogeneous " << opt(f.heterogeneous) << " instances "
       << (f.gpu_instances_known ? "" : "unknown ");
  for (const auto& gi : f.gpu_instances) *out << gi.id << "/" << gi.profile << " ";
  for (const auto& [id, t] : f.types) {
    *out << "type " << id << " size " << t.placement_size << " ids " << t.placement_ids.size()
         << " gi " << opt(t.gi_profile) << " max " << t.max_per_gi << "; ";
  }
  for (const auto& [id, v] : f.vgpus) {
    *out << "vgpu " << id << " " << v.type << " " << opt(v.placement) << " " << opt(v.gpu_instance)
         << "; ";
  }
  *out << "}";
}

namespace {

nlohmann::json ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

struct FixtureOptions {
  uint32_t id_offset = 0;    // NVML's type ids: the sysfs ids plus this
  bool names = true;         // whether NVML names the types as sysfs does
  nlohmann::json fail = {};  // entry point -> the code it answers
};

// What NVML would answer on the simulated node: the simulator's modes file (modes, GPU instances,
// vGPUs) and its profile (types, GI profiles), in the fake library's fixture format.
nlohmann::json FixtureFor(SimNode& sim, const FixtureOptions& options = {}) {
  const nlohmann::json modes = ReadJson(sim.root() / sim::KernelModel::kModesFile);
  nlohmann::json devices = nlohmann::json::array();
  uint32_t next_instance = 100;
  for (const nlohmann::json& gpu : modes["gpus"]) {
    const sim::GpuSpec* spec = nullptr;
    for (const sim::GpuSpec& g : sim.model().profile().gpus) {
      if (g.address == gpu["address"]) spec = &g;
    }
    if (spec == nullptr) continue;
    nlohmann::json d = {{"pciBusId", spec->address}};
    if (!spec->gi_profiles.empty()) d["migMode"] = gpu["mig"].get<bool>() ? 1 : 0;
    if (spec->heterogeneous_capable) {
      d["heterogeneousMode"] = gpu["heterogeneous"].get<bool>() ? 1 : 0;
    }
    nlohmann::json types = nlohmann::json::array();
    for (const sim::TypeSpec& t : spec->types) {
      nlohmann::json type = {{"id", std::stoul(t.id) + options.id_offset},
                             {"name", options.names ? t.name.value_or("") : ""}};
      if (!t.placement_ids.empty()) {
        type["placementSize"] = t.placement_size;
        type["placementIds"] = t.placement_ids;
      }
      if (t.gi_profile) {
        type["gpuInstanceProfileId"] = *t.gi_profile;
        type["maxInstancesPerGi"] = t.max_per_gi;
      }
      for (const nlohmann::json& listed : gpu["types"]) {
        if (listed["id"] == t.id) type["maxInstances"] = listed["maxInstances"];
      }
      types.push_back(type);
    }
    d["vgpuTypes"] = types;
    nlohmann::json profiles = nlohmann::json::array();
    for (size_t i = 0; i < spec->gi_profiles.size(); ++i) {
      profiles.push_back({{"profile", i},
                          {"id", spec->gi_profiles[i].id},
                          {"instanceCount", spec->gi_profiles[i].max_count}});
    }
    d["gpuInstanceProfiles"] = profiles;
    d["gpuInstances"] = nlohmann::json::array();
    for (const nlohmann::json& gi : gpu["gpuInstances"]) {
      d["gpuInstances"].push_back({{"id", gi["id"]}, {"profileId", gi["profileId"]}});
    }
    d["vgpuInstances"] = nlohmann::json::array();
    for (const nlohmann::json& v : gpu["vgpus"]) {
      nlohmann::json instance = {
          {"instance", next_instance++},
          {"type", std::stoul(v["type"].get<std::string>()) + options.id_offset}};
      if (v.contains("placementId")) instance["placementId"] = v["placementId"];
      if (v.contains("gpuInstanceId")) instance["gpuInstanceId"] = v["gpuInstanceId"];
      d["vgpuInstances"].push_back(instance);
    }
    devices.push_back(d);
  }
  return {{"devices", devices},
          {"fail", options.fail.is_null() ? nlohmann::json::object() : options.fail}};
}

// Points the fake library at `fixture` (it reads it at nvmlInit_v2, once per probe).
void UseFixture(SimNode& sim, const nlohmann::json& fixture) {
  const std::filesystem::path path = sim.dir() / "nvml-fixture.json";
  std::ofstream(path) << fixture.dump();
  ::setenv("KVGPU_FAKE_NVML_FIXTURE", path.c_str(), 1);
}

std::vector<SysfsTypeName> TypesOf(SimNode& sim, const std::string& gpu) {
  auto inventory = sim.node().Scan();
  EXPECT_TRUE(inventory.ok());
  return SysfsTypesOf(*inventory, gpu);
}

// The simulator's facts less its vGPUs (NVML ties a vGPU to sysfs only by an mdev's UUID, and
// these profiles are vendor VFIO: no mdev) and less the types sysfs does not show on the GPU now
// (NVML's are keyed by sysfs's; an equal-size GPU's lists shrink to its size).
std::optional<GpuShapeFacts> SimFactsWithoutVgpus(SimNode& sim, const std::string& gpu) {
  std::optional<GpuShapeFacts> facts =
      SimGpuModeProbe(sim.root() / sim::KernelModel::kModesFile).Probe(gpu, {});
  if (!facts) return facts;
  facts->vgpus.clear();
  std::map<std::string, GpuShapeFacts::TypeFacts> shown;
  for (const SysfsTypeName& t : TypesOf(sim, gpu)) {
    if (facts->types.contains(t.id)) shown[t.id] = facts->types.at(t.id);
  }
  facts->types = std::move(shown);
  return facts;
}

void Type(SimNode& sim, const std::string& vf, const std::string& type) {
  ASSERT_TRUE(
      sim.model()
          .WriteFile(sim.root() / "sys/bus/pci/devices" / vf / "nvidia/current_vgpu_type", type)
          .ok());
}

TEST(NvmlGpuModeProbeTest, ReadsWhatTheSimulatorShowsOnMixedAndEqualSizeGpus) {
  SimNode sim("l40s-vfio");
  Type(sim, "0000:af:00.4", "1702");  // mixed-size: 8 GiB at placement 0
  Type(sim, "0000:af:00.5", "1700");  // 4 GiB beside it
  Type(sim, "0000:3b:00.4", "1700");
  UseFixture(sim, FixtureFor(sim));
  NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
  ASSERT_TRUE(probe.Loaded());
  for (const std::string gpu : {"0000:af:00.0", "0000:3b:00.0"}) {
    std::optional<GpuShapeFacts> facts = probe.Probe(gpu, TypesOf(sim, gpu));
    ASSERT_TRUE(facts) << gpu;
    EXPECT_EQ(*facts, *SimFactsWithoutVgpus(sim, gpu)) << gpu;
  }
  const GpuShapeFacts mixed = *probe.Probe("0000:af:00.0", TypesOf(sim, "0000:af:00.0"));
  EXPECT_EQ(mixed.heterogeneous, true);
  EXPECT_EQ(mixed.mig, false) << "no MIG on an L40S: NVML_ERROR_NOT_SUPPORTED";
  EXPECT_EQ(mixed.types.at("1702").placement_size, 8u);
  EXPECT_EQ(mixed.types.at("1702").placement_ids.size(), 6u);
  EXPECT_EQ(mixed.types.at("1704").max_instances, 2u) << "nvmlVgpuTypeGetMaxInstances: 2 x 24 GiB";
  EXPECT_EQ(probe.Probe("0000:3b:00.0", TypesOf(sim, "0000:3b:00.0"))->heterogeneous, false);
  EXPECT_EQ(probe.Probe("0000:99:00.0", {}), std::nullopt) << "a GPU NVML does not know";
}

TEST(NvmlGpuModeProbeTest, ReadsTheGpuInstancesAndGiProfilesOfAMigGpu) {
  SimNode sim("h200-mig");
  Type(sim, "0000:41:00.4", "1414");
  Type(sim, "0000:41:00.5", "1415");
  UseFixture(sim, FixtureFor(sim));
  NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
  const std::string gpu = "0000:41:00.0";
  std::optional<GpuShapeFacts> facts = probe.Probe(gpu, TypesOf(sim, gpu));
  ASSERT_TRUE(facts);
  EXPECT_EQ(*facts, *SimFactsWithoutVgpus(sim, gpu));
  EXPECT_EQ(facts->mig, true);
  EXPECT_EQ(facts->heterogeneous, false) << "NOT_SUPPORTED while MIG is on";
  ASSERT_TRUE(facts->gpu_instances_known);
  EXPECT_EQ(facts->gpu_instances.size(), 5u);
  EXPECT_EQ(facts->gpu_instances.back().profile, 14u);
  EXPECT_EQ(facts->types.at("1414").gi_profile, 19u);
  EXPECT_EQ(facts->types.at("1415").max_per_gi, 1u);
  EXPECT_FALSE(facts->types.contains("1428")) << "time-sliced: no GI profile, no placements";
}

TEST(NvmlGpuModeProbeTest, TiesNvmlTypesToSysfsByNameThenByNumber) {
  SimNode sim("l40s-vfio");
  const std::string gpu = "0000:af:00.0";
  const GpuShapeFacts expected = *SimFactsWithoutVgpus(sim, gpu);
  {
    UseFixture(sim, FixtureFor(sim, {.id_offset = 50000}));  // other numbers, same names
    NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
    EXPECT_EQ(*probe.Probe(gpu, TypesOf(sim, gpu)), expected);
  }
  {
    UseFixture(sim, FixtureFor(sim, {.names = false}));  // same numbers, no names
    NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
    EXPECT_EQ(*probe.Probe(gpu, TypesOf(sim, gpu)), expected);
  }
  {
    UseFixture(sim, FixtureFor(sim, {.id_offset = 50000, .names = false}));  // neither
    NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
    std::optional<GpuShapeFacts> facts = probe.Probe(gpu, TypesOf(sim, gpu));
    ASSERT_TRUE(facts);
    EXPECT_TRUE(facts->types.empty()) << "a type tied to no sysfs type is left out";
    EXPECT_EQ(facts->heterogeneous, true);
  }
}

TEST(NvmlGpuModeProbeTest, KeysAnMdevVgpuByItsUuidWithItsPlacementAndInstance) {
  SimNode sim("l40s-vfio");
  Type(sim, "0000:af:00.4", "1702");
  Type(sim, "0000:af:00.5", "1702");
  nlohmann::json fixture = FixtureFor(sim);
  nlohmann::json& vgpus = fixture["devices"][1]["vgpuInstances"];
  ASSERT_EQ(fixture["devices"][1]["pciBusId"], "0000:af:00.0");
  ASSERT_EQ(vgpus.size(), 2u);
  vgpus[1]["mdevUuid"] = "9B2C4E1A-0D3F-4A5B-8C6D-000000000001";
  UseFixture(sim, fixture);
  NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
  std::optional<GpuShapeFacts> facts = probe.Probe("0000:af:00.0", TypesOf(sim, "0000:af:00.0"));
  ASSERT_TRUE(facts);
  ASSERT_EQ(facts->vgpus.size(), 1u) << "the other names no mdev: left out";
  const GpuShapeFacts::VgpuFacts& v = facts->vgpus.at("9b2c4e1a-0d3f-4a5b-8c6d-000000000001");
  EXPECT_EQ(v.type, "1702");
  EXPECT_EQ(v.placement, vgpus[1]["placementId"].get<uint32_t>());
  EXPECT_EQ(v.gpu_instance, std::nullopt) << "INVALID_GPU_INSTANCE_ID: not MIG-backed";
}

TEST(NvmlGpuModeProbeTest, AnNvmlErrorLeavesThatFactUnknown) {
  SimNode sim("h200-mig");
  const std::string gpu = "0000:41:00.0";
  const GpuShapeFacts whole = *SimFactsWithoutVgpus(sim, gpu);
  {
    UseFixture(sim, FixtureFor(sim, {.fail = {{"nvmlDeviceGetGpuInstances", 999}}}));
    NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
    GpuShapeFacts facts = *probe.Probe(gpu, TypesOf(sim, gpu));
    EXPECT_FALSE(facts.gpu_instances_known);
    EXPECT_TRUE(facts.gpu_instances.empty());
    EXPECT_EQ(facts.types, whole.types);
    EXPECT_EQ(facts.mig, true);
  }
  {
    UseFixture(sim,
               FixtureFor(sim, {.fail = {{"nvmlVgpuTypeGetMaxInstancesPerGpuInstance", 999}}}));
    NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
    GpuShapeFacts facts = *probe.Probe(gpu, TypesOf(sim, gpu));
    for (const auto& [id, type] : facts.types) {
      EXPECT_EQ(type.gi_profile, std::nullopt) << id << ": a GI profile needs its max per GI";
    }
    EXPECT_TRUE(facts.gpu_instances_known);
  }
  {
    UseFixture(sim, FixtureFor(sim, {.fail = {{"nvmlDeviceGetMigMode", 999}}}));
    NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
    GpuShapeFacts facts = *probe.Probe(gpu, TypesOf(sim, gpu));
    EXPECT_EQ(facts.mig, std::nullopt);
    EXPECT_FALSE(facts.gpu_instances_known) << "instances are read only where MIG is known on";
  }
  SimNode l40s("l40s-vfio");
  const std::string mixed = "0000:af:00.0";
  {
    UseFixture(l40s, FixtureFor(l40s, {.fail = {{"nvmlDeviceGetVgpuTypeSupportedPlacements", 999},
                                                {"nvmlDeviceGetVgpuHeterogeneousMode", 999}}}));
    NvmlGpuModeProbe probe(KVGPU_FAKE_NVML);
    GpuShapeFacts facts = *probe.Probe(mixed, TypesOf(l40s, mixed));
    EXPECT_EQ(facts.heterogeneous, std::nullopt);
    for (const auto& [id, type] : facts.types) EXPECT_TRUE(type.placement_ids.empty()) << id;
    EXPECT_EQ(facts.mig, false);
  }
}

TEST(NvmlGpuModeProbeTest, ADriverWithoutThePlacementAndInstanceCallsGivesTheModesOnly) {
  SimNode sim("h200-mig");
  UseFixture(sim, FixtureFor(sim));
  NvmlGpuModeProbe probe(KVGPU_FAKE_NVML_MODES_ONLY);
  ASSERT_TRUE(probe.Loaded());
  GpuShapeFacts facts = *probe.Probe("0000:41:00.0", TypesOf(sim, "0000:41:00.0"));
  EXPECT_EQ(facts.mig, true);
  EXPECT_FALSE(facts.gpu_instances_known);
  EXPECT_TRUE(facts.types.empty());
  EXPECT_TRUE(facts.vgpus.empty());
}

TEST(NvmlGpuModeProbeTest, WithoutItsLibraryOrSymbolsOrInitItKnowsNothing) {
  NvmlGpuModeProbe missing("libkvgpu-no-such-nvml.so.1");
  EXPECT_FALSE(missing.Loaded());
  EXPECT_EQ(missing.Probe("0000:41:00.0", {}), std::nullopt);
  NvmlGpuModeProbe not_nvml("libc.so.6");  // loads, but has no nvmlInit_v2
  EXPECT_FALSE(not_nvml.Loaded());
  SimNode sim("h200-mig");
  UseFixture(sim, FixtureFor(sim, {.fail = {{"nvmlInit_v2", 999}}}));
  NvmlGpuModeProbe failed_init(KVGPU_FAKE_NVML);
  EXPECT_FALSE(failed_init.Loaded());
  EXPECT_EQ(failed_init.Probe("0000:41:00.0", {}), std::nullopt);
}

TEST(SimGpuModeProbeTest, TheSimulatorsFileGivesModesInstancesTypesAndVgpus) {
  SimNode sim("h200-mig");
  auto probe = MakeGpuModeProbe(GpuModeProbeChoice::kSim, sim.root());
  Type(sim, "0000:41:00.4", "1414");
  std::optional<GpuShapeFacts> facts = probe->Probe("0000:41:00.0", {});
  ASSERT_TRUE(facts);
  EXPECT_EQ(facts->mig, true);
  EXPECT_EQ(facts->heterogeneous, false);
  EXPECT_EQ(facts->gpu_instances.size(), 5u);
  EXPECT_EQ(facts->types.at("1414").gi_profile, 19u);
  EXPECT_EQ(facts->types.at("1414").max_per_gi, 1u);
  EXPECT_EQ(facts->types.at("1414").max_instances, 7u);
  EXPECT_EQ(facts->types.at("1428").max_instances, 1u) << "a time-sliced type: its max alone";
  EXPECT_EQ(facts->vgpus.at("0000:41:00.4").gpu_instance, 1u);
  EXPECT_EQ(probe->Probe("0000:99:00.0", {}), std::nullopt) << "a GPU the file does not list";
  EXPECT_EQ(SimGpuModeProbe(sim.dir() / "absent.json").Probe("0000:41:00.0", {}), std::nullopt);
}

TEST(GpuModeProbeTest, ChoicesRoundTripAndUnknownOnesAreRefused) {
  for (auto c : {GpuModeProbeChoice::kNone, GpuModeProbeChoice::kNvml, GpuModeProbeChoice::kSim}) {
    EXPECT_EQ(ParseGpuModeProbeChoice(GpuModeProbeChoiceName(c)), c);
  }
  EXPECT_EQ(ParseGpuModeProbeChoice("nvidia-smi"), std::nullopt);
  EXPECT_EQ(MakeGpuModeProbe(GpuModeProbeChoice::kNone, "/"), nullptr);
}

TEST(GpuModeProbeTest, SysfsTypesOfAGpuCarryTheirSysfsNames) {
  SimNode sim("h200-mig");
  Type(sim, "0000:41:00.4", "1414");
  const std::vector<SysfsTypeName> types = TypesOf(sim, "0000:41:00.0");
  auto named = [&](const std::string& id) {
    for (const SysfsTypeName& t : types) {
      if (t.id == id) return t.name;
    }
    return std::string("(absent)");
  };
  EXPECT_EQ(named("1414"), "NVIDIA H200X-1-18C");
  EXPECT_EQ(named("9999"), "(absent)");
}

}  // namespace
}  // namespace kvgpu::mdev
