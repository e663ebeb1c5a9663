// The confirmer's decision (deviceplugin/dra/occupancy_decision.h), without an API server: claims
// allocated to one free GPU are confirmed in allocation order while they may share it (strict: one
// type; equal-size: one framebuffer size; mixed-size: a free placement) and get a conflict once
// they may not; what the GPU really carries (foreign vGPUs, prepared claims) counts first; written
// verdicts are never changed (a restart rebuilds them); a claim gone releases its GPU.
#include "deviceplugin/dra/occupancy_decision.h"

#include <gtest/gtest.h>

#include "fakes/common/sim_node.h"
#include "mdev/gpu_mode_probe.h"

namespace kvgpu::deviceplugin::dra {
namespace {

using kvgpu::testing::SimNode;
using nlohmann::json;

constexpr const char* kDriver = "vgpu.tencent.com";
constexpr const char* kPool = "node-a";

mdev::Inventory ScanOf(SimNode& node) {
  Result<mdev::Inventory> inventory = node.node().Scan();
  EXPECT_TRUE(inventory.ok()) << inventory.status().ToString();
  return inventory.ok() ? *inventory : mdev::Inventory{};
}

// The view of a simulated node under `setting`, its devices named as the slices name them.
OccupancyView ViewOf(SimNode& node, OccupancySetting setting, const GpuModeProbe* probe = nullptr) {
  OccupancyView view;
  view.inventory = ScanOf(node);
  view.rules = GpuRules(view.inventory, setting, probe);
  SliceOptions options;
  options.node_name = kPool;
  options.model.occupancy = setting;
  Result<Catalogue> catalogue = BuildCatalogue(view.inventory, view.rules, options);
  EXPECT_TRUE(catalogue.ok()) << catalogue.status().ToString();
  if (catalogue.ok()) view.devices = DeviceSpots(catalogue->devices);
  return view;
}

AllocatedClaim Claim(const std::string& uid, const std::string& timestamp,
                     std::vector<std::string> devices, Verdict written = Verdict::kUndecided) {
  AllocatedClaim claim;
  claim.uid = uid;
  claim.namespace_ = "ns";
  claim.name = "claim-" + uid;
  claim.allocation_timestamp = timestamp;
  for (std::string& name : devices) claim.devices.push_back({std::move(name), true, written});
  return claim;
}

// uid -> device -> verdict, of what Decide says to write.
std::map<std::string, std::map<std::string, Verdict>> Verdicts(const OccupancyDecision& decision) {
  std::map<std::string, std::map<std::string, Verdict>> out;
  for (const ClaimVerdict& verdict : decision.verdicts) out[verdict.uid] = verdict.devices;
  return out;
}

const std::string kT4 = "0000:3b:00.0";
const std::string kOtherT4 = "0000:af:00.0";

TEST(OccupancyDecisionTest, StrictTwoTypesOnOneFreeGpuTheFirstAllocatedIsConfirmed) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const std::string a = DraDeviceName(kT4, "nvidia-222", 0);
  const std::string b = DraDeviceName(kT4, "nvidia-230", 0);
  // Listed, and named, in the other order: allocation order decides.
  const auto decision = Decide(view, {Claim("aa-second", "2026-01-01T00:00:02Z", {b}),
                                      Claim("zz-first", "2026-01-01T00:00:01Z", {a})});
  const auto verdicts = Verdicts(decision);
  EXPECT_EQ(verdicts.at("zz-first").at(a), Verdict::kConfirmed);
  EXPECT_EQ(verdicts.at("aa-second").at(b), Verdict::kConflict);
  EXPECT_EQ(decision.held, std::vector<std::string>{a});
  ASSERT_EQ(decision.verdicts.size(), 2u);
  EXPECT_EQ(decision.verdicts[0].uid, "zz-first") << "verdicts come in allocation order";
  EXPECT_NE(decision.verdicts[1].reason.find(kT4), std::string::npos)
      << decision.verdicts[1].reason;
}

TEST(OccupancyDecisionTest, SameSecondTiesAreBrokenByUidTheSameWayEveryTime) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const std::string a = DraDeviceName(kT4, "nvidia-222", 0);
  const std::string b = DraDeviceName(kT4, "nvidia-230", 0);
  for (bool swap : {false, true}) {
    std::vector<AllocatedClaim> claims = {Claim("uid-b", "2026-01-01T00:00:01Z", {b}),
                                          Claim("uid-a", "2026-01-01T00:00:01Z", {a})};
    if (swap) std::swap(claims[0], claims[1]);
    const auto verdicts = Verdicts(Decide(view, claims));
    EXPECT_EQ(verdicts.at("uid-a").at(a), Verdict::kConfirmed);
    EXPECT_EQ(verdicts.at("uid-b").at(b), Verdict::kConflict);
  }
}

