// The fake API server's ResourceClaims as the real one behaves (fake_apiserver.h), through the
// project's real kube client: create drops the status; list and watch across namespaces (the
// list-watch of kube/list_watch.h sees ADDED, MODIFIED, DELETED); the status subresource takes
// merge and strategic merge patches and UpdateStatus (PUT) with resourceVersion preconditions
// (409), validates device status entries (422), and drops a deallocated device's entry.
#include <gtest/gtest.h>
#include <httplib.h>

#include <mutex>

#include "fakes/apiserver/fake_apiserver.h"
#include "kube/api_client.h"
#include "kube/list_watch.h"

namespace kvgpu::testing {
namespace {

using nlohmann::json;

constexpr const char* kGroup = "/apis/resource.k8s.io/v1";

json Claim(const std::string& ns, const std::string& name) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec",
           {{"devices",
             {{"requests",
               json::array({{{"name", "gpu"},
                             {"exactly", {{"deviceClassName", "vgpu.tencent.com"}}}}})}}}}}};
}

json Allocation(const std::string& device) {
  return {
      {"devices",
       {{"results", json::array({{{"request", "gpu"},
                                  {"driver", "vgpu.tencent.com"},
                                  {"pool", "node-a"},
                                  {"device", device},
                                  {"bindingConditions", json::array({"OccupancyConfirmed"})}}})}}},
      {"allocationTimestamp", "2026-01-01T00:00:00Z"}};
}

json Condition(const std::string& type, const std::string& status) {
  return {{"type", type},
          {"status", status},
          {"reason", "Test"},
          {"message", ""},
          {"lastTransitionTime", "2026-01-01T00:00:01Z"}};
}

json DeviceStatus(const std::string& device, json conditions) {
  return {{"driver", "vgpu.tencent.com"},
          {"pool", "node-a"},
          {"device", device},
          {"conditions", std::move(conditions)}};
}

std::string StatusPath(const std::string& ns, const std::string& name) {
  return std::string(kGroup) + "/namespaces/" + ns + "/resourceclaims/" + name + "/status";
}

// The HTTP status of a failed request; 0 for success.
int Code(const Status& status) {
  return status.ok() ? 0 : status.http_status();
}

class FakeClaimsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    auto client = kube::ApiClient::Create(server_.ClientConfig());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client.value());
  }

  // UpdateStatus as client-go sends it: PUT of the whole object.
  int PutStatus(const json& claim) {
    httplib::SSLClient http("127.0.0.1", server_.port());
    http.enable_server_certificate_verification(false);
    http.set_bearer_token_auth(FakeApiServer::kToken);
    const auto& meta = claim["metadata"];
    auto answer =
        http.Put(StatusPath(meta["namespace"], meta["name"]), claim.dump(), "application/json");
    return answer ? answer->status : -1;
  }

  json Create(const std::string& ns, json claim) {
    auto created =
        client_->Post(std::string(kGroup) + "/namespaces/" + ns + "/resourceclaims", claim);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created.value() : json();
  }

  // The scheduler's allocation: status written with allocation and timestamp.
  json Allocate(const json& claim, const std::string& device) {
    json allocated = claim;
    allocated["status"]["allocation"] = Allocation(device);
    EXPECT_EQ(PutStatus(allocated), 200);
    return server_.resource_claim(claim["metadata"]["namespace"], claim["metadata"]["name"]);
  }

  FakeApiServer server_;
  std::unique_ptr<kube::ApiClient> client_;
};

TEST_F(FakeClaimsTest, CreateDropsStatusAndListSpansNamespaces) {
  json claim = Claim("a", "c1");
  claim["status"] = {{"allocation", Allocation("dev-1")}};
  const json created = Create("a", claim);
  EXPECT_FALSE(created.contains("status"));
  EXPECT_FALSE(created["metadata"].value("uid", "").empty());
  Create("b", Claim("b", "c2"));
  auto again =
      client_->Post(std::string(kGroup) + "/namespaces/a/resourceclaims", Claim("a", "c1"));
  EXPECT_EQ(Code(again.status()), 409);

  auto all = client_->Get(std::string(kGroup) + "/resourceclaims");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all.value()["items"].size(), 2u);
  auto in_b = client_->Get(std::string(kGroup) + "/namespaces/b/resourceclaims");
  ASSERT_TRUE(in_b.ok());
  ASSERT_EQ(in_b.value()["items"].size(), 1u);
  EXPECT_EQ(in_b.value()["items"][0]["metadata"]["name"], "c2");
}

