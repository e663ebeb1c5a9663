// Publishing the node's ResourceSlices through the real kube client to the fake API server: the
// pool appears owned by the Node, is rewritten at a higher generation when the node changes and
// not otherwise, loses the slices it no longer has, comes through API errors at any request, and
// no state the server ever held shows a reader a complete pool that is not one the node built.
#include "deviceplugin/dra/slice_publisher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>

#include "deviceplugin/dra/resource_slices.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/common/sim_node.h"

namespace kvgpu::deviceplugin::dra {
namespace {

using namespace std::chrono_literals;
using kvgpu::testing::FakeApiServer;
using kvgpu::testing::SimNode;
using nlohmann::json;

constexpr const char* kNode = "node-a";

// Forwards to the real client; the call numbered `fail_at` (0 = none) fails as a broken
// connection would.
class FlakyTransport : public kube::ApiTransport {
 public:
  explicit FlakyTransport(kube::ApiTransport& real) : real_(real) {}

  Result<json> Get(const std::string& path, Canceller* cancel) override {
    if (Fails()) return Broken();
    return real_.Get(path, cancel);
  }
  Result<json> Post(const std::string& path, const json& body, Canceller* cancel) override {
    if (Fails()) return Broken();
    return real_.Post(path, body, cancel);
  }
  Result<json> Patch(const std::string& path, const json& body, const std::string& type,
                     Canceller* cancel) override {
    if (Fails()) return Broken();
    return real_.Patch(path, body, type, cancel);
  }
  Result<json> Delete(const std::string& path, Canceller* cancel) override {
    if (Fails()) return Broken();
    return real_.Delete(path, cancel);
  }
  Status Stream(const std::string& path, std::chrono::milliseconds idle,
                const std::function<void()>& on_open,
                const std::function<bool(std::string_view)>& on_line, Canceller* cancel) override {
    return real_.Stream(path, idle, on_open, on_line, cancel);
  }

  std::atomic<int> fail_at{0};
  std::atomic<int> calls{0};

 private:
  bool Fails() { return ++calls == fail_at; }
  static Status Broken() { return Status::Error(ErrorCode::kTransport, "connection reset (test)"); }
  kube::ApiTransport& real_;
};

class SlicePublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    server_.SetNode({{"metadata", {{"name", kNode}, {"uid", "node-uid-1"}}}});
    auto client = kube::ApiClient::Create(server_.ClientConfig());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
    flaky_ = std::make_unique<FlakyTransport>(*client_);
  }

  // What the node offers now, at `generation`; every pool built is remembered.
  SlicePublisher::Source Source() {
    return [this](int64_t generation, bool groups) -> Result<std::vector<json>> {
      Result<mdev::Inventory> scanned = sim_.node().Scan();
      if (!scanned.ok()) return scanned.status();
      Result<mdev::Inventory> inventory = memory_.Remember(*scanned);
      SliceOptions options;
      options.node_name = kNode;
      options.compatibility_groups = groups;
      const GpuRules rules(*inventory, options.model.occupancy);
      auto slices = BuildResourceSlices(*inventory, rules, options, generation);
      if (slices.ok()) built_.push_back(DeviceNames(*slices));
      return slices;
    };
  }

  std::unique_ptr<SlicePublisher> Publisher(
      bool groups = true, std::chrono::milliseconds probe_interval = std::chrono::minutes(5)) {
    SlicePublisherOptions options;
    options.node_name = kNode;
    options.driver = kDefaultDriverName;
    options.min_interval = 10ms;
    options.retry_max = 50ms;
    options.compatibility_groups = groups;
    options.probe_interval = probe_interval;
    // The fake API server serves no watch of slices; the tests count and fail requests by
    // number, which a watch would shift. The watch is checked against the real kubelet and API
    // server (tests/k8s/scenario_kubelet_dra.py: its startup wipe of the node's slices).
    options.watch_deletions = false;
    return std::make_unique<SlicePublisher>(*flaky_, Source(), options);
  }

  // How many devices of the stored slices declare compatibility groups.
  int DevicesWithGroups() const {
    int n = 0;
    for (const json& s : Ours()) {
      for (const json& d : s["spec"].value("devices", json::array())) {
        for (const json& use : d.value("consumesCounters", json::array())) {
          n += use.contains("compatibilityGroups") ? 1 : 0;
        }
      }
    }
    return n;
  }