// An API server with the gates half on may leave allocationTimestamp out: such claims come after
// those whose time is known, not first (an empty string would sort first).
TEST(OccupancyDecisionTest, AClaimWithoutATimestampComesAfterThoseWithOne) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const std::string a = DraDeviceName(kT4, "nvidia-222", 0);
  const std::string b = DraDeviceName(kT4, "nvidia-230", 0);
  const auto verdicts = Verdicts(
      Decide(view, {Claim("aa-untimed", "", {b}), Claim("zz-timed", "2026-01-01T00:00:09Z", {a})}));
  EXPECT_EQ(verdicts.at("zz-timed").at(a), Verdict::kConfirmed);
  EXPECT_EQ(verdicts.at("aa-untimed").at(b), Verdict::kConflict);
}

TEST(OccupancyDecisionTest, StrictSameTypeClaimsAreAllConfirmed) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  std::vector<AllocatedClaim> claims;
  for (uint32_t slot = 0; slot < 4; ++slot) {
    claims.push_back(Claim("u" + std::to_string(slot),
                           "2026-01-01T00:00:0" + std::to_string(slot) + "Z",
                           {DraDeviceName(kT4, "nvidia-230", slot)}));
  }
  // Another type on the other GPU is no concern of GPU 0.
  claims.push_back(
      Claim("other", "2026-01-01T00:00:00Z", {DraDeviceName(kOtherT4, "nvidia-231", 0)}));
  const auto decision = Decide(view, claims);
  for (const ClaimVerdict& verdict : decision.verdicts) {
    for (const auto& [device, v] : verdict.devices) EXPECT_EQ(v, Verdict::kConfirmed) << device;
  }
  EXPECT_EQ(decision.verdicts.size(), 5u);
  EXPECT_EQ(decision.held.size(), 5u);
}

TEST(OccupancyDecisionTest, EqualSizeTypesOfOneSizeShareAndAnotherSizeConflicts) {
  SimNode node("t4x2-equal-size");
  const OccupancyView view = ViewOf(node, OccupancySetting::kEqualSize);
  const std::string b1 = DraDeviceName(kT4, "nvidia-222", 0);  // 1 GiB
  const std::string q1 = DraDeviceName(kT4, "nvidia-230", 0);  // 1 GiB
  const std::string q2 = DraDeviceName(kT4, "nvidia-231", 0);  // 2 GiB
  const auto verdicts = Verdicts(Decide(
      view, {Claim("u1", "2026-01-01T00:00:01Z", {b1}), Claim("u2", "2026-01-01T00:00:02Z", {q1}),
             Claim("u3", "2026-01-01T00:00:03Z", {q2})}));
  EXPECT_EQ(verdicts.at("u1").at(b1), Verdict::kConfirmed);
  EXPECT_EQ(verdicts.at("u2").at(q1), Verdict::kConfirmed) << "same size, another type";
  EXPECT_EQ(verdicts.at("u3").at(q2), Verdict::kConflict) << "another size";
}

TEST(OccupancyDecisionTest, AForeignVgpuLocksTheGpuBeforeAnyClaim) {
  SimNode node("t4x2");
  ASSERT_TRUE(node.node().Create({kT4, "nvidia-231", std::nullopt}).ok());
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const std::string other = DraDeviceName(kT4, "nvidia-230", 0);
  const std::string same = DraDeviceName(kT4, "nvidia-231", 1);
  const auto verdicts = Verdicts(Decide(view, {Claim("u1", "2026-01-01T00:00:01Z", {other}),
                                               Claim("u2", "2026-01-01T00:00:02Z", {same})}));
  EXPECT_EQ(verdicts.at("u1").at(other), Verdict::kConflict);
  EXPECT_EQ(verdicts.at("u2").at(same), Verdict::kConfirmed);
}

