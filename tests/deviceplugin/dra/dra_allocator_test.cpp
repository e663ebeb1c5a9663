// The allocator model (fakes/dra_allocator/) against the upstream rules it claims to follow:
// quantities, the CEL forms of the shipped DeviceClasses (and a clear refusal of any other),
// pools (highest generation, complete, valid), counters (the pool's offer less what allocated
// devices consume), devices other claims hold, the extended-resource mapping, and binding
// conditions copied into the result. The last tests run it on the slices the node daemon builds
// for a simulated T4 node.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/dra/resource_slices.h"
#include "fakes/common/eventually.h"
#include "fakes/common/sim_node.h"
#include "fakes/dra_allocator/allocator.h"
#include "fakes/dra_allocator/cel_selector.h"
#include "fakes/dra_allocator/pools.h"
#include "fakes/dra_allocator/quantity.h"
#include "fakes/dra_allocator/scheduler.h"

namespace kvgpu::testing::dra {
namespace {

using nlohmann::json;

constexpr const char* kDriver = "vgpu.tencent.com";

TEST(DraAllocatorQuantity, WholeNumberFormsAndRefusals) {
  EXPECT_EQ(*ParseQuantity("16Gi"), int64_t{16} << 30);
  EXPECT_EQ(*ParseQuantity("1536Mi"), int64_t{1536} << 20);
  EXPECT_EQ(*ParseQuantity("7"), 7);
  EXPECT_EQ(*ParseQuantity("2k"), 2000);
  EXPECT_EQ(*ParseQuantity("1M"), 1000000);
  for (const char* bad : {"", "1.5Gi", "500m", "-1", "1e3", "Gi", "1Gb", "99999999999Ei"}) {
    EXPECT_FALSE(ParseQuantity(bad).ok()) << bad;
  }
}

json Device(const std::string& name, const std::string& type, const std::string& gpu = "",
            const std::string& fb = "") {
  json d = {{"name", name}, {"attributes", {{"type", {{"string", type}}}}}};
  if (!gpu.empty()) {
    d["consumesCounters"] =
        json::array({{{"counterSet", gpu}, {"counters", {{"framebuffer", {{"value", fb}}}}}}});
  }
  return d;
}

TEST(DraAllocatorCel, TheShippedFormsMatchAsCelWould) {
  auto by_type = CelSelector::Parse(
      R"(device.driver == "vgpu.tencent.com" && device.attributes["vgpu.tencent.com"].type == "nvidia-230")");
  ASSERT_TRUE(by_type.ok()) << by_type.status().ToString();
  // An unqualified attribute is in the driver's domain.
  EXPECT_TRUE(*by_type->Matches(kDriver, Device("a", "nvidia-230")));
  EXPECT_FALSE(*by_type->Matches(kDriver, Device("a", "nvidia-231")));
  // Qualified with the domain: the same attribute.
  json qualified = {{"name", "q"},
                    {"attributes", {{"vgpu.tencent.com/type", {{"string", "nvidia-230"}}}}}};
  EXPECT_TRUE(*by_type->Matches(kDriver, qualified));
  // Another driver: false, although its device lacks the attribute (false && error is false).
  EXPECT_FALSE(*by_type->Matches("other.example.com", json{{"name", "x"}}));
  // Our driver without the attribute: CEL's "no such key" is an error, not a false.
  EXPECT_FALSE(by_type->Matches(kDriver, json{{"name", "x"}}).ok());
  // Not a string: no such overload.
  json as_int = {{"name", "i"}, {"attributes", {{"type", {{"int", 230}}}}}};
  EXPECT_FALSE(by_type->Matches(kDriver, as_int).ok());

  auto driver_only = CelSelector::Parse(R"(device.driver == "vgpu.tencent.com")");
  ASSERT_TRUE(driver_only.ok());
  EXPECT_TRUE(*driver_only->Matches(kDriver, json{{"name", "x"}}));
}

TEST(DraAllocatorCel, OtherFormsAreRefusedNamingWhat) {
  for (const char* expression : {
           R"(device.driver != "vgpu.tencent.com")",
           R"(device.driver == "a" || device.driver == "b")",
           R"(device.capacity["vgpu.tencent.com"].framebuffer.compareTo(quantity("4Gi")) >= 0)",
           R"(device.attributes["vgpu.tencent.com"].type == 'single')",
           R"(device.attributes["vgpu.tencent.com"].type == "a" && true)",
           R"(device.drivers == "a")",
           R"("a" == device.driver)",
           R"(device.attributes["vgpu.tencent.com"].migSlices == 1)",
       }) {
    auto parsed = CelSelector::Parse(expression);
    ASSERT_FALSE(parsed.ok()) << expression;
    EXPECT_NE(parsed.status().ToString().find("not modelled"), std::string::npos)
        << parsed.status().ToString();
  }
}

// The shipped DeviceClasses, every one of them read by the model, as JSON objects.
std::vector<json> ShippedClassObjects() {
  std::vector<json> out;
  for (const YAML::Node& doc :
       YAML::LoadAllFromFile(KVGPU_SOURCE_DIR "/deploy/components/dra/device-classes.yaml")) {
    if (!doc || doc["kind"].as<std::string>() != "DeviceClass") continue;
    json object = {{"kind", "DeviceClass"},
                   {"metadata", {{"name", doc["metadata"]["name"].as<std::string>()}}},
                   {"spec", {{"selectors", json::array()}}}};
    for (const YAML::Node& s : doc["spec"]["selectors"]) {
      object["spec"]["selectors"].push_back(
          {{"cel", {{"expression", s["cel"]["expression"].as<std::string>()}}}});
    }
    if (doc["spec"]["extendedResourceName"]) {
      object["spec"]["extendedResourceName"] =
          doc["spec"]["extendedResourceName"].as<std::string>();
    }
    out.push_back(object);
  }
  return out;
}

std::vector<DeviceClass> ShippedClasses() {
  std::vector<DeviceClass> out;
  for (const json& object : ShippedClassObjects()) {
    auto parsed = ParseDeviceClass(object);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    if (parsed.ok()) out.push_back(*parsed);
  }
  return out;
}

TEST(DraAllocatorClasses, EveryShippedClassIsReadAndMapsItsExtendedResource) {
  const std::vector<DeviceClass> classes = ShippedClasses();
  ASSERT_GT(classes.size(), 10u);
  const DeviceClass* c = ClassForExtendedResource(classes, "tencent.com/vgpu-230");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->name, "vgpu-230.vgpu.tencent.com");
  EXPECT_TRUE(*c->selectors[0].Matches(kDriver, Device("d", "nvidia-230")));
  EXPECT_FALSE(*c->selectors[0].Matches(kDriver, Device("d", "nvidia-231")));
  // The implicit name (ResourceDeviceClassPrefix + class name) maps as well.
  const DeviceClass* implicit =
      ClassForExtendedResource(classes, "deviceclass.resource.kubernetes.io/vgpu.tencent.com");
  ASSERT_NE(implicit, nullptr);
  EXPECT_EQ(implicit->name, "vgpu.tencent.com");
  EXPECT_EQ(ClassForExtendedResource(classes, "tencent.com/vgpu-999999"), nullptr);
}

json Slice(const std::string& name, const std::string& pool, int64_t generation, int64_t count,
           json devices, json counters = nullptr, const std::string& node = "node-a") {
  json spec = {
      {"driver", kDriver},
      {"nodeName", node},
      {"pool", {{"name", pool}, {"generation", generation}, {"resourceSliceCount", count}}}};
  if (!devices.is_null()) spec["devices"] = std::move(devices);
  if (!counters.is_null()) spec["sharedCounters"] = std::move(counters);
  return {{"metadata", {{"name", name}}}, {"spec", spec}};
}

json CounterSet(const std::string& name, const std::string& fb) {
  return {{"name", name}, {"counters", {{"framebuffer", {{"value", fb}}}}}};
}

json Claim(const std::string& name, const std::string& device_class, int64_t count = 1) {
  return {{"metadata", {{"namespace", "ns"}, {"name", name}}},
          {"spec",
           {{"devices",
             {{"requests", json::array({{{"name", "gpu"},
                                         {"exactly",
                                          {{"deviceClassName", device_class},
                                           {"allocationMode", "ExactCount"},
                                           {"count", count}}}}})}}}}}};
}

std::vector<DeviceClass> TypeClasses() {
  std::vector<DeviceClass> out;
  for (const char* type : {"a", "b"}) {
    auto c = ParseDeviceClass(
        {{"kind", "DeviceClass"},
         {"metadata", {{"name", std::string("class-") + type}}},
         {"spec",
          {{"selectors",
            json::array({{{"cel",
                           {{"expression",
                             std::string(R"(device.attributes["vgpu.tencent.com"].type == ")") +
                                 type + "\""}}}}})}}}});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    out.push_back(*c);
  }
  return out;
}

// Allocates one claim after another, each taking what the earlier ones got.
std::vector<std::string> AllocateAll(const std::vector<json>& slices,
                                     const std::string& device_class, int claims,
                                     std::set<DeviceId>* in_use) {
  std::vector<std::string> got;
  auto pools = GatherPools(slices, "node-a");
  EXPECT_TRUE(pools.ok()) << pools.status().ToString();
  for (int i = 0; i < claims; ++i) {
    auto r = Allocate(Claim("c" + std::to_string(i), device_class), TypeClasses(), *pools, *in_use);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || !r->has_value()) break;
    for (const DeviceResult& d : **r) {
      got.push_back(d.id.device);
      in_use->insert(d.id);
    }
  }
  return got;
}

