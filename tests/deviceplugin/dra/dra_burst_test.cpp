// A burst of 200 vGPU pods of 6 types, with random deletions, over several simulated nodes whose
// daemons run in DRA mode and publish their ResourceSlices to the fake API server; allocated by
// the scheduler model written from the KEPs (fakes/dra_allocator/: structured parameters,
// counters, generations, the extended-resource mapping, binding conditions, the binding cycle
// asynchronous), each bound pod's claim prepared by kubelet's DRA gRPC on its node. Defends:
// - zero NodePrepareResources failures;
// - never two lock keys (scheduling::LockKey: two types on a strict GPU, two framebuffer sizes on
//   an equal-size one) on one GPU of the simulated kernel, sampled all along;
// - every pod that fits is eventually allocated: once the scheduler settles, no waiting pod's
//   type is creatable on any GPU (the kernel's available_instances).
// Seeded; the seed is printed with every failure (KVGPU_BURST_SEED overrides it).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/daemon.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/eventually.h"
#include "fakes/common/sim_daemon_options.h"
#include "fakes/common/sim_node.h"
#include "fakes/dra_allocator/allocator.h"
#include "fakes/dra_allocator/claim_api.h"
#include "fakes/dra_allocator/scheduler.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/fake_podresources.h"
#include "scheduling/gpu_fit.h"

namespace kvgpu::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kDriver = "vgpu.tencent.com";

// One simulated node: its kernel, kubelet's sockets, the daemon in DRA mode on every GPU.
struct Node {
  Node(const std::string& profile, std::string node_name, FakeApiServer& api_server,
       bool binding_conditions,
       deviceplugin::OccupancySetting occupancy_mode = deviceplugin::OccupancySetting::kAuto)
      : name(std::move(node_name)),
        sim(profile),
        kubelet_dir(sim.dir() / "kubelet"),
        kubelet((std::filesystem::create_directories(kubelet_dir / "pod-resources"),
                 kubelet_dir / "device-plugins")),
        podresources(kubelet_dir / "pod-resources" / "kubelet.sock"),
        dra_kubelet(kubelet_dir) {
    if (!kubelet.Start() || !podresources.Start()) throw std::runtime_error("kubelet fakes");
    api_server.SetNode({{"metadata", {{"name", name}, {"uid", name + "-uid"}}}});
    auto client = kube::ApiClient::Create(api_server.ClientConfig());
    if (!client.ok()) throw std::runtime_error(client.status().ToString());
    api = std::move(*client);
    deviceplugin::DaemonOptions options = deviceplugin::testing::SimDraDaemonOptions(sim);
    options.args.node_name = name;
    options.config.dra.binding_conditions = binding_conditions;
    options.config.occupancy = occupancy_mode;
    options.config.cdi_dir = sim.dir() / "cdi";  // each node its own, never the host's
    options.config.rescan_interval = 200ms;
    options.pods = &pods;
    options.events = &events;
    options.api = api.get();
    options.dra_slice_interval = 20ms;
    daemon = std::make_unique<deviceplugin::Daemon>(options);
    Status started = daemon->Start();
    if (!started.ok()) throw std::runtime_error(started.ToString());
    pods.Sync({});
    if (!dra_kubelet.Register(kDriver)) throw std::runtime_error("DRA plugin not registered");
    // The GPU each vGPU parent belongs to, and how each GPU locks.
    auto inventory = sim.node().Scan();
    if (!inventory.ok()) throw std::runtime_error(inventory.status().ToString());
    for (const mdev::Parent& parent : inventory->parents) gpu_of[parent.name] = parent.physical_gpu;
    for (const sim::GpuSpec& gpu : sim.model().profile().gpus) {
      for (const sim::TypeSpec& type : gpu.types) framebuffer[type.id] = type.framebuffer_mib;
      occupancy[gpu.address] = gpu.lock == sim::GpuSpec::Lock::kFramebuffer
                                   ? scheduling::Occupancy::kEqualSize
                                   : scheduling::Occupancy::kStrict;
    }
  }
  ~Node() { daemon->Stop(); }