  static std::set<std::string> DeviceNames(const std::vector<json>& slices) {
    std::set<std::string> names;
    for (const json& s : slices) {
      for (const json& d : s["spec"].value("devices", json::array())) names.insert(d["name"]);
    }
    return names;
  }

  std::vector<json> Ours() const {
    std::vector<json> ours;
    for (const json& s : server_.resource_slices()) {
      if (s["spec"]["nodeName"] == kNode && s["spec"]["driver"] == kDefaultDriverName) {
        ours.push_back(s);
      }
    }
    return ours;
  }

  // What a reader (the scheduler) may take from one state of the server: the slices of the
  // highest generation, when there are as many as they say; nullopt when incomplete.
  static std::optional<std::vector<json>> CompletePool(const std::vector<json>& state) {
    int64_t highest = -1;
    for (const json& s : state) {
      if (s["spec"]["nodeName"] == kNode)
        highest = std::max<int64_t>(highest, s["spec"]["pool"]["generation"]);
    }
    std::vector<json> pool;
    for (const json& s : state) {
      if (s["spec"]["nodeName"] == kNode && s["spec"]["pool"]["generation"] == highest)
        pool.push_back(s);
    }
    if (pool.empty() || pool.front()["spec"]["pool"]["resourceSliceCount"] != pool.size()) {
      return std::nullopt;
    }
    return pool;
  }

  // Every complete pool a reader could ever have seen is valid and is one the node built.
  void ExpectNoMixedPoolEverVisible() {
    int complete = 0;
    for (const auto& state : server_.resource_slice_history()) {
      auto pool = CompletePool(state);
      if (!pool) continue;
      ++complete;
      for (json& s : *pool) s["metadata"].erase("ownerReferences");
      EXPECT_TRUE(ValidatePool(*pool).ok()) << ValidatePool(*pool).ToString();
      EXPECT_NE(std::find(built_.begin(), built_.end(), DeviceNames(*pool)), built_.end())
          << "a complete pool no build made";
    }
    EXPECT_GT(complete, 0);
  }

  FakeApiServer server_;
  SimNode sim_{"t4x2"};
  std::unique_ptr<kube::ApiClient> client_;
  std::unique_ptr<FlakyTransport> flaky_;
  std::vector<std::set<std::string>> built_;
  TypeMemory memory_;
};

TEST_F(SlicePublisherTest, PublishesThePoolOwnedByTheNodeAndThenWritesNothing) {
  auto publisher = Publisher();
  Result<bool> wrote = publisher->Reconcile();
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  const std::vector<json> slices = Ours();
  ASSERT_EQ(slices.size(), 5u);
  for (const json& s : slices) {
    EXPECT_EQ(s["spec"]["pool"]["generation"], 1);
    EXPECT_EQ(s["metadata"]["ownerReferences"][0]["uid"], "node-uid-1");
    EXPECT_EQ(s["metadata"]["ownerReferences"][0]["kind"], "Node");
  }
  const int writes = server_.resource_slice_writes();
  wrote = publisher->Reconcile();
  ASSERT_TRUE(wrote.ok());
  EXPECT_FALSE(*wrote);
  EXPECT_EQ(server_.resource_slice_writes(), writes) << "an unchanged node rewrites nothing";
  EXPECT_EQ(publisher->generation(), 1);
}

// kubelet deletes every ResourceSlice of its node when it starts (found against the real
// kubelet, tests/k8s/scenario_kubelet_dra.py): the pool must come back at once, not at the next
// resync minutes later, or no pod gets a device of the node meanwhile.
TEST_F(SlicePublisherTest, SlicesDeletedBySomeoneElseArePublishedAgainWithoutWaitingForTheResync) {
  SlicePublisherOptions options;
  options.node_name = kNode;
  options.driver = kDefaultDriverName;
  options.min_interval = 10ms;
  options.resync = std::chrono::hours(1);
  ASSERT_TRUE(options.watch_deletions) << "on unless a test turns it off";
  SlicePublisher publisher(*client_, Source(), options);
  publisher.Start();
  ASSERT_TRUE(server_.WaitFor([&] { return CompletePool(Ours()).has_value(); }));
  for (const json& slice : Ours()) server_.RemoveResourceSlice(slice["metadata"]["name"]);
  ASSERT_TRUE(Ours().empty());
  EXPECT_TRUE(server_.WaitFor([&] { return CompletePool(Ours()).has_value(); }))
      << "the pool is published again";
  const int64_t after_wipe = publisher.generation();
  // One slice gone this time, as a single delete would do.
  server_.RemoveResourceSlice(Ours().front()["metadata"]["name"]);
  EXPECT_TRUE(server_.WaitFor([&] {
    return CompletePool(Ours()).has_value() && publisher.generation() > after_wipe;
  })) << "a pool missing one slice is written whole at a further generation";
  publisher.Stop();
}

