// The window narrowing alone leaves, closed through binding conditions (docs/dra.md): the daemon
// in DRA mode on a strict T4 node publishes devices that wait for OccupancyConfirmed; two claims
// of different types allocated to one free GPU, written as kube-scheduler writes them (allocation
// with the devices' binding conditions copied and an allocationTimestamp), get OccupancyConfirmed
// (the first) and OccupancyConflict (the second) in their status.devices, through the fake API
// server's status subresource and its validation; the slices narrow at once, before any vGPU
// exists; the scheduler's recovery (allocation cleared, allocated again elsewhere) is confirmed;
// a daemon restart keeps the confirmation and decides new claims against it; another driver's
// status entry is never touched; a claim deleted gives its GPU back.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "deviceplugin/daemon.h"
#include "deviceplugin/dra/occupancy_decision.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/dra_node.h"
#include "fakes/common/sim_daemon_options.h"
#include "fakes/common/sim_node.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/fake_podresources.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string kDriver = std::string(dra::kDefaultDraDriverName);
constexpr const char* kNode = "node-1";

// A claim as kube-scheduler leaves it after Reserve and PreBind's status update: allocated with
// the devices' binding conditions copied from the slice, reserved for its pod, stamped.
json ScheduledClaim(const std::string& name, const std::string& uid,
                    const std::vector<json>& slice_devices, const std::string& timestamp) {
  json results = json::array();
  for (const json& device : slice_devices) {
    json result = {
        {"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device["name"]}};
    for (const char* field : {"bindingConditions", "bindingFailureConditions"}) {
      if (device.contains(field)) result[field] = device[field];
    }
    results.push_back(result);
  }
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"namespace", "ns"}, {"name", name}, {"uid", uid}}},
      {"spec", {{"devices", {{"requests", json::array({{{"name", "gpu"}}})}}}}},
      {"status",
       {{"allocation",
         {{"devices", {{"results", results}}},
          {"nodeSelector",
           {{"nodeSelectorTerms",
             json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                         {"operator", "In"},
                                                         {"values", json::array({kNode})}}})}}})}}},
          {"allocationTimestamp", timestamp}}},
        {"reservedFor",
         json::array({{{"resource", "pods"}, {"name", "pod-" + name}, {"uid", "pod-" + uid}}})}}}};
}

// The True condition of our entry for `device` in the claim's status: "" when none.
std::string Verdict(const json& claim, const std::string& device) {
  if (claim.is_null() || !claim.contains("status") || !claim["status"].contains("devices")) {
    return "";
  }
  for (const json& entry : claim["status"]["devices"]) {
    if (entry.value("driver", "") != kDriver || entry.value("device", "") != device) continue;
    for (const json& condition : entry.value("conditions", json::array())) {
      if (condition.value("status", "") == "True") return condition.value("type", "");
    }
  }
  return "";
}

std::vector<json> CompletePool(const std::vector<json>& slices) {
  int64_t generation = -1;
  for (const json& s : slices) {
    generation = std::max<int64_t>(generation, s["spec"]["pool"]["generation"].get<int64_t>());
  }
  std::vector<json> pool;
  for (const json& s : slices) {
    if (s["spec"]["pool"]["generation"].get<int64_t>() == generation) pool.push_back(s);
  }
  if (pool.empty() || pool.size() != pool[0]["spec"]["pool"]["resourceSliceCount"].get<size_t>()) {
    return {};
  }
  return pool;
}

std::vector<json> Devices(const std::vector<json>& pool) {
  std::vector<json> out;
  for (const json& s : pool) {
    for (const json& d : s["spec"].value("devices", json::array())) out.push_back(d);
  }
  return out;
}

std::string Attribute(const json& device, const std::string& name) {
  return device["attributes"][name]["string"];
}

// The device of `type` in slot `slot` on `gpu` as published.
json Find(const std::vector<json>& devices, const std::string& gpu, const std::string& type,
          uint32_t slot) {
  for (const json& d : devices) {
    if (d["name"] == dra::DraDeviceName(gpu, type, slot)) return d;
  }
  return nullptr;
}

// The types the published pool offers on `gpu`.
std::set<std::string> TypesOn(const std::vector<json>& devices, const std::string& gpu) {
  std::set<std::string> types;
  for (const json& d : devices) {
    if (Attribute(d, "physicalGpu") == gpu) types.insert(Attribute(d, "type"));
  }
  return types;
}

class DraDaemonOccupancyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(kubelet_dir_ / "pod-resources");
    ASSERT_TRUE(kubelet_.Start());
    ASSERT_TRUE(podresources_.Start());
    ASSERT_TRUE(api_server_.Start());
    api_server_.SetNode({{"metadata", {{"name", kNode}, {"uid", "node-uid-1"}}}});
    auto api = kube::ApiClient::Create(api_server_.ClientConfig());
    ASSERT_TRUE(api.ok());
    api_ = std::move(api.value());
  }

  void StartDaemon(bool binding_conditions = true) {
    DaemonOptions options = testing::SimDraDaemonOptions(sim_);
    options.args.node_name = kNode;
    options.config.dra.binding_conditions = binding_conditions;
    options.pods = &pods_;
    options.events = &events_;
    options.api = api_.get();
    options.dra_slice_interval = 20ms;
    daemon_ = std::make_unique<Daemon>(options);
    Status started = daemon_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    pods_.Sync({});
  }

  std::vector<json> WaitPool(const std::function<bool(const std::vector<json>&)>& accept) {
    for (int i = 0; i < 500; ++i) {
      std::vector<json> pool = CompletePool(api_server_.resource_slices());
      if (!pool.empty() && accept(pool)) return pool;
      std::this_thread::sleep_for(20ms);
    }
    return {};
  }

  bool WaitVerdict(const std::string& name, const std::string& device, const std::string& want) {
    return api_server_.WaitFor(
        [&] { return Verdict(api_server_.resource_claim("ns", name), device) == want; });
  }

  kvgpu::testing::SimNode sim_{"t4x2"};
  std::filesystem::path kubelet_dir_ = sim_.dir() / "kubelet";
  kvgpu::testing::FakeKubelet kubelet_{kubelet_dir_ / "device-plugins"};
  kvgpu::testing::FakePodResources podresources_{kubelet_dir_ / "pod-resources" / "kubelet.sock"};
  kvgpu::testing::InMemoryPodWatcher pods_;
  kvgpu::testing::RecordingEventRecorder events_;
  kvgpu::testing::FakeApiServer api_server_;
  std::unique_ptr<kube::ApiClient> api_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DraDaemonOccupancyTest, TwoTypesOnOneFreeGpuTheSecondFailsItsBindAndIsPlacedAgain) {
  StartDaemon();
  const std::string gpu = sim_.gpu(1);
  const std::string other_gpu = sim_.gpu(0);
  const std::vector<json> free = Devices(WaitPool([](const auto&) { return true; }));
  ASSERT_FALSE(free.empty());
  for (const json& d : free) {
    ASSERT_EQ(d["bindingConditions"], json::array({dra::kOccupancyConfirmed})) << d["name"];
    ASSERT_EQ(d["bindingFailureConditions"], json::array({dra::kOccupancyConflict}));
  }
  const size_t all_types = TypesOn(free, gpu).size();
  ASSERT_GT(all_types, 3u) << "a free T4 offers every type";

  // One scheduling cycle after another, both on the free GPU from the same (free) slices.
  const json a = Find(free, gpu, "nvidia-222", 0);
  const json b = Find(free, gpu, "nvidia-230", 0);
  json claim_a = ScheduledClaim("a", "uid-a", {a}, "2026-01-01T00:00:01Z");
  // Another driver's device in the same claim, with its own status entry.
  claim_a["status"]["allocation"]["devices"]["results"].push_back(
      {{"request", "nic"}, {"driver", "net.example.com"}, {"pool", "p"}, {"device", "eth1"}});
  const json foreign = {
      {"driver", "net.example.com"},
      {"pool", "p"},
      {"device", "eth1"},
      {"conditions", json::array({{{"type", "Ready"},
                                   {"status", "True"},
                                   {"reason", "Up"},
                                   {"message", ""},
                                   {"lastTransitionTime", "2026-01-01T00:00:01Z"}}})}};
  claim_a["status"]["devices"] = json::array({foreign});
  api_server_.SetResourceClaim(claim_a);
  api_server_.SetResourceClaim(ScheduledClaim("b", "uid-b", {b}, "2026-01-01T00:00:02Z"));

  ASSERT_TRUE(WaitVerdict("a", a["name"], dra::kOccupancyConfirmed))
      << api_server_.resource_claim("ns", "a").dump();
  ASSERT_TRUE(WaitVerdict("b", b["name"], dra::kOccupancyConflict))
      << api_server_.resource_claim("ns", "b").dump();
  const json status_a = api_server_.resource_claim("ns", "a")["status"]["devices"];
  EXPECT_EQ(status_a.size(), 2u);
  EXPECT_TRUE(std::find(status_a.begin(), status_a.end(), foreign) != status_a.end())
      << "the other driver's entry is kept as it was: " << status_a.dump();

  // Narrowed before any vGPU exists: only the confirmed claim's type stays on that GPU.
  EXPECT_TRUE(sim_.model().Vgpus().empty());
  const std::vector<json> narrowed = Devices(WaitPool([&](const std::vector<json>& pool) {
    return TypesOn(Devices(pool), gpu) == std::set<std::string>{"nvidia-222"};
  }));
  ASSERT_FALSE(narrowed.empty()) << "the confirmed claim did not narrow its GPU";
  EXPECT_EQ(TypesOn(narrowed, other_gpu).size(), all_types);

  // The scheduler's recovery: PostFilter clears b's allocation, reservation and device status;
  // the next cycle allocates it from the narrowed slices, on the other GPU.
  json cleared = api_server_.resource_claim("ns", "b");
  cleared.erase("status");
  api_server_.SetResourceClaim(cleared);
  const json b_again = Find(narrowed, other_gpu, "nvidia-230", 0);
  ASSERT_FALSE(b_again.is_null());
  api_server_.SetResourceClaim(ScheduledClaim("b", "uid-b", {b_again}, "2026-01-01T00:00:03Z"));
  ASSERT_TRUE(WaitVerdict("b", b_again["name"], dra::kOccupancyConfirmed))
      << api_server_.resource_claim("ns", "b").dump();

  // Kubelet prepares the confirmed claim: its vGPU on its GPU.
  kvgpu::testing::DraTestKubelet dra_kubelet(kubelet_dir_);
  ASSERT_TRUE(dra_kubelet.Register(kDriver));
  auto answers = dra_kubelet.Prepare({{"ns", "uid-a", "a"}});
  ASSERT_EQ(answers["uid-a"].error, "");
  ASSERT_EQ(sim_.model().Vgpus().size(), 1u);
  EXPECT_EQ(sim_.model().Vgpus()[0].parent, gpu);

  // A restart: the confirmation stands (nothing rewritten), and a new claim of another type on
  // that GPU still conflicts.
  daemon_->Stop();
  daemon_.reset();
  const int writes = api_server_.resource_claim_status_writes();
  StartDaemon();
  const json c = Find(free, gpu, "nvidia-231", 0);
  api_server_.SetResourceClaim(ScheduledClaim("c", "uid-c", {c}, "2026-01-01T00:00:04Z"));
  ASSERT_TRUE(WaitVerdict("c", c["name"], dra::kOccupancyConflict))
      << api_server_.resource_claim("ns", "c").dump();
  EXPECT_EQ(api_server_.resource_claim_status_writes(), writes + 1) << "only c was written";
  EXPECT_EQ(Verdict(api_server_.resource_claim("ns", "a"), a["name"]), dra::kOccupancyConfirmed);

  // Gone: unprepared and deleted, the GPU is free again for any type.
  EXPECT_EQ(dra_kubelet.Unprepare({{"ns", "uid-a", "a"}})["uid-a"], "");
  api_server_.DeleteResourceClaim("ns", "a");
  api_server_.DeleteResourceClaim("ns", "c");
  EXPECT_FALSE(WaitPool([&](const std::vector<json>& pool) {
                 return TypesOn(Devices(pool), gpu).size() == all_types;
               }).empty())
      << "the GPU was not given back";
  const json d = Find(free, gpu, "nvidia-231", 1);
  api_server_.SetResourceClaim(ScheduledClaim("d", "uid-d", {d}, "2026-01-01T00:00:05Z"));
  EXPECT_TRUE(WaitVerdict("d", d["name"], dra::kOccupancyConfirmed))
      << api_server_.resource_claim("ns", "d").dump();
  daemon_->Stop();
}

TEST_F(DraDaemonOccupancyTest, SwitchedOffTheDevicesCarryNoConditionsAndNothingIsWritten) {
  StartDaemon(false);
  const std::vector<json> pool = WaitPool([](const std::vector<json>& p) {
    for (const json& d : Devices(p)) {
      if (d.contains("bindingConditions")) return false;
    }
    return true;
  });
  ASSERT_FALSE(pool.empty()) << "the devices still carry binding conditions";
  const json a = Find(Devices(pool), sim_.gpu(1), "nvidia-222", 0);
  api_server_.SetResourceClaim(ScheduledClaim("a", "uid-a", {a}, "2026-01-01T00:00:01Z"));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(api_server_.resource_claim_status_writes(), 0);
  daemon_->Stop();
}

}  // namespace
}  // namespace kvgpu::deviceplugin