TEST(DraAllocatorPools, OnlyTheHighestCompleteValidGenerationIsUsed) {
  std::vector<json> slices = {
      Slice("old", "node-a", 1, 1, json::array({Device("old-a", "a")})),
      Slice("new-1", "node-a", 2, 2, json::array({Device("new-a", "a")})),
  };
  std::set<DeviceId> in_use;
  // Generation 2 says two slices; one is there: incomplete, nothing allocated (and never gen 1).
  EXPECT_TRUE(AllocateAll(slices, "class-a", 1, &in_use).empty());
  slices.push_back(Slice("new-2", "node-a", 2, 2, json::array({Device("new-a2", "a")})));
  EXPECT_EQ(AllocateAll(slices, "class-a", 5, &in_use),
            (std::vector<std::string>{"new-a", "new-a2"}));
  // A repeated device name makes the pool invalid.
  std::vector<json> dup = {Slice("s1", "p", 1, 2, json::array({Device("x", "a")})),
                           Slice("s2", "p", 1, 2, json::array({Device("x", "a")}))};
  in_use.clear();
  EXPECT_TRUE(AllocateAll(dup, "class-a", 1, &in_use).empty());
  // Another node's pool is not this node's.
  std::vector<json> other = {
      Slice("o", "node-b", 1, 1, json::array({Device("o1", "a")}), nullptr, "node-b")};
  auto pools = GatherPools(other, "node-a");
  ASSERT_TRUE(pools.ok());
  EXPECT_TRUE(pools->empty());
  // Node selectors are not modelled: said, not skipped.
  json selected = other[0];
  selected["spec"].erase("nodeName");
  selected["spec"]["nodeSelector"] = json::object();
  EXPECT_FALSE(GatherPools({selected}, "node-a").ok());
}