// On an SR-IOV GPU the vGPUs live on its VFs, and the type lock is the physical GPU's: a vGPU on
// one VF locks the GPU that every device of the pool names.
TEST(OccupancyDecisionTest, AVgpuOnAVfLocksItsPhysicalGpu) {
  SimNode node("a100-sriov");
  ASSERT_TRUE(node.node().Create({"0000:41:00.4", "nvidia-693", std::nullopt}).ok());
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const std::string other = DraDeviceName("0000:41:00.0", "nvidia-692", 0);
  const std::string same = DraDeviceName("0000:41:00.0", "nvidia-693", 1);
  const auto verdicts = Verdicts(Decide(view, {Claim("u1", "2026-01-01T00:00:01Z", {other}),
                                               Claim("u2", "2026-01-01T00:00:02Z", {same})}));
  EXPECT_EQ(verdicts.at("u1").at(other), Verdict::kConflict);
  EXPECT_EQ(verdicts.at("u2").at(same), Verdict::kConfirmed);
}

TEST(OccupancyDecisionTest, APreparedClaimWhoseVgpuIsNotMadeYetCounts) {
  SimNode node("t4x2");
  OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  view.prepared[DraDeviceName(kT4, "nvidia-222", 0)] = "";  // checkpointed, not created yet
  const std::string other = DraDeviceName(kT4, "nvidia-230", 0);
  const auto verdicts = Verdicts(Decide(view, {Claim("u1", "2026-01-01T00:00:01Z", {other})}));
  EXPECT_EQ(verdicts.at("u1").at(other), Verdict::kConflict);
}

TEST(OccupancyDecisionTest, WrittenVerdictsStandAfterARestartWhateverTheOrder) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const std::string later = DraDeviceName(kT4, "nvidia-230", 0);
  const std::string earlier = DraDeviceName(kT4, "nvidia-222", 0);
  // The later claim was confirmed before the restart (its condition is on the claim); an earlier
  // one seen only now cannot take the GPU from it.
  const auto decision =
      Decide(view, {Claim("late", "2026-01-01T00:00:05Z", {later}, Verdict::kConfirmed),
                    Claim("early", "2026-01-01T00:00:01Z", {earlier})});
  const auto verdicts = Verdicts(decision);
  EXPECT_FALSE(verdicts.contains("late")) << "nothing is written again";
  EXPECT_EQ(verdicts.at("early").at(earlier), Verdict::kConflict);
  EXPECT_EQ(decision.held, std::vector<std::string>{later});
  // The same from this process's memory of what it wrote (the claim not showing it yet).
  const auto remembered = Decide(view,
                                 {Claim("late", "2026-01-01T00:00:05Z", {later}),
                                  Claim("early", "2026-01-01T00:00:01Z", {earlier})},
                                 {{"late", {{later, Verdict::kConfirmed}}}});
  EXPECT_EQ(Verdicts(remembered).at("early").at(earlier), Verdict::kConflict);
  // A conflict written stays one and holds nothing.
  const auto conflicted =
      Decide(view, {Claim("late", "2026-01-01T00:00:05Z", {later}, Verdict::kConflict),
                    Claim("early", "2026-01-01T00:00:01Z", {earlier})});
  EXPECT_EQ(Verdicts(conflicted).at("early").at(earlier), Verdict::kConfirmed);
  EXPECT_FALSE(Verdicts(conflicted).contains("late"));
}