  // GPU -> the lock keys of the vGPUs the kernel holds on it now.
  std::map<std::string, std::set<std::string>> LockKeys() {
    std::map<std::string, std::set<std::string>> out;
    for (const sim::KernelModel::VgpuInfo& v : sim.model().Vgpus()) {
      const std::string gpu = gpu_of.count(v.parent) ? gpu_of[v.parent] : v.parent;
      out[gpu].insert(scheduling::LockKey(occupancy[gpu], v.type, framebuffer[v.type]));
    }
    return out;
  }
  // The GPUs of this node on which the kernel can create one more vGPU of `type` now.
  std::vector<std::string> Creatable(const std::string& type) {
    std::vector<std::string> out;
    auto inventory = sim.node().Scan();
    if (!inventory.ok()) return {"scan failed: " + inventory.status().ToString()};
    for (const mdev::Parent& parent : inventory->parents) {
      for (const mdev::VgpuType& t : parent.types) {
        if (t.id == type && t.available_instances > 0) out.push_back(parent.name);
      }
    }
    return out;
  }

  std::string name;
  SimNode sim;
  std::filesystem::path kubelet_dir;
  FakeKubelet kubelet;
  FakePodResources podresources;
  InMemoryPodWatcher pods;
  RecordingEventRecorder events;
  std::unique_ptr<kube::ApiClient> api;
  std::unique_ptr<deviceplugin::Daemon> daemon;
  DraTestKubelet dra_kubelet;
  std::map<std::string, std::string> gpu_of;
  std::map<std::string, uint64_t> framebuffer;
  std::map<std::string, scheduling::Occupancy> occupancy;
};

// "a b c ": lock keys as a failure's message lists them.
std::string Listed(const std::set<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += k + " ";
  return out;
}

std::vector<dra::DeviceClass> ShippedClasses() {
  // The shipped file's classes, as the model reads them (dra_allocator_test checks every one);
  // here only the per-type form is needed, built the way the file writes it.
  std::vector<dra::DeviceClass> out;
  for (const char* type :
       {"nvidia-222", "nvidia-225", "nvidia-230", "nvidia-231", "nvidia-692", "nvidia-693"}) {
    const std::string id = std::string(type).substr(std::string("nvidia-").size());
    auto parsed = dra::ParseDeviceClass(
        {{"kind", "DeviceClass"},
         {"metadata", {{"name", "vgpu-" + id + ".vgpu.tencent.com"}}},
         {"spec",
          {{"selectors",
            json::array({{{"cel",
                           {{"expression",
                             std::string(R"(device.driver == "vgpu.tencent.com" && )"
                                         R"(device.attributes["vgpu.tencent.com"].type == ")") +
                                 type + "\""}}}}})},
           {"extendedResourceName", "tencent.com/vgpu-" + id}}}});
    if (!parsed.ok()) throw std::runtime_error(parsed.status().ToString());
    out.push_back(*parsed);
  }
  return out;
}

uint64_t Seed() {
  if (const char* env = std::getenv("KVGPU_BURST_SEED")) return std::strtoull(env, nullptr, 10);
  return std::random_device{}();
}

// What keeps one type (or size) per GPU in a run.
enum class Guard {
  kBindingConditions,    // the daemon confirms each allocation (KEP-5007; 1.36+)
  kCompatibilityGroups,  // the scheduler enforces the devices' groups (KEP-5963; 1.37+, alpha)
};