TEST(DraAllocatorCounters, AllocatedDevicesDrawFromTheSharedCounter) {
  // One GPU of 4Gi: type a takes 1Gi (4 devices), type b 2Gi (2 devices); counters in their own
  // slice of the same pool (the 1.35 layout).
  const std::vector<json> slices = {
      Slice("counters", "node-a", 1, 2, nullptr, json::array({CounterSet("gpu0", "4Gi")})),
      Slice("devices", "node-a", 1, 2,
            json::array({Device("a0", "a", "gpu0", "1Gi"), Device("a1", "a", "gpu0", "1Gi"),
                         Device("a2", "a", "gpu0", "1Gi"), Device("a3", "a", "gpu0", "1Gi"),
                         Device("b0", "b", "gpu0", "2048Mi"), Device("b1", "b", "gpu0", "2Gi")})),
  };
  std::set<DeviceId> in_use;
  EXPECT_EQ(AllocateAll(slices, "class-a", 2, &in_use), (std::vector<std::string>{"a0", "a1"}));
  // 2Gi left: one b, then nothing of either.
  EXPECT_EQ(AllocateAll(slices, "class-b", 2, &in_use), (std::vector<std::string>{"b0"}));
  EXPECT_TRUE(AllocateAll(slices, "class-a", 1, &in_use).empty());
  // A freed device gives its counter back.
  in_use.erase({kDriver, "node-a", "a0"});
  EXPECT_EQ(AllocateAll(slices, "class-a", 2, &in_use), (std::vector<std::string>{"a0"}));
}

