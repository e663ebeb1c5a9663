// The occupancy confirmer's loop (deviceplugin/dra/occupancy_confirmer.h) against the fake API
// server through the real kube client, on a fixed view of a strict T4 node: it follows claims of
// every namespace and only of its pool; its writes carry the claim's resourceVersion, so a claim
// that moved between read and write is read again and decided again (a bounded number of times);
// a deleted claim releases what it held.
#include "deviceplugin/dra/occupancy_confirmer.h"

#include <gtest/gtest.h>

#include <atomic>

#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/common/sim_node.h"

namespace kvgpu::deviceplugin::dra {
namespace {

using namespace std::chrono_literals;
using kvgpu::testing::FakeApiServer;
using kvgpu::testing::SimNode;
using nlohmann::json;

constexpr const char* kDriver = "vgpu.tencent.com";
constexpr const char* kPool = "node-a";
const std::string kT4 = "0000:3b:00.0";

json Allocated(const std::string& ns, const std::string& name, const std::string& uid,
               const std::string& device, const std::string& timestamp,
               const std::string& pool = kPool) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"namespace", ns}, {"name", name}, {"uid", uid}}},
          {"spec", json::object()},
          {"status",
           {{"allocation",
             {{"allocationTimestamp", timestamp},
              {"devices",
               {{"results", json::array({{{"request", "gpu"},
                                          {"driver", kDriver},
                                          {"pool", pool},
                                          {"device", device},
                                          {"bindingConditions", json::array({kOccupancyConfirmed})},
                                          {"bindingFailureConditions",
                                           json::array({kOccupancyConflict})}}})}}}}}}}};
}

std::string Verdict(const json& claim) {
  if (claim.is_null() || !claim.contains("status") || !claim["status"].contains("devices")) {
    return "";
  }
  for (const json& entry : claim["status"]["devices"]) {
    for (const json& condition : entry.value("conditions", json::array())) {
      if (condition.value("status", "") == "True") return condition.value("type", "");
    }
  }
  return "";
}

// The real client, with a hook run before each status patch (someone else writing meanwhile).
class HookedTransport : public kube::ApiTransport {
 public:
  explicit HookedTransport(kube::ApiTransport& real) : real_(real) {}
  Result<json> Get(const std::string& path, Canceller* cancel) override {
    return real_.Get(path, cancel);
  }
  Result<json> Post(const std::string& path, const json& body, Canceller* cancel) override {
    return real_.Post(path, body, cancel);
  }
  Result<json> Patch(const std::string& path, const json& body, const std::string& type,
                     Canceller* cancel) override {
    ++patches;
    if (before_patch) before_patch();
    return real_.Patch(path, body, type, cancel);
  }
  Status Stream(const std::string& path, std::chrono::milliseconds idle,
                const std::function<void()>& on_open,
                const std::function<bool(std::string_view)>& on_line, Canceller* cancel) override {
    return real_.Stream(path, idle, on_open, on_line, cancel);
  }
  std::function<void()> before_patch;
  std::atomic<int> patches{0};

 private:
  kube::ApiTransport& real_;
};

class OccupancyConfirmerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    auto client = kube::ApiClient::Create(server_.ClientConfig());
    ASSERT_TRUE(client.ok());
    client_ = std::move(client.value());
    transport_ = std::make_unique<HookedTransport>(*client_);
    auto inventory = node_.node().Scan();
    ASSERT_TRUE(inventory.ok());
    view_.inventory = *inventory;
    view_.rules = GpuRules(view_.inventory, OccupancySetting::kStrict);
    SliceOptions options;
    options.node_name = kPool;
    options.model.occupancy = OccupancySetting::kStrict;
    auto catalogue = BuildCatalogue(view_.inventory, view_.rules, options);
    ASSERT_TRUE(catalogue.ok());
    view_.devices = DeviceSpots(catalogue->devices);
  }

  std::unique_ptr<OccupancyConfirmer> Make(std::function<void()> on_held = nullptr) {
    OccupancyConfirmerOptions options;
    options.driver = kDriver;
    options.pool = kPool;
    options.resync = 200ms;
    options.watch.initial_backoff = 20ms;
    return std::make_unique<OccupancyConfirmer>(
        *transport_, [this]() -> Result<OccupancyView> { return view_; }, std::move(options),
        std::move(on_held));
  }

  SimNode node_{"t4x2"};
  OccupancyView view_;
  FakeApiServer server_;
  std::unique_ptr<kube::ApiClient> client_;
  std::unique_ptr<HookedTransport> transport_;
};