// Two settled claims that do not fit together (one confirmed, then unprepared and not deleted
// yet, still locks the GPU its way; or a foreign vGPU came): the later one may still be prepared,
// so no open claim may join that GPU, whichever of the two it would fit beside. Before, the later
// one held nothing and a claim of the first's type was confirmed, then failed the later one's
// prepare (the burst test's "not offered here").
TEST(OccupancyDecisionTest, SettledClaimsThatDoNotFitTogetherCloseTheirGpuToOpenClaims) {
  SimNode node("t4x2-equal-size");
  const OccupancyView view = ViewOf(node, OccupancySetting::kEqualSize);
  const std::string q2 = DraDeviceName(kT4, "nvidia-231", 0);  // 2 GiB
  const std::string b1 = DraDeviceName(kT4, "nvidia-222", 1);  // 1 GiB
  const std::string q2_again = DraDeviceName(kT4, "nvidia-231", 1);
  const std::string b1_again = DraDeviceName(kT4, "nvidia-222", 2);
  const std::string elsewhere = DraDeviceName(kOtherT4, "nvidia-231", 0);
  const auto decision =
      Decide(view, {Claim("stale", "2026-01-01T00:00:01Z", {q2}, Verdict::kConfirmed),
                    Claim("settled", "2026-01-01T00:00:02Z", {b1}, Verdict::kConfirmed),
                    Claim("open-2g", "2026-01-01T00:00:03Z", {q2_again}),
                    Claim("open-1g", "2026-01-01T00:00:04Z", {b1_again}),
                    Claim("other-gpu", "2026-01-01T00:00:05Z", {elsewhere})});
  const auto verdicts = Verdicts(decision);
  EXPECT_EQ(verdicts.at("open-2g").at(q2_again), Verdict::kConflict);
  EXPECT_EQ(verdicts.at("open-1g").at(b1_again), Verdict::kConflict);
  EXPECT_EQ(verdicts.at("other-gpu").at(elsewhere), Verdict::kConfirmed) << "the other GPU is open";
  EXPECT_NE(decision.verdicts[0].reason.find("do not fit together"), std::string::npos)
      << decision.verdicts[0].reason;
  // Once the stale claim is gone, the GPU follows the settled one again.
  const auto after =
      Verdicts(Decide(view, {Claim("settled", "2026-01-01T00:00:02Z", {b1}, Verdict::kConfirmed),
                             Claim("open-1g", "2026-01-01T00:00:04Z", {b1_again})}));
  EXPECT_EQ(after.at("open-1g").at(b1_again), Verdict::kConfirmed);
}

TEST(OccupancyDecisionTest, AClaimGoneReleasesItsGpu) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const std::string first = DraDeviceName(kT4, "nvidia-222", 0);
  const std::string second = DraDeviceName(kT4, "nvidia-230", 0);
  const AllocatedClaim held = Claim("u1", "2026-01-01T00:00:01Z", {first}, Verdict::kConfirmed);
  const AllocatedClaim waiting = Claim("u2", "2026-01-01T00:00:02Z", {second});
  EXPECT_EQ(Verdicts(Decide(view, {held, waiting})).at("u2").at(second), Verdict::kConflict);
  const auto after = Decide(view, {waiting});
  EXPECT_EQ(Verdicts(after).at("u2").at(second), Verdict::kConfirmed);
  EXPECT_EQ(after.held, std::vector<std::string>{second});
}

TEST(OccupancyDecisionTest, ClaimsNotWaitedForHoldButGetNoVerdict) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  AllocatedClaim plain =
      Claim("plain", "2026-01-01T00:00:09Z", {DraDeviceName(kT4, "nvidia-222", 0)});
  plain.devices[0].waited_for = false;  // allocated from a slice without binding conditions
  const std::string b = DraDeviceName(kT4, "nvidia-230", 0);
  const auto decision = Decide(view, {plain, Claim("u1", "2026-01-01T00:00:01Z", {b})});
  const auto verdicts = Verdicts(decision);
  EXPECT_FALSE(verdicts.contains("plain"));
  EXPECT_EQ(verdicts.at("u1").at(b), Verdict::kConflict) << "it will be prepared whatever we say";
}

TEST(OccupancyDecisionTest, AClaimOfTwoDevicesIsConfirmedWhole) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const std::string first = DraDeviceName(kT4, "nvidia-222", 0);
  const std::string fits = DraDeviceName(kOtherT4, "nvidia-230", 0);
  const std::string clashes = DraDeviceName(kT4, "nvidia-230", 1);
  const auto decision = Decide(
      view, {Claim("u1", "2026-01-01T00:00:01Z", {first}),
             Claim("u2", "2026-01-01T00:00:02Z", {fits, clashes}),
             Claim("u3", "2026-01-01T00:00:03Z", {DraDeviceName(kOtherT4, "nvidia-231", 0)})});
  const auto verdicts = Verdicts(decision);
  EXPECT_EQ(verdicts.at("u2"), (std::map<std::string, Verdict>{{clashes, Verdict::kConflict}}));
  // u2's other device did not lock GPU 1: u3 takes it.
  EXPECT_EQ(verdicts.at("u3").begin()->second, Verdict::kConfirmed);
}