TEST_F(SlicePublisherTest, AChangeRewritesThePoolAtTheNextGenerationAndDropsWhatItNoLongerHas) {
  auto publisher = Publisher();
  ASSERT_TRUE(publisher->Reconcile().ok());
  ASSERT_EQ(Ours().size(), 5u);
  // A vGPU locks the first T4 (strict): its 80 devices narrow to 16, one slice instead of two.
  ASSERT_TRUE(sim_.node().Create({sim_.gpu(0), "nvidia-230", std::nullopt}).ok());
  Result<bool> wrote = publisher->Reconcile();
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  const std::vector<json> slices = Ours();
  ASSERT_EQ(slices.size(), 4u);
  for (const json& s : slices) {
    EXPECT_EQ(s["spec"]["pool"]["generation"], 2);
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 4);
  }
  EXPECT_EQ(DeviceNames(slices).size(), 16u + 80u);
  ExpectNoMixedPoolEverVisible();
}

TEST_F(SlicePublisherTest, SlicesLeftByAnEarlierDaemonAreReplacedAndOthersLeftAlone) {
  json stale = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", {{"name", "node-a-vgpu-tencent-com-gpu-gone-0"}}},
                {"spec",
                 {{"driver", kDefaultDriverName},
                  {"nodeName", kNode},
                  {"pool", {{"name", kNode}, {"generation", 7}, {"resourceSliceCount", 1}}},
                  {"devices", json::array({{{"name", "gone-0"}}})}}}};
  server_.PutResourceSlice(stale);
  json other_node = stale;
  other_node["metadata"]["name"] = "node-b-slice";
  other_node["spec"]["nodeName"] = "node-b";
  other_node["spec"]["pool"]["name"] = "node-b";
  server_.PutResourceSlice(other_node);
  json other_driver = stale;
  other_driver["metadata"]["name"] = "node-a-gpu-nvidia-com";
  other_driver["spec"]["driver"] = "gpu.nvidia.com";
  server_.PutResourceSlice(other_driver);

  auto publisher = Publisher();
  ASSERT_TRUE(publisher->Reconcile().ok());
  const std::vector<json> slices = Ours();
  ASSERT_EQ(slices.size(), 5u);
  for (const json& s : slices) EXPECT_EQ(s["spec"]["pool"]["generation"], 8) << "above the stale 7";
  std::set<std::string> names;
  for (const json& s : server_.resource_slices()) names.insert(s["metadata"]["name"]);
  EXPECT_FALSE(names.contains("node-a-vgpu-tencent-com-gpu-gone-0"));
  EXPECT_TRUE(names.contains("node-b-slice"));
  EXPECT_TRUE(names.contains("node-a-gpu-nvidia-com"));
}

// A failure at each request in turn, in the first publish and in the update after a change: the
// next pass always ends with the node's pool, and no complete pool was ever a mix.
TEST_F(SlicePublisherTest, RecoversFromAFailureAtAnyRequest) {
  auto publisher = Publisher();
  for (int at = 1; at <= 12; ++at) {
    flaky_->calls = 0;
    flaky_->fail_at = at;
    (void)publisher->Reconcile();
    flaky_->fail_at = 0;
    Result<bool> again = publisher->Reconcile();
    ASSERT_TRUE(again.ok()) << "failure at request " << at << ": " << again.status().ToString();
    auto pool = CompletePool(Ours());
    ASSERT_TRUE(pool.has_value()) << "failure at request " << at;
    EXPECT_EQ(pool->size(), Ours().size()) << "stale slices left after failure at " << at;
    // Alternate the node's offer so each round has something to write.
    Result<mdev::Inventory> inventory = sim_.node().Scan();
    ASSERT_TRUE(inventory.ok());
    if (inventory->vgpus.empty()) {
      ASSERT_TRUE(sim_.node().Create({sim_.gpu(0), "nvidia-230", std::nullopt}).ok());
    } else {
      ASSERT_TRUE(sim_.node().Remove(inventory->vgpus.front().id).ok());
    }
  }
  ExpectNoMixedPoolEverVisible();
}