TEST_F(OccupancyConfirmerTest, ClaimsOfEveryNamespaceAreDecidedOnlyForThisPool) {
  const std::string a = DraDeviceName(kT4, "nvidia-222", 0);
  const std::string b = DraDeviceName(kT4, "nvidia-230", 0);
  server_.SetResourceClaim(Allocated("team-1", "a", "uid-a", a, "2026-01-01T00:00:01Z"));
  server_.SetResourceClaim(Allocated("team-2", "b", "uid-b", b, "2026-01-01T00:00:02Z"));
  server_.SetResourceClaim(
      Allocated("team-2", "elsewhere", "uid-x", b, "2026-01-01T00:00:00Z", "node-b"));
  std::atomic<int> held_changes{0};
  auto confirmer = Make([&] { ++held_changes; });
  confirmer->Start();
  EXPECT_TRUE(server_.WaitFor([&] {
    return Verdict(server_.resource_claim("team-1", "a")) == kOccupancyConfirmed &&
           Verdict(server_.resource_claim("team-2", "b")) == kOccupancyConflict;
  }));
  EXPECT_EQ(Verdict(server_.resource_claim("team-2", "elsewhere")), "") << "another node's pool";
  EXPECT_EQ(confirmer->Held(), std::vector<std::string>{a});
  EXPECT_GE(held_changes.load(), 1);

  // Deleted: the GPU is released, and a claim of the other type allocated now is confirmed.
  server_.DeleteResourceClaim("team-1", "a");
  EXPECT_TRUE(server_.WaitFor([&] { return confirmer->Held().empty(); }));
  server_.SetResourceClaim(Allocated("team-1", "c", "uid-c", DraDeviceName(kT4, "nvidia-230", 1),
                                     "2026-01-01T00:00:03Z"));
  EXPECT_TRUE(server_.WaitFor(
      [&] { return Verdict(server_.resource_claim("team-1", "c")) == kOccupancyConfirmed; }));
  confirmer->Stop();
}

TEST_F(OccupancyConfirmerTest, AClaimThatMovedIsReadAgainAndDecidedAgain) {
  const std::string a = DraDeviceName(kT4, "nvidia-222", 0);
  server_.SetResourceClaim(Allocated("ns", "a", "uid-a", a, "2026-01-01T00:00:01Z"));
  auto confirmer = Make();
  auto listed = client_->Get(OccupancyConfirmer::kCollection);
  ASSERT_TRUE(listed.ok());
  confirmer->OnSynced({listed.value()["items"].begin(), listed.value()["items"].end()});
  // Between the read and the write, the scheduler adds the pod's reservation.
  bool once = true;
  transport_->before_patch = [&] {
    if (!once) return;
    once = false;
    json moved = server_.resource_claim("ns", "a");
    moved["status"]["reservedFor"] =
        json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "pod-uid"}}});
    server_.SetResourceClaim(moved);
  };
  Result<int> written = confirmer->Pass();
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, 1);
  EXPECT_EQ(transport_->patches.load(), 2) << "the first write met the precondition's 409";
  const json claim = server_.resource_claim("ns", "a");
  EXPECT_EQ(Verdict(claim), kOccupancyConfirmed);
  EXPECT_EQ(claim["status"]["reservedFor"].size(), 1u) << "the scheduler's write is kept";
}

TEST_F(OccupancyConfirmerTest, AClaimThatKeepsMovingIsLeftForTheNextPass) {
  server_.SetResourceClaim(
      Allocated("ns", "a", "uid-a", DraDeviceName(kT4, "nvidia-222", 0), "2026-01-01T00:00:01Z"));
  auto confirmer = Make();
  auto listed = client_->Get(OccupancyConfirmer::kCollection);
  ASSERT_TRUE(listed.ok());
  confirmer->OnSynced({listed.value()["items"].begin(), listed.value()["items"].end()});
  int n = 0;
  transport_->before_patch = [&] {
    json moved = server_.resource_claim("ns", "a");
    moved["metadata"]["labels"] = {{"n", std::to_string(++n)}};
    server_.SetResourceClaim(moved);
  };
  Result<int> written = confirmer->Pass();
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, 0);
  EXPECT_EQ(transport_->patches.load(), 3) << "OccupancyConfirmerOptions::attempts";
  EXPECT_EQ(Verdict(server_.resource_claim("ns", "a")), "");
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