TEST_F(FakeClaimsTest, WatchAcrossNamespacesSeesEveryChange) {
  kube::ListWatcher watcher(*client_, {.path = std::string(kGroup) + "/resourceclaims",
                                       .what = "claims",
                                       .initial_backoff = std::chrono::milliseconds(20)});
  std::mutex mutex;
  std::vector<std::string> seen;
  bool synced = false;
  watcher.Start({.on_synced =
                     [&](const std::vector<json>&) {
                       std::lock_guard lock(mutex);
                       synced = true;
                     },
                 .on_event =
                     [&](kube::WatchEventType type, const json& object) {
                       std::lock_guard lock(mutex);
                       seen.push_back(std::string(kube::WatchEventTypeName(type)) + " " +
                                      object["metadata"]["namespace"].get<std::string>() + "/" +
                                      object["metadata"]["name"].get<std::string>());
                     },
                 .on_connection = {}});
  ASSERT_TRUE(server_.WaitFor([&] {
    std::lock_guard lock(mutex);
    return synced && server_.open_watches() == 1;
  }));
  const json c1 = Create("a", Claim("a", "c1"));
  Create("b", Claim("b", "c2"));
  Allocate(c1, "dev-1");
  server_.DeleteResourceClaim("b", "c2");
  const std::vector<std::string> want = {"ADDED a/c1", "ADDED b/c2", "MODIFIED a/c1",
                                         "DELETED b/c2"};
  EXPECT_TRUE(server_.WaitFor([&] {
    std::lock_guard lock(mutex);
    return seen == want;
  }));
  watcher.Stop();
  std::lock_guard lock(mutex);
  EXPECT_EQ(seen, want);
}

// Watch parameters are parsed as the real server parses ListOptions: a malformed number is a 400
// answer (not a dropped connection), for claims as for pods, and the fake keeps serving.
TEST_F(FakeClaimsTest, AMalformedWatchParameterIsA400ForClaimsAndPods) {
  for (const std::string& collection :
       {std::string(kGroup) + "/resourceclaims", std::string("/api/v1/pods")}) {
    for (const char* query : {"watch=true&timeoutSeconds=soon", "watch=true&resourceVersion=12x"}) {
      SCOPED_TRACE(collection + "?" + query);
      auto answer = client_->Get(collection + "?" + query);
      EXPECT_EQ(Code(answer.status()), 400) << answer.status().ToString();
    }
  }
  auto list = client_->Get(std::string(kGroup) + "/resourceclaims");
  EXPECT_TRUE(list.ok()) << list.status().ToString();
}

TEST_F(FakeClaimsTest, StatusWritesHonourResourceVersion) {
  const json claim = Allocate(Create("a", Claim("a", "c1")), "dev-1");
  const std::string version = claim["metadata"]["resourceVersion"];
  const json patch = {
      {"metadata", {{"resourceVersion", version}}},
      {"status",
       {{"devices",
         json::array({DeviceStatus("dev-1", {Condition("OccupancyConfirmed", "True")})})}}}};
  auto first = client_->Patch(StatusPath("a", "c1"), patch, "application/merge-patch+json");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first.value()["status"]["devices"][0]["conditions"][0]["status"], "True");
  EXPECT_NE(first.value()["metadata"]["resourceVersion"], version);
  // The same patch again carries a version that is no longer current.
  auto stale = client_->Patch(StatusPath("a", "c1"), patch, "application/merge-patch+json");
  EXPECT_EQ(Code(stale.status()), 409);
  json put = server_.resource_claim("a", "c1");
  put["metadata"]["resourceVersion"] = version;
  EXPECT_EQ(PutStatus(put), 409);
  // A patch of the status leaves the spec alone.
  json spec_change = {{"spec", {{"devices", json::object()}}},
                      {"status", {{"reservedFor", json::array()}}}};
  auto ignored = client_->Patch(StatusPath("a", "c1"), spec_change, "application/merge-patch+json");
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ(ignored.value()["spec"], claim["spec"]);
}