TEST(DraAllocatorCounters, ACountTwoClaimBacktracksOverDevicesAndCounters) {
  const std::vector<json> slices = {
      Slice("counters", "node-a", 1, 2, nullptr,
            json::array({CounterSet("gpu0", "1Gi"), CounterSet("gpu1", "2Gi")})),
      Slice("devices", "node-a", 1, 2,
            json::array({Device("g0-a0", "a", "gpu0", "1Gi"), Device("g0-a1", "a", "gpu0", "1Gi"),
                         Device("g1-a0", "a", "gpu1", "1Gi")})),
  };
  auto pools = GatherPools(slices, "node-a");
  ASSERT_TRUE(pools.ok());
  auto r = Allocate(Claim("two", "class-a", 2), TypeClasses(), *pools, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  // g0-a0 then g0-a1 would over-draw gpu0's 1Gi: the search moves on to g1-a0.
  ASSERT_EQ((*r)->size(), 2u);
  EXPECT_EQ((**r)[0].id.device, "g0-a0");
  EXPECT_EQ((**r)[1].id.device, "g1-a0");
  auto three = Allocate(Claim("three", "class-a", 3), TypeClasses(), *pools, {});
  ASSERT_TRUE(three.ok());
  EXPECT_FALSE(three->has_value());
}

// KEP-5963 ("Scheduler Changes", Example 4): on one counter set, devices are co-allocated only
// while the groups of all of them intersect; a device declaring none goes only with others that
// declare none; what is allocated counts through its claim's snapshot, not the slice of now.
TEST(DraAllocatorCompatibilityGroups, ARollingIntersectionPerCounterSetFromTheClaimsSnapshots) {
  const auto grouped = [](const std::string& name, const std::string& type, json groups) {
    json d = Device(name, type, "gpu0", "1Gi");
    if (!groups.empty()) d["consumesCounters"][0]["compatibilityGroups"] = std::move(groups);
    return d;
  };
  std::vector<json> slices = {
      Slice("counters", "node-a", 1, 2, nullptr, json::array({CounterSet("gpu0", "8Gi")})),
      Slice("devices", "node-a", 1, 2,
            json::array({grouped("foo", "a", {"foo", "foobar"}), grouped("plain", "a", {}),
                         grouped("baz", "b", {"baz"}), grouped("bar", "b", {"bar", "foobar"})})),
  };
  std::vector<json> claims;  // allocated, as the scheduler wrote them
  std::set<DeviceId> in_use;
  const auto allocate = [&](const std::string& device_class, bool enforce) -> std::string {
    auto pools = GatherPools(slices, "node-a");
    EXPECT_TRUE(pools.ok());
    const GroupSnapshots groups = AllocatedGroups(claims);
    auto r = Allocate(Claim("c" + std::to_string(claims.size()), device_class), TypeClasses(),
                      *pools, in_use, enforce ? &groups : nullptr);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || !r->has_value()) return "";
    claims.push_back({{"status", {{"allocation", AllocationJson(**r, "node-a", "t")}}}});
    for (const DeviceResult& d : **r) in_use.insert(d.id);
    return (**r)[0].id.device;
  };
  EXPECT_EQ(allocate("class-a", true), "foo");
  EXPECT_EQ(claims[0]["status"]["allocation"]["devices"]["results"][0]["compatibilityGroups"],
            json({{"gpu0", {"foo", "foobar"}}}))
      << "the result records the snapshot";
  EXPECT_EQ(allocate("class-b", true), "bar") << "baz shares no group with foo; bar does (foobar)";
  EXPECT_EQ(allocate("class-b", true), "") << "baz: {baz} meets nothing of {foobar}";
  EXPECT_EQ(allocate("class-a", true), "") << "plain declares none: not beside grouped devices";
  // The slice re-published with baz in foobar: the snapshots still decide, and now admit it.
  slices[1]["spec"]["devices"][2]["consumesCounters"][0]["compatibilityGroups"] = {"foobar"};
  EXPECT_EQ(allocate("class-b", true), "baz");
  // Before 1.37 (not enforced) the groups are ignored: plain goes too.
  EXPECT_EQ(allocate("class-a", false), "plain");

  // Only ungrouped devices: any of them together, as before the KEP.
  std::vector<json> none = {
      Slice("counters", "node-a", 1, 2, nullptr, json::array({CounterSet("gpu0", "8Gi")})),
      Slice(
          "devices", "node-a", 1, 2,
          json::array({grouped("p0", "a", {}), grouped("p1", "b", {}), grouped("g", "a", {"x"})}))};
  slices = none;
  claims.clear();
  in_use.clear();
  EXPECT_EQ(allocate("class-a", true), "p0");
  EXPECT_EQ(allocate("class-b", true), "p1");
  EXPECT_EQ(allocate("class-a", true), "") << "g declares a group: not beside ungrouped devices";
}