// KEP-5963 driver duty: declare compatibility groups only where the API server keeps them. One
// that drops them (before 1.37, or the gate off: the fake's default) gets the pool without them
// and no endless rewrites of a field it never stores; the answer is not asked again before the
// probe interval.
TEST_F(SlicePublisherTest, AnApiServerThatDropsCompatibilityGroupsGetsThePoolWithoutThem) {
  auto publisher = Publisher();
  Result<bool> wrote = publisher->Reconcile();
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  EXPECT_EQ(server_.resource_slice_dry_runs(), 1);
  EXPECT_FALSE(publisher->compatibility_groups());
  EXPECT_EQ(DevicesWithGroups(), 0);
  EXPECT_TRUE(CompletePool(Ours()).has_value());
  const int writes = server_.resource_slice_writes();
  EXPECT_FALSE(*publisher->Reconcile()) << "nothing differs: nothing written";
  EXPECT_EQ(server_.resource_slice_writes(), writes);
  EXPECT_EQ(server_.resource_slice_dry_runs(), 1) << "the answer holds until the probe interval";
  for (const json& s : server_.resource_slices()) {
    EXPECT_EQ(s["metadata"]["name"].get<std::string>().find("compatibility-probe"),
              std::string::npos)
        << "a dry run stores nothing";
  }
}

// One that keeps them gets every device's group; when its gate is switched off (an API server
// restart) the next probe sees the field dropped and the pool is written again without it, once.
TEST_F(SlicePublisherTest, GroupsArePublishedWhereKeptAndWithdrawnWhenTheGateGoesOff) {
  server_.ServeCompatibilityGroups(true);
  auto publisher = Publisher(true, 0ms);
  ASSERT_TRUE(*publisher->Reconcile());
  EXPECT_TRUE(publisher->compatibility_groups());
  EXPECT_EQ(DevicesWithGroups(), static_cast<int>(DeviceNames(Ours()).size()))
      << "every device of two strict T4s";
  EXPECT_GT(DevicesWithGroups(), 0);
  EXPECT_FALSE(*publisher->Reconcile());

  server_.ServeCompatibilityGroups(false);
  ASSERT_TRUE(*publisher->Reconcile()) << "the stored groups are no longer what the server keeps";
  EXPECT_FALSE(publisher->compatibility_groups());
  EXPECT_EQ(DevicesWithGroups(), 0);
  EXPECT_FALSE(*publisher->Reconcile());
  ExpectNoMixedPoolEverVisible();
}

TEST_F(SlicePublisherTest, OffNeverProbesNorDeclaresGroups) {
  server_.ServeCompatibilityGroups(true);
  auto publisher = Publisher(false);
  ASSERT_TRUE(*publisher->Reconcile());
  EXPECT_EQ(server_.resource_slice_dry_runs(), 0);
  EXPECT_EQ(DevicesWithGroups(), 0);
}

TEST_F(SlicePublisherTest, TheApiServerAnsweringErrorsOnlyDelaysThePublish) {
  server_.FailRequests(500, 3);
  std::atomic<int> failures{0};
  std::atomic<int> writes{0};
  SlicePublisherOptions options;
  options.node_name = kNode;
  options.driver = kDefaultDriverName;
  options.min_interval = 10ms;
  options.retry_max = 40ms;
  SlicePublisher publisher(*client_, Source(), options, [&](bool ok, bool wrote) {
    failures += ok ? 0 : 1;
    writes += wrote ? 1 : 0;
  });
  publisher.Start();
  ASSERT_TRUE(server_.WaitFor([&] { return CompletePool(Ours()).has_value(); }));
  EXPECT_GE(failures.load(), 1);
  // A change reaches the server after a Trigger.
  ASSERT_TRUE(sim_.node().Create({sim_.gpu(1), "nvidia-234", std::nullopt}).ok());
  publisher.Trigger();
  ASSERT_TRUE(server_.WaitFor([&] {
    auto pool = CompletePool(Ours());
    return pool && DeviceNames(*pool).size() == 80u + 1u;
  }));
  publisher.Stop();
  ExpectNoMixedPoolEverVisible();
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