void RunBurst(Guard guard) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (KVGPU_BURST_SEED=" + std::to_string(seed) +
               " reproduces the pod order)");
  const bool groups = guard == Guard::kCompatibilityGroups;
  FakeApiServer api_server;
  ASSERT_TRUE(api_server.Start());
  api_server.ServeCompatibilityGroups(groups);
  std::vector<std::unique_ptr<Node>> nodes;
  const std::vector<std::pair<std::string, std::string>> layout = {
      {"t4x2", "node-strict-a"},
      {"t4x2-equal-size", "node-equal"},
      {"t4x2", "node-strict-b"},
      {"a100-sriov", "node-a100"}};
  for (const auto& [profile, name] : layout) {
    // Groups carry the rule a GPU reads as at allocation, and a free GPU whose mode nothing
    // tells reads as strict: on the equal-size node the operator says its driver's lock
    // (occupancyMode; docs/dra.md, "Occupancy: compatibility groups").
    const auto mode = groups && profile == "t4x2-equal-size"
                          ? deviceplugin::OccupancySetting::kEqualSize
                          : deviceplugin::OccupancySetting::kAuto;
    nodes.push_back(std::make_unique<Node>(profile, name, api_server, !groups, mode));
  }
  auto node_named = [&](const std::string& name) -> Node& {
    for (auto& n : nodes) {
      if (n->name == name) return *n;
    }
    throw std::runtime_error("no node " + name);
  };

  // The kernel, sampled all along: never two lock keys on a GPU.
  std::mutex mutex;
  std::vector<std::string> violations;
  std::vector<std::string> prepare_failures;
  std::set<std::string> prepared;  // pod uids
  std::atomic<long> prepare_ms{0};
  // When each node last unprepared a claim: a failure's message says how long before it.
  std::map<std::string, std::chrono::steady_clock::time_point> last_unprepare;
  std::string failed_node;  // of the first prepare failure
  auto check_kernel = [&] {
    for (auto& n : nodes) {
      for (const auto& [gpu, keys] : n->LockKeys()) {
        if (keys.size() > 1) {
          std::lock_guard<std::mutex> lock(mutex);
          if (violations.size() < 20) {
            violations.push_back(n->name + " " + gpu + ": " + Listed(keys));
          }
        }
      }
    }
  };
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling) {
      check_kernel();
      std::this_thread::sleep_for(5ms);
    }
  });

  auto api = kube::ApiClient::Create(api_server.ClientConfig());
  ASSERT_TRUE(api.ok());
  dra::HttpClaimApi claims(**api);
  dra::SchedulerOptions options;
  for (const auto& [profile, name] : layout) options.nodes.push_back(name);
  options.classes = ShippedClasses();
  options.seed = seed;
  options.binding_poll = 20ms;
  options.binding_timeout = 10s;
  options.retry = 50ms;
  options.informer_period = 200ms;
  options.compatibility_groups = groups;
  // kubelet on the pod's node: NodePrepareResources of the pod's claim.
  dra::SchedulerModel scheduler(options, claims, [&](const dra::BoundPod& bound) {
    const json& meta = bound.claim["metadata"];
    DraClaim claim{meta["namespace"], meta["uid"], meta["name"]};
    std::string rpc_error;
    const auto p0 = std::chrono::steady_clock::now();
    auto answers = node_named(bound.node).dra_kubelet.Prepare({claim}, &rpc_error);
    prepare_ms +=
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - p0)
            .count();
    check_kernel();
    std::lock_guard<std::mutex> lock(mutex);
    const std::string error = !rpc_error.empty() ? rpc_error : answers[claim.uid].error;
    if (!error.empty() || answers[claim.uid].devices.empty()) {
      std::string after = "no unprepare on the node before";
      if (auto it = last_unprepare.find(bound.node); it != last_unprepare.end()) {
        after = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - it->second)
                                   .count()) +
                " ms after the node's last unprepare";
      }
      std::string kernel;
      for (const auto& [gpu, keys] : node_named(bound.node).LockKeys()) {
        kernel += " " + gpu + ": " + Listed(keys);
      }
      prepare_failures.push_back(
          bound.pod.name + " on " + bound.node + ", " + after + " (" +
          bound.claim["status"]["allocation"]["devices"]["results"][0].value("device", "") +
          "): " + (error.empty() ? "no devices" : error) + "; the kernel holds" +
          (kernel.empty() ? " nothing" : kernel));
      if (failed_node.empty()) failed_node = bound.node;
    } else {
      prepared.insert(bound.pod.uid);
    }
  });
  // Nodes are up and have published: a complete pool each.
  ASSERT_TRUE(Eventually(
      [&] {
        auto slices = claims.ListSlices();
        if (!slices.ok()) return false;
        for (const auto& [profile, name] : layout) {
          auto pools = dra::GatherPools(*slices, name);
          if (!pools.ok() || pools->size() != 1 || !(*pools)[0].complete) return false;
        }
        return true;
      },
      20s))
      << "not every node published a complete pool";

  std::mt19937_64 rng(seed);
  const std::vector<std::string> types = {"222", "225", "230", "231", "692", "693"};
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - t0)
                              .count()) +
           " ms";
  };
  scheduler.Start();
  for (int i = 0; i < 200; ++i) {
    const std::string type = types[rng() % types.size()];
    scheduler.Submit({"burst",
                      "pod-" + std::to_string(i) + "-vgpu-" + type,
                      "pod-uid-" + std::to_string(i),
                      {{"tencent.com/vgpu-" + type, 1}}});
  }
  // Deletions while the burst runs: a prepared pod at random, 60 times.
  int deletions = 0;
  for (int attempt = 0; attempt < 3000 && deletions < 60; ++attempt) {
    std::this_thread::sleep_for(10ms);
    if (rng() % 4 != 0) continue;
    std::string victim;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (prepared.empty()) continue;
      auto it = prepared.begin();
      std::advance(it, static_cast<long>(rng() % prepared.size()));
      victim = *it;
      prepared.erase(it);
    }
    Status deleted = scheduler.DeletePod(victim, [&](const dra::BoundPod& bound) {
      const json& meta = bound.claim["metadata"];
      auto answers = node_named(bound.node)
                         .dra_kubelet.Unprepare({{meta["namespace"], meta["uid"], meta["name"]}});
      EXPECT_EQ(answers[meta["uid"]], "") << "unprepare of " << bound.pod.name;
      std::lock_guard<std::mutex> lock(mutex);
      last_unprepare[bound.node] = std::chrono::steady_clock::now();
    });
    EXPECT_TRUE(deleted.ok()) << deleted.ToString();
    ++deletions;
  }
  EXPECT_EQ(deletions, 60);
  std::cout << "deletions done at " << since() << ", " << scheduler.stats().bound
            << " bound, prepare total " << prepare_ms << " ms, cycles " << scheduler.stats().cycles
            << "\n";
  EXPECT_TRUE(scheduler.WaitSettled(60s))
      << "the scheduler did not settle: " << scheduler.stats().bindings_running
      << " bindings running, " << scheduler.stats().waiting_untried << " waiting pods untried";
  std::cout << "settled at " << since() << "\n";
  scheduler.Stop();
  sampling = false;
  sampler.join();
  check_kernel();

  const dra::SchedulerModel::Stats stats = scheduler.stats();
  std::cout << "seed " << seed << ": " << stats.bound << " bound, " << stats.deleted << " deleted, "
            << scheduler.Pending().size() << " waiting, " << stats.cycles << " cycles, "
            << stats.slice_changes << " slice changes, " << stats.binding_failures
            << " binding failures (conflicts), " << stats.binding_timeouts << " binding timeouts, "
            << prepare_failures.size() << " prepare failures\n";
  for (const std::string& f : prepare_failures)
    std::cout << "  prepare failure: " << f.substr(0, 400) << "\n";
  if (!failed_node.empty()) {
    // What the scheduler decided on that node and which slices it read: the allocation that put
    // the failed device beside another lock is in here.
    std::cout << "the scheduler's trace for " << failed_node << ":\n";
    for (const std::string& line : scheduler.Trace()) {
      if (line.find(failed_node) != std::string::npos) std::cout << "  " << line << "\n";
    }
  }
  EXPECT_TRUE(prepare_failures.empty())
      << prepare_failures.size()
      << " NodePrepareResources failures, first: " << prepare_failures.front();
  EXPECT_TRUE(violations.empty()) << "two lock keys on a GPU: " << violations.front();
  EXPECT_TRUE(stats.errors.empty())
      << stats.errors.size() << " scheduler errors, first: " << stats.errors.front();
  EXPECT_EQ(stats.binding_timeouts, 0);
  // Every waiting pod: its type creatable on no GPU of any node.
  for (const dra::PodSpec& pod : scheduler.Pending()) {
    const std::string type = "nvidia-" + pod.extended_resources.begin()->first.substr(
                                             std::string("tencent.com/vgpu-").size());
    for (auto& n : nodes) {
      EXPECT_TRUE(n->Creatable(type).empty())
          << pod.name << " waits, but " << type << " is creatable on " << n->name << " "
          << n->Creatable(type).front();
    }
  }
  EXPECT_EQ(stats.bound - stats.deleted, static_cast<int>(scheduler.Bound().size()));
  if (groups) {
    EXPECT_EQ(stats.binding_failures, 0) << "no binding conditions: nothing to fail a bind";
  }
}

// Each run draws a new pod order (the seed is printed; KVGPU_BURST_SEED replays it), so every CI
// run tries another: the failures it found (docs/dra.md, "Tests: the allocator model and the
// 200-pod burst") came one run in two before their causes were fixed.
TEST(DraBurstTest, TwoHundredPodsOfSixTypesWithDeletionsPrepareWithoutFailure) {
  RunBurst(Guard::kBindingConditions);
}

// The same burst with no binding conditions: the scheduler alone keeps each GPU to one type or
// size, from the compatibility groups the daemons publish once their probe finds them kept.
TEST(DraBurstTest, CompatibilityGroupsAloneKeepEachGpuToOneTypeOrSize) {
  RunBurst(Guard::kCompatibilityGroups);
}

}  // namespace
}  // namespace kvgpu::testing