// KEP-5963 ("Design Details": reading the groups back from the slice is unsafe, so the scheduler
// keeps a snapshot per counter set in each result): a device the driver no longer lists (its
// slices narrowed to another lock, or re-published) still holds its counter set through its
// claim's snapshot. Found by the groups burst: a strict GPU's slice narrowed to one type dropped
// an allocated device of another, and a third type was admitted beside it.
TEST(DraAllocatorCompatibilityGroups, AnAllocatedDeviceTheSliceNoLongerListsStillCounts) {
  const auto grouped = [](const std::string& name, const std::string& type, json groups) {
    json d = Device(name, type, "gpu0", "1Gi");
    d["consumesCounters"][0]["compatibilityGroups"] = std::move(groups);
    return d;
  };
  const json counters =
      Slice("counters", "node-a", 1, 2, nullptr, json::array({CounterSet("gpu0", "8Gi")}));
  std::vector<json> slices = {
      counters,
      Slice("devices", "node-a", 1, 2,
            json::array({grouped("a0", "a", {"type-a"}), grouped("b0", "b", {"type-b"})}))};
  auto pools = GatherPools(slices, "node-a");
  ASSERT_TRUE(pools.ok());
  auto first = Allocate(Claim("first", "class-a"), TypeClasses(), *pools, {}, nullptr);
  ASSERT_TRUE(first.ok() && first->has_value());
  std::vector<DeviceResult> results = **first;
  // What the enforcing scheduler records for a0.
  results[0].compatibility_groups = {{"gpu0", {"type-a"}}};
  const std::vector<json> claims = {
      {{"status", {{"allocation", AllocationJson(results, "node-a", "t")}}}}};
  const std::set<DeviceId> in_use = {results[0].id};
  const GroupSnapshots groups = AllocatedGroups(claims);

  // Re-published without a0 (narrowed to type b): b0 must still meet a0's {type-a}.
  slices[1] = Slice("devices", "node-a", 2, 2, json::array({grouped("b0", "b", {"type-b"})}));
  slices[0]["spec"]["pool"]["generation"] = 2;
  auto narrowed = GatherPools(slices, "node-a");
  ASSERT_TRUE(narrowed.ok());
  ASSERT_EQ((*narrowed)[0].devices.size(), 1u);
  auto second = Allocate(Claim("second", "class-b"), TypeClasses(), *narrowed, in_use, &groups);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(second->has_value()) << "b0 was admitted beside the unlisted a0";
  // The same claim once a0 is freed: the counter set is free of groups again.
  auto freed = Allocate(Claim("second", "class-b"), TypeClasses(), *narrowed, {}, &groups);
  ASSERT_TRUE(freed.ok() && freed->has_value());
  EXPECT_EQ((**freed)[0].id.device, "b0");
}

TEST(DraAllocatorResults, BindingConditionsAreCopiedAndTheAllocationWritten) {
  json device = Device("a0", "a");
  device["bindingConditions"] = json::array({"vgpu.tencent.com/occupancy-confirmed"});
  device["bindingFailureConditions"] = json::array({"vgpu.tencent.com/occupancy-conflict"});
  auto pools = GatherPools({Slice("s", "node-a", 1, 1, json::array({device}))}, "node-a");
  ASSERT_TRUE(pools.ok());
  auto r = Allocate(Claim("c", "class-a"), TypeClasses(), *pools, {});
  ASSERT_TRUE(r.ok() && r->has_value());
  const json allocation = AllocationJson(**r, "node-a", "2026-01-02T03:04:05Z");
  const json& result = allocation["devices"]["results"][0];
  EXPECT_EQ(result["request"], "gpu");
  EXPECT_EQ(result["driver"], kDriver);
  EXPECT_EQ(result["pool"], "node-a");
  EXPECT_EQ(result["device"], "a0");
  EXPECT_EQ(result["bindingConditions"], device["bindingConditions"]);
  EXPECT_EQ(result["bindingFailureConditions"], device["bindingFailureConditions"]);
  EXPECT_EQ(allocation["allocationTimestamp"], "2026-01-02T03:04:05Z");
  EXPECT_EQ(allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
            "node-a");
}