TEST(OccupancyDecisionTest, ADeviceNotInThePoolConflicts) {
  SimNode node("t4x2");
  const OccupancyView view = ViewOf(node, OccupancySetting::kStrict);
  const auto verdicts =
      Verdicts(Decide(view, {Claim("u1", "2026-01-01T00:00:01Z", {"gpu-gone-1"})}));
  EXPECT_EQ(verdicts.at("u1").at("gpu-gone-1"), Verdict::kConflict);
}

// Mixed-size (heterogeneous) mode: a size may join only at a free placement. Counters alone would
// take the last 8 GiB vGPU here (8 GiB of the 48 remain); no 8 GiB placement is free.
TEST(OccupancyDecisionTest, MixedSizeNeedsAFreePlacementWhereTheProbeTellsThem) {
  SimNode node("l40s-vfio");
  auto probe = MakeGpuModeProbe(GpuModeProbeChoice::kSim, node.root());
  ASSERT_NE(probe, nullptr);
  OccupancyView view = ViewOf(node, OccupancySetting::kAuto, probe.get());
  const std::string gpu = "0000:af:00.0";
  ASSERT_EQ(view.rules.OccupancyOf(gpu), scheduling::Occupancy::kMixedSize);
  const auto name = [&](const std::string& type, uint32_t slot) {
    const std::string n = "d-" + type + "-" + std::to_string(slot);
    view.devices[n] = {gpu, type};
    return n;
  };
  const std::string small = name("1700", 0);  // 4 GiB at 0
  const std::string big0 = name("1703", 0);   // 12 GiB at 12
  const std::string big1 = name("1703", 1);   // at 24
  const std::string big2 = name("1703", 2);   // at 36
  const std::string eight = name("1702", 0);  // 8 GiB: starts 0, 8, ... all overlap
  const std::string four = name("1700", 1);   // 4 GiB at 4
  const auto verdicts = Verdicts(Decide(
      view,
      {Claim("a", "2026-01-01T00:00:01Z", {small}), Claim("b", "2026-01-01T00:00:02Z", {big0}),
       Claim("c", "2026-01-01T00:00:03Z", {big1}), Claim("d", "2026-01-01T00:00:04Z", {big2}),
       Claim("e", "2026-01-01T00:00:05Z", {eight}), Claim("f", "2026-01-01T00:00:06Z", {four})}));
  for (const char* uid : {"a", "b", "c", "d", "f"}) {
    EXPECT_EQ(verdicts.at(uid).begin()->second, Verdict::kConfirmed) << uid;
  }
  EXPECT_EQ(verdicts.at("e").at(eight), Verdict::kConflict);
}

TEST(ReadAllocatedClaimTest, TakesOurDevicesTheirBindingConditionsAndWrittenVerdicts) {
  const json claim = {
      {"metadata", {{"namespace", "ns"}, {"name", "c"}, {"uid", "u"}, {"resourceVersion", "7"}}},
      {"status",
       {{"allocation",
         {{"allocationTimestamp", "2026-01-01T00:00:01Z"},
          {"devices",
           {{"results",
             json::array({{{"driver", kDriver},
                           {"pool", kPool},
                           {"device", "d1"},
                           {"bindingConditions", json::array({kOccupancyConfirmed})},
                           {"bindingFailureConditions", json::array({kOccupancyConflict})}},
                          {{"driver", kDriver}, {"pool", kPool}, {"device", "d2"}},
                          {{"driver", kDriver}, {"pool", "node-b"}, {"device", "d3"}},
                          {{"driver", "net.example.com"}, {"pool", kPool}, {"device", "d4"}}})}}}}},
        {"devices",
         json::array(
             {{{"driver", kDriver},
               {"pool", kPool},
               {"device", "d1"},
               {"conditions", json::array({{{"type", kOccupancyConfirmed}, {"status", "True"}}})}},
              {{"driver", "net.example.com"},
               {"pool", kPool},
               {"device", "d4"},
               {"conditions",
                json::array({{{"type", kOccupancyConflict}, {"status", "True"}}})}}})}}}};
  const auto read = ReadAllocatedClaim(claim, kDriver, kPool);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->allocation_timestamp, "2026-01-01T00:00:01Z");
  EXPECT_EQ(read->resource_version, "7");
  ASSERT_EQ(read->devices.size(), 2u);
  EXPECT_EQ(read->devices[0].device, "d1");
  EXPECT_TRUE(read->devices[0].waited_for);
  EXPECT_EQ(read->devices[0].written, Verdict::kConfirmed);
  EXPECT_FALSE(read->devices[1].waited_for);
  EXPECT_EQ(read->devices[1].written, Verdict::kUndecided);
  EXPECT_FALSE(ReadAllocatedClaim(claim, kDriver, "node-c")) << "nothing of that pool";
  json unallocated = claim;
  unallocated["status"].erase("allocation");
  EXPECT_FALSE(ReadAllocatedClaim(unallocated, kDriver, kPool));
}