TEST_F(FakeClaimsTest, DeviceStatusMustNameAnAllocatedDevice) {
  Allocate(Create("a", Claim("a", "c1")), "dev-1");
  const auto write = [&](json devices) {
    return Code(client_
                    ->Patch(StatusPath("a", "c1"), {{"status", {{"devices", std::move(devices)}}}},
                            "application/merge-patch+json")
                    .status());
  };
  EXPECT_EQ(write(json::array({DeviceStatus("dev-2", json::array())})), 422);
  EXPECT_EQ(write(json::array(
                {DeviceStatus("dev-1", json::array()), DeviceStatus("dev-1", json::array())})),
            422);
  json bad = Condition("OccupancyConfirmed", "Yes");
  EXPECT_EQ(write(json::array({DeviceStatus("dev-1", {bad})})), 422);
  json no_reason = Condition("OccupancyConfirmed", "True");
  no_reason["reason"] = "";
  EXPECT_EQ(write(json::array({DeviceStatus("dev-1", {no_reason})})), 422);
  json nine = json::array();
  for (int i = 0; i < 9; ++i) nine.push_back(Condition("C" + std::to_string(i), "True"));
  EXPECT_EQ(write(json::array({DeviceStatus("dev-1", nine)})), 422);
  EXPECT_FALSE(server_.resource_claim("a", "c1")["status"].contains("devices"));
  EXPECT_EQ(write(json::array({DeviceStatus("dev-1", {Condition("OccupancyConfirmed", "True")})})),
            0);
  // The allocation is set once: changing it is refused, clearing it is not.
  json moved = server_.resource_claim("a", "c1");
  moved["status"]["allocation"] = Allocation("dev-3");
  EXPECT_EQ(PutStatus(moved), 422);
}

TEST_F(FakeClaimsTest, StrategicMergeKeepsOtherEntriesAndDeallocationDropsStatus) {
  Allocate(Create("a", Claim("a", "c1")), "dev-1");
  json other = server_.resource_claim("a", "c1");
  auto& results = other["status"]["allocation"]["devices"]["results"];
  // A second driver's device in the same claim (set as someone else would).
  results.push_back(
      {{"request", "nic"}, {"driver", "net.example.com"}, {"pool", "p"}, {"device", "eth1"}});
  other["status"]["devices"] =
      json::array({{{"driver", "net.example.com"},
                    {"pool", "p"},
                    {"device", "eth1"},
                    {"conditions", json::array({Condition("Ready", "True")})}}});
  server_.SetResourceClaim(other);
  auto merged = client_->Patch(
      StatusPath("a", "c1"),
      {{"status",
        {{"devices",
          json::array({DeviceStatus("dev-1", {Condition("OccupancyConfirmed", "True")})})}}}},
      "application/strategic-merge-patch+json");
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ(merged.value()["status"]["devices"].size(), 2u);
  // A condition merged by type into the existing entry.
  auto second = client_->Patch(
      StatusPath("a", "c1"),
      {{"status",
        {{"devices",
          json::array({DeviceStatus("dev-1", {Condition("OccupancyConflict", "False")})})}}}},
      "application/strategic-merge-patch+json");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second.value()["status"]["devices"][1]["conditions"].size(), 2u);

  // The scheduler's PostFilter: allocation, reservedFor and devices cleared by UpdateStatus.
  json cleared = server_.resource_claim("a", "c1");
  cleared["status"] = json::object();
  EXPECT_EQ(PutStatus(cleared), 200);
  EXPECT_FALSE(server_.resource_claim("a", "c1").contains("status"));
}

TEST_F(FakeClaimsTest, DeallocationDropsOnlyTheDeallocatedDevicesStatus) {
  const json claim = Allocate(Create("a", Claim("a", "c1")), "dev-1");
  auto confirmed = client_->Patch(
      StatusPath("a", "c1"),
      {{"status",
        {{"devices",
          json::array({DeviceStatus("dev-1", {Condition("OccupancyConfirmed", "True")})})}}}},
      "application/merge-patch+json");
  ASSERT_TRUE(confirmed.ok());
  // A client unaware of status.devices clears only the allocation: the server drops the entry.
  auto deallocated = client_->Patch(StatusPath("a", "c1"), {{"status", {{"allocation", nullptr}}}},
                                    "application/merge-patch+json");
  ASSERT_TRUE(deallocated.ok()) << deallocated.status().ToString();
  EXPECT_FALSE(server_.resource_claim("a", "c1").contains("status"));
}

TEST_F(FakeClaimsTest, DeleteWaitsForFinalizers) {
  json claim = Create("a", Claim("a", "c1"));
  claim["metadata"]["finalizers"] = json::array({"resource.kubernetes.io/delete-protection"});
  server_.SetResourceClaim(claim);
  auto deleting = client_->Delete(std::string(kGroup) + "/namespaces/a/resourceclaims/c1");
  ASSERT_TRUE(deleting.ok());
  const json marked = server_.resource_claim("a", "c1");
  ASSERT_FALSE(marked.is_null());
  EXPECT_TRUE(marked["metadata"].contains("deletionTimestamp"));
  server_.DeleteResourceClaim("a", "c1");
  EXPECT_TRUE(server_.resource_claim("a", "c1").is_null());
  EXPECT_EQ(Code(client_->Get(std::string(kGroup) + "/namespaces/a/resourceclaims/c1").status()),
            404);
}

}  // namespace
}  // namespace kvgpu::testing