TEST(DraAllocatorResults, UnmodelledRequestsAreRefused) {
  auto pools =
      GatherPools({Slice("s", "node-a", 1, 1, json::array({Device("a0", "a")}))}, "node-a");
  ASSERT_TRUE(pools.ok());
  json all = Claim("c", "class-a");
  all["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All";
  json constrained = Claim("c", "class-a");
  constrained["spec"]["devices"]["constraints"] =
      json::array({{{"distinctAttribute", "vgpu.tencent.com/physicalGpu"}}});
  json first = Claim("c", "class-a");
  first["spec"]["devices"]["requests"][0]["firstAvailable"] = json::array();
  json bad_selector = Claim("c", "class-a");
  bad_selector["spec"]["devices"]["requests"][0]["exactly"]["selectors"] =
      json::array({{{"cel", {{"expression", "device.driver.startsWith(\"v\")"}}}}});
  for (const json& claim : {all, constrained, first, bad_selector}) {
    auto r = Allocate(claim, TypeClasses(), *pools, {});
    EXPECT_FALSE(r.ok()) << claim.dump();
  }
  EXPECT_FALSE(Allocate(Claim("c", "no-such-class"), TypeClasses(), *pools, {}).ok());
}

// The node daemon's own slices for a strict T4 node (deviceplugin/dra/resource_slices.h).
std::vector<json> T4Slices(const std::string& node) {
  SimNode sim("t4x2");
  auto inventory = sim.node().Scan();
  EXPECT_TRUE(inventory.ok());
  deviceplugin::dra::SliceOptions options;
  options.node_name = node;
  const deviceplugin::GpuRules rules(*inventory, options.model.occupancy);
  auto slices = deviceplugin::dra::BuildResourceSlices(*inventory, rules, options, 1);
  EXPECT_TRUE(slices.ok()) << slices.status().ToString();
  return slices.ok() ? *slices : std::vector<json>{};
}

TEST(DraAllocatorOnDaemonSlices, CountersKeepEachT4WithinItsFramebuffer) {
  const std::vector<DeviceClass> classes = ShippedClasses();
  auto pools = GatherPools(T4Slices("node-a"), "node-a");
  ASSERT_TRUE(pools.ok()) << pools.status().ToString();
  ASSERT_EQ(pools->size(), 1u);
  EXPECT_TRUE((*pools)[0].complete);
  std::set<DeviceId> in_use;
  std::map<std::string, int> per_gpu;  // counter set -> 1Gi devices taken
  const auto gpu_of = [&](const DeviceId& id) {
    for (const PoolDevice& d : (*pools)[0].devices) {
      if (d.name == id.device) return d.consumes.at(0).counter_set;
    }
    return std::string();
  };
  // 16 x 1Gi (nvidia-230) per 16Gi T4: 32 on the node, then none.
  for (int i = 0; i < 33; ++i) {
    auto r = Allocate(Claim("c" + std::to_string(i), "vgpu-230.vgpu.tencent.com"), classes, *pools,
                      in_use);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (i == 32) {
      EXPECT_FALSE(r->has_value()) << "a 33rd 1Gi vGPU on two 16Gi T4s";
      break;
    }
    ASSERT_TRUE(r->has_value()) << i;
    in_use.insert((**r)[0].id);
    ++per_gpu[gpu_of((**r)[0].id)];
  }
  for (const auto& [gpu, n] : per_gpu) EXPECT_EQ(n, 16) << gpu;
  // Free 2 of GPU 0's: a 2Gi vGPU (nvidia-231) fits there, and only one.
  int freed = 0;
  for (auto it = in_use.begin(); it != in_use.end() && freed < 2;) {
    if (gpu_of(*it) == per_gpu.begin()->first) {
      it = in_use.erase(it);
      ++freed;
    } else {
      ++it;
    }
  }
  auto two = Allocate(Claim("b0", "vgpu-231.vgpu.tencent.com"), classes, *pools, in_use);
  ASSERT_TRUE(two.ok() && two->has_value());
  EXPECT_EQ(gpu_of((**two)[0].id), per_gpu.begin()->first);
  in_use.insert((**two)[0].id);
  auto three = Allocate(Claim("b1", "vgpu-231.vgpu.tencent.com"), classes, *pools, in_use);
  ASSERT_TRUE(three.ok());
  EXPECT_FALSE(three->has_value()) << "2Gi more on a T4 with 0Gi left";
}

}  // namespace
}  // namespace kvgpu::testing::dra