// --- what the slices say: binding conditions, and narrowing by confirmed claims ----------------

std::vector<json> DevicesOf(const std::vector<json>& slices) {
  std::vector<json> devices;
  for (const json& slice : slices) {
    for (const json& d : slice["spec"].value("devices", json::array())) devices.push_back(d);
  }
  return devices;
}

std::vector<json> Slices(SimNode& node, const SliceOptions& options) {
  const mdev::Inventory inventory = ScanOf(node);
  const GpuRules rules(inventory, options.model.occupancy);
  Result<std::vector<json>> slices = BuildResourceSlices(inventory, rules, options, 1);
  EXPECT_TRUE(slices.ok()) << slices.status().ToString();
  return slices.ok() ? *slices : std::vector<json>{};
}

TEST(BindingConditionsTest, EveryDeviceWaitsForConfirmationUnlessSwitchedOff) {
  SimNode node("t4x2");
  SliceOptions options;
  options.node_name = kPool;
  const std::vector<json> slices = Slices(node, options);
  ASSERT_TRUE(ValidatePool(slices).ok());
  const std::vector<json> devices = DevicesOf(slices);
  ASSERT_FALSE(devices.empty());
  for (const json& device : devices) {
    EXPECT_EQ(device["bindingConditions"], json::array({kOccupancyConfirmed})) << device["name"];
    EXPECT_EQ(device["bindingFailureConditions"], json::array({kOccupancyConflict}));
  }
  options.binding_conditions = false;
  for (const json& device : DevicesOf(Slices(node, options))) {
    EXPECT_FALSE(device.contains("bindingConditions"));
    EXPECT_FALSE(device.contains("bindingFailureConditions"));
  }
}

TEST(BindingConditionsTest, ValidateSliceRefusesWhatUpstreamRefuses) {
  SimNode node("t4x2");
  SliceOptions options;
  options.node_name = kPool;
  const json good = Slices(node, options)[1];
  ASSERT_TRUE(ValidateSlice(good).ok());
  const auto with = [&](const char* field, json value) {
    json slice = good;
    slice["spec"]["devices"][0][field] = std::move(value);
    return ValidateSlice(slice).ok();
  };
  EXPECT_FALSE(with("bindingConditions", json::array({"a", "b", "c", "d", "e"}))) << "five";
  EXPECT_FALSE(with("bindingFailureConditions", json::array())) << "one without the other";
  EXPECT_FALSE(with("bindingFailureConditions", json::array({kOccupancyConfirmed}))) << "overlap";
  EXPECT_FALSE(with("bindingConditions", json::array({"-bad"}))) << "not a label name";
  EXPECT_TRUE(with("bindingConditions", json::array({"vgpu.tencent.com/ready", "X"})));
}

TEST(BindingConditionsTest, ConfirmedClaimsNarrowAFreeGpuAtOnce) {
  SimNode node("t4x2");
  SliceOptions options;
  options.node_name = kPool;
  options.model.occupancy = OccupancySetting::kStrict;
  options.held_devices = {DraDeviceName(kT4, "nvidia-230", 3)};
  for (const json& device : DevicesOf(Slices(node, options))) {
    const std::string type = device["attributes"]["type"]["string"];
    const std::string gpu = device["attributes"]["physicalGpu"]["string"];
    EXPECT_TRUE(gpu != kT4 || type == "nvidia-230") << device["name"];
  }
  options.held_devices.clear();
  bool other_type = false;
  for (const json& device : DevicesOf(Slices(node, options))) {
    other_type = other_type || (device["attributes"]["physicalGpu"]["string"] == kT4 &&
                                device["attributes"]["type"]["string"] != "nvidia-230");
  }
  EXPECT_TRUE(other_type) << "released: the free GPU offers every type again";
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