namespace kvgpu::testing::dra {
namespace {

// The scheduler model on an in-memory claim store: one GPU pool of two devices of type a.
struct SchedulerFixture {
  explicit SchedulerFixture(std::vector<json> devices)
      : slices({Slice("s", "node-a", 1, 1, std::move(devices))}), api([this] { return slices; }) {}
  std::vector<json> slices;
  MemoryClaimApi api;
};

SchedulerOptions FastOptions() {
  SchedulerOptions o;
  o.nodes = {"node-a"};
  o.classes = TypeClasses();
  o.classes[0].extended_resource_name = "tencent.com/vgpu-a";
  o.binding_poll = std::chrono::milliseconds(5);
  o.binding_timeout = std::chrono::milliseconds(300);
  o.retry = std::chrono::milliseconds(10);
  return o;
}

PodSpec Pod(const std::string& name) {
  return {"ns", name, "uid-" + name, {{"tencent.com/vgpu-a", 1}}};
}

TEST(DraSchedulerModel, AnExtendedResourcePodGetsTheSchedulersClaimAllocatedAndBound) {
  SchedulerFixture f(std::vector<json>{Device("a0", "a")});
  std::mutex m;
  std::vector<BoundPod> bound;
  SchedulerModel scheduler(FastOptions(), f.api, [&](const BoundPod& b) {
    std::lock_guard<std::mutex> lock(m);
    bound.push_back(b);
  });
  scheduler.Start();
  scheduler.Submit(Pod("p"));
  ASSERT_TRUE(scheduler.WaitSettled(kvgpu::testing::kEventDeadline));
  scheduler.Stop();
  ASSERT_EQ(bound.size(), 1u);
  const json& claim = bound[0].claim;
  EXPECT_EQ(bound[0].node, "node-a");
  EXPECT_EQ(claim["metadata"]["name"].get<std::string>().rfind("p-extended-resources-", 0), 0u);
  EXPECT_EQ(claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"],
            "true");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["uid"], "uid-p");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["controller"], true);
  const json& request = claim["spec"]["devices"]["requests"][0];
  EXPECT_EQ(request["name"], "container-0-request-0");
  EXPECT_EQ(request["exactly"]["deviceClassName"], "class-a");
  EXPECT_EQ(claim["status"]["allocation"]["devices"]["results"][0]["device"], "a0");
  EXPECT_TRUE(claim["status"]["allocation"].contains("allocationTimestamp"));
  EXPECT_EQ(claim["status"]["reservedFor"][0]["uid"], "uid-p");
}

TEST(DraSchedulerModel, InFlightAllocationsCountWhileBindingRunsAsynchronously) {
  SchedulerFixture f(std::vector<json>{Device("a0", "a"), Device("a1", "a")});
  SchedulerOptions options = FastOptions();
  options.bind_delay = std::chrono::milliseconds(300);  // both cycles run before either binds
  std::mutex m;
  std::vector<std::string> devices;
  SchedulerModel scheduler(options, f.api, [&](const BoundPod& b) {
    std::lock_guard<std::mutex> lock(m);
    devices.push_back(b.claim["status"]["allocation"]["devices"]["results"][0]["device"]);
  });
  scheduler.Start();
  scheduler.Submit(Pod("p1"));
  scheduler.Submit(Pod("p2"));
  scheduler.Submit(Pod("p3"));  // no third device
  ASSERT_TRUE(scheduler.WaitSettled(kvgpu::testing::kEventDeadline));
  scheduler.Stop();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_NE(devices[0], devices[1]) << "two pods got one device";
  // Counted by the model, not timed: one after the other, the second cycle would have seen the
  // first's allocation written and the in-flight count would not have been needed.
  EXPECT_EQ(scheduler.stats().most_bindings_running, 2) << "the bindings ran one after the other";
  EXPECT_EQ(scheduler.Pending().size(), 1u);
}

// The scheduler's slices lag its claims. Pod a's device a0 is allocated from slices that list
// every type; then the slices read are narrowed to type b (a lock the driver has not re-published
// away yet) and no longer list a0. KEP-5963: a0 still holds the counter set through its claim's
// snapshot, so b0 waits. The groups burst failed this way (docs/dra.md).
TEST(DraSchedulerModel, AnAllocationHoldsItsGroupsWhileTheSlicesReadNoLongerListIt) {
  const auto grouped = [](const std::string& name, const std::string& type) {
    json d = Device(name, type, "gpu0", "1Gi");
    d["consumesCounters"][0]["compatibilityGroups"] = {"type-" + type};
    return d;
  };
  const auto slices_at = [&](int64_t generation, json devices) {
    return std::vector<json>{Slice("counters", "node-a", generation, 2, nullptr,
                                   json::array({CounterSet("gpu0", "8Gi")})),
                             Slice("devices", "node-a", generation, 2, std::move(devices))};
  };
  std::mutex m;
  std::vector<json> slices = slices_at(1, json::array({grouped("a0", "a"), grouped("b0", "b")}));
  MemoryClaimApi api([&] {
    std::lock_guard<std::mutex> lock(m);
    return slices;
  });
  SchedulerOptions options = FastOptions();
  options.classes[1].extended_resource_name = "tencent.com/vgpu-b";
  options.compatibility_groups = true;
  std::vector<std::string> devices;
  SchedulerModel scheduler(options, api, [&](const BoundPod& b) {
    std::lock_guard<std::mutex> lock(m);
    devices.push_back(b.claim["status"]["allocation"]["devices"]["results"][0]["device"]);
  });
  scheduler.Start();
  scheduler.Submit(Pod("pa"));
  ASSERT_TRUE(scheduler.WaitSettled(kvgpu::testing::kEventDeadline));
  {
    std::lock_guard<std::mutex> lock(m);
    ASSERT_EQ(devices, std::vector<std::string>{"a0"});
    slices = slices_at(2, json::array({grouped("b0", "b")}));
  }
  scheduler.Submit({"ns", "pb", "uid-pb", {{"tencent.com/vgpu-b", 1}}});
  ASSERT_TRUE(scheduler.WaitSettled(kvgpu::testing::kEventDeadline));
  scheduler.Stop();
  std::lock_guard<std::mutex> lock(m);
  EXPECT_EQ(devices, std::vector<std::string>{"a0"}) << "b0 was allocated beside a0";
  ASSERT_EQ(scheduler.Pending().size(), 1u);
  EXPECT_EQ(scheduler.Pending()[0].name, "pb");
}

TEST(DraSchedulerModel, PreBindWaitsForBindingConditionsAndRequeuesOnFailureOrTimeout) {
  json device = Device("a0", "a");
  device["bindingConditions"] = json::array({"example.com/confirmed"});
  device["bindingFailureConditions"] = json::array({"example.com/conflict"});
  json second = device;
  second["name"] = "a1";
  SchedulerFixture f(std::vector<json>{device, second});
  std::atomic<int> bound{0};
  SchedulerModel scheduler(FastOptions(), f.api, [&](const BoundPod&) { ++bound; });
  // A controller that fails the first allocation it sees and confirms the second.
  std::atomic<bool> stop{false};
  std::thread controller([&] {
    std::set<std::string> seen;
    while (!stop) {
      auto claims = f.api.List();
      for (const json& c : claims.ok() ? *claims : std::vector<json>{}) {
        const std::string name = c["metadata"]["name"];
        if (c.value("/status/allocation"_json_pointer, json()).is_null() || seen.count(name))
          continue;
        seen.insert(name);
        const json& result = c["status"]["allocation"]["devices"]["results"][0];
        const bool first = seen.size() == 1;
        (void)f.api.SetDeviceCondition(
            "ns", name, result, first ? "example.com/conflict" : "example.com/confirmed", "True");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  scheduler.Start();
  scheduler.Submit(Pod("p"));
  for (int i = 0; i < 500 && bound == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  controller.join();
  ASSERT_EQ(bound, 1);
  EXPECT_EQ(scheduler.stats().binding_failures, 1);
  // The failed attempt's claim was deleted: one claim left, the bound one.
  EXPECT_EQ(f.api.List()->size(), 1u);

  // Nobody confirms: the binding times out, the claim goes, the pod waits again.
  scheduler.Submit(Pod("q"));
  for (int i = 0; i < 200 && scheduler.stats().binding_timeouts == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  scheduler.Stop();
  EXPECT_GE(scheduler.stats().binding_timeouts, 1);
  EXPECT_EQ(bound, 1);
}

TEST(DraSchedulerModel, ReadinessFollowsTheClaimsDeviceConditions) {
  json claim = {
      {"metadata", {{"name", "c"}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results", json::array({{{"driver", "d"},
                                      {"pool", "p"},
                                      {"device", "x"},
                                      {"bindingConditions", json::array({"ok"})},
                                      {"bindingFailureConditions", json::array({"bad"})}}})}}}}}}}};
  EXPECT_FALSE(*ClaimReadyForBinding(claim));  // no status.devices entry yet
  claim["status"]["devices"] =
      json::array({{{"driver", "d"},
                    {"pool", "p"},
                    {"device", "x"},
                    {"conditions", json::array({{{"type", "ok"}, {"status", "False"}}})}}});
  EXPECT_FALSE(*ClaimReadyForBinding(claim));
  claim["status"]["devices"][0]["conditions"][0]["status"] = "True";
  EXPECT_TRUE(*ClaimReadyForBinding(claim));
  claim["status"]["devices"][0]["conditions"].push_back({{"type", "bad"}, {"status", "True"}});
  EXPECT_FALSE(ClaimReadyForBinding(claim).ok());
  claim["status"]["allocation"] = nullptr;
  EXPECT_FALSE(*ClaimReadyForBinding(claim));
}

}  // namespace
}  // namespace kvgpu::testing::dra
