// The claim lookups (webhook/claim_lookup.h): what a pod gets when its claims are read through
// the API server: the fake one over HTTPS with a token (fakes/apiserver), and a scripted
// transport for the cache's bounds and the deadline. Each failure must reach the configured
// policy within the bound, never hang the admission.
#include "webhook/claim_lookup.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <thread>

#include "fakes/apiserver/fake_apiserver.h"
#include "tests/webhook/pod_cases.h"
#include "webhook/admission.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// resource/v1 ResourceClaimTemplate (kubernetes/api v0.34.0 resource/v1/types.go).
json Template(const std::string& name, const std::string& device_class) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaimTemplate"},
          {"metadata", {{"name", name}, {"namespace", "ml"}}},
          {"spec",
           {{"spec",
             {{"devices",
               {{"requests",
                 {{{"name", "vgpu"}, {"exactly", {{"deviceClassName", device_class}}}}}}}}}}}}};
}
json Claim(const std::string& name, const std::string& device_class) {
  json claim = Template(name, device_class);
  claim["kind"] = "ResourceClaim";
  claim["spec"] = claim["spec"]["spec"];
  return claim;
}

// The fixture review under Kata in namespace ml, its first container using claim "gpu".
json Review(const char* source, const std::string& object) {
  json review = testing::FixtureReview();
  review["request"]["namespace"] = "ml";
  json& pod = review["request"]["object"];
  pod["metadata"]["namespace"] = "ml";
  pod["spec"]["runtimeClassName"] = "kata";
  pod["spec"]["resourceClaims"] = {{{"name", "gpu"}, {source, object}}};
  pod["spec"]["containers"][0]["resources"]["claims"] = {{{"name", "gpu"}}};
  return review;
}

std::shared_ptr<const Config> ConfigOf(const std::string& yaml) {
  auto config = ParseConfig(yaml);
  EXPECT_TRUE(config.ok()) << config.status().message();
  return config.ok() ? config.value() : DefaultConfig();
}

class ClaimLookupApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    kube::ClientOptions options;
    // As server.cpp sets them: the deadline, not the client's timeouts, must bound a lookup.
    options.connect_timeout = std::chrono::seconds(5);
    options.request_timeout = std::chrono::seconds(60);
    options.max_response_bytes = kMaxClaimObjectBytes;
    auto client = kube::ApiClient::Create(server_.ClientConfig(), options);
    ASSERT_TRUE(client.ok()) << client.status().message();
    client_ = std::move(*client);
    lookup_ = std::make_unique<ClaimLookup>(*client_);
  }

  ReviewReply Admit(const json& review, const Config& config) {
    ClaimResolver resolve = [&](std::string_view ns, const std::vector<PodClaimSource>& sources) {
      return lookup_->Resolve(ns, sources, config.claims);
    };
    return HandleReview(review.dump(), "application/json", config, resolve);
  }

  kvgpu::testing::FakeApiServer server_;
  std::unique_ptr<kube::ApiClient> client_;
  std::unique_ptr<ClaimLookup> lookup_;
};

TEST_F(ClaimLookupApiTest, ATemplateOfOurClassIsInjectedAndTheSecondPodIsServedFromTheCache) {
  server_.SetResourceClaimTemplate(Template("vgpu-230", "vgpu-230.vgpu.tencent.com"));
  const Config& config = *DefaultConfig();
  ReviewReply first = Admit(Review("resourceClaimTemplateName", "vgpu-230"), config);
  EXPECT_EQ(first.outcome, ReviewOutcome::kMutated) << first.body;
  EXPECT_EQ(server_.resource_claim_template_gets(), 1);
  ReviewReply second = Admit(Review("resourceClaimTemplateName", "vgpu-230"), config);
  EXPECT_EQ(second.outcome, ReviewOutcome::kMutated);
  EXPECT_EQ(second.body, first.body);
  EXPECT_EQ(server_.resource_claim_template_gets(), 1) << "the cache should have answered";
  EXPECT_EQ(lookup_->stats().hits, 1u);
}

TEST_F(ClaimLookupApiTest, AnotherDriversTemplateLeavesThePodUntouched) {
  server_.SetResourceClaimTemplate(Template("a100", "gpu.nvidia.com"));
  ReviewReply reply = Admit(Review("resourceClaimTemplateName", "a100"), *DefaultConfig());
  EXPECT_EQ(reply.outcome, ReviewOutcome::kAllowed) << reply.body;
  EXPECT_EQ(reply.pod_outcome, PodOutcome::kNoVgpu);
  EXPECT_EQ(server_.resource_claim_template_gets(), 1);
}

TEST_F(ClaimLookupApiTest, AClaimByNameIsLookedUpAsAResourceClaim) {
  server_.SetResourceClaim(Claim("team-vgpu", "vgpu.tencent.com"));
  ReviewReply reply = Admit(Review("resourceClaimName", "team-vgpu"), *DefaultConfig());
  EXPECT_EQ(reply.outcome, ReviewOutcome::kMutated) << reply.body;
  EXPECT_EQ(server_.resource_claim_gets(), 1);
  EXPECT_EQ(server_.resource_claim_template_gets(), 0);
}

// Each failure: denied (default) with the reason, or allowed untouched with a warning; within
// the lookup timeout; never cached.
struct Failure {
  const char* what;
  std::function<void(kvgpu::testing::FakeApiServer&)> arrange;
  const char* reason;  // in the denial
};

TEST_F(ClaimLookupApiTest, EveryFailureMeetsThePolicyWithinTheBound) {
  const std::string huge_annotation(kMaxClaimObjectBytes + 1, 'x');
  const std::vector<Failure> failures = {
      {"no such template", [](kvgpu::testing::FakeApiServer&) {}, "not found"},
      {"not JSON",
       [](kvgpu::testing::FakeApiServer& s) {
         s.SetResourceClaimTemplateBody("ml", "vgpu-230", "<html>proxy error</html>");
       },
       "not JSON"},
      {"JSON but no claim template",
       [](kvgpu::testing::FakeApiServer& s) {
         s.SetResourceClaimTemplateBody("ml", "vgpu-230", R"({"kind":"Status","items":[1,2]})");
       },
       "ResourceClaimTemplate has no spec.spec"},
      {"a body past the bound",
       [&](kvgpu::testing::FakeApiServer& s) {
         json big = Template("vgpu-230", "vgpu.tencent.com");
         big["metadata"]["annotations"]["x"] = huge_annotation;
         s.SetResourceClaimTemplate(big);
       },
       "larger than 262144 bytes"},
      {"a 500",
       [](kvgpu::testing::FakeApiServer& s) {
         s.SetResourceClaimTemplate(Template("vgpu-230", "vgpu.tencent.com"));
         s.FailRequests(500, 2);
       },
       "HTTP 500"},
      {"an answer slower than the lookup timeout",
       [](kvgpu::testing::FakeApiServer& s) {
         s.SetResourceClaimTemplate(Template("vgpu-230", "vgpu.tencent.com"));
         s.SetResponseDelay(milliseconds(3000));
       },
       "no answer within resourceClaims.lookupTimeout 300ms"},
  };
  for (const Failure& failure : failures) {
    SCOPED_TRACE(failure.what);
    kvgpu::testing::FakeApiServer server;
    ASSERT_TRUE(server.Start());
    failure.arrange(server);
    kube::ClientOptions options;
    options.request_timeout = std::chrono::seconds(5);
    options.max_response_bytes = kMaxClaimObjectBytes;
    auto client = kube::ApiClient::Create(server.ClientConfig(), options);
    ASSERT_TRUE(client.ok());
    ClaimLookup lookup(**client);
    for (const char* policy : {"deny", "allow"}) {
      SCOPED_TRACE(policy);
      auto config = ConfigOf(
          std::string("resourceClaims: {lookupTimeout: 300ms, onLookupFailure: ") + policy + "}");
      ClaimResolver resolve = [&](std::string_view ns, const std::vector<PodClaimSource>& s) {
        return lookup.Resolve(ns, s, config->claims);
      };
      const auto start = Clock::now();
      ReviewReply reply = HandleReview(Review("resourceClaimTemplateName", "vgpu-230").dump(),
                                       "application/json", *config, resolve);
      const auto took = Clock::now() - start;
      // 300 ms asked, the client's own timeout 60 s: far from both, with room for a busy machine.
      EXPECT_LT(took, milliseconds(10'000)) << "the lookup must end at its deadline";
      ASSERT_EQ(reply.http_status, 200);
      EXPECT_NE(reply.body.find(failure.reason), std::string::npos) << reply.body;
      if (std::string(policy) == "deny") {
        EXPECT_EQ(reply.outcome, ReviewOutcome::kDenied);
      } else {
        EXPECT_EQ(reply.outcome, ReviewOutcome::kAllowed);
        EXPECT_NE(reply.body.find("\"warnings\""), std::string::npos);
      }
    }
    EXPECT_EQ(lookup.stats().entries, 0u) << "a failure is never cached";
    EXPECT_EQ(lookup.stats().failures, 2u);
    server.SetResponseDelay(milliseconds(0));
  }
}

// A transport answering from a function, for the cache and the deadline without sockets.
class ScriptedApi : public kube::ApiTransport {
 public:
  std::function<Result<json>(const std::string&, Canceller*)> get;
  std::atomic<int> gets{0};
  Result<json> Get(const std::string& path, Canceller* cancel) override {
    ++gets;
    return get(path, cancel);
  }
  Result<json> Post(const std::string&, const json&, Canceller*) override { return json(); }
  Result<json> Patch(const std::string&, const json&, const std::string&, Canceller*) override {
    return json();
  }
  Status Stream(const std::string&, milliseconds, const std::function<void()>&,
                const std::function<bool(std::string_view)>&, Canceller*) override {
    return Status();
  }
};

std::vector<PodClaimSource> Sources(std::initializer_list<const char*> templates) {
  std::vector<PodClaimSource> out;
  for (const char* name : templates) out.push_back({std::string("c-") + name, true, name});
  return out;
}

TEST(ClaimLookup, TheCacheKeepsItsEntryAndByteBoundsAndItsTtl) {
  ScriptedApi api;
  api.get = [](const std::string& path, Canceller*) -> Result<json> {
    return Template(path.substr(path.rfind('/') + 1), "vgpu.tencent.com");
  };
  Clock::time_point now = Clock::now();
  ClaimLookup lookup(api, [&] { return now; });
  ClaimSettings settings = DefaultConfig()->claims;
  settings.cache_entries = 2;
  settings.cache_ttl = milliseconds(30000);

  lookup.Resolve("ml", Sources({"a", "b"}), settings);
  EXPECT_EQ(api.gets, 2);
  lookup.Resolve("ml", Sources({"a"}), settings);  // a is now the most recent
  EXPECT_EQ(api.gets, 2);
  lookup.Resolve("ml", Sources({"c"}), settings);  // evicts b, the least recent
  EXPECT_EQ(lookup.stats().entries, 2u);
  lookup.Resolve("ml", Sources({"a", "c"}), settings);
  EXPECT_EQ(api.gets, 3);
  lookup.Resolve("ml", Sources({"b"}), settings);
  EXPECT_EQ(api.gets, 4);

  now += milliseconds(30001);  // past the TTL: looked up again
  PodClaims claims = lookup.Resolve("ml", Sources({"b"}), settings);
  EXPECT_EQ(api.gets, 5);
  EXPECT_EQ(claims.ours.at("c-b"), std::set<std::string>{"vgpu"});

  // Bytes: room for one entry only.
  settings.cache_bytes = lookup.stats().bytes / 2 + 1;
  lookup.Resolve("ml", Sources({"d"}), settings);
  EXPECT_EQ(lookup.stats().entries, 1u);
  EXPECT_LE(lookup.stats().bytes, settings.cache_bytes);

  // No cache at all.
  settings.cache_entries = 0;
  const int before = api.gets;
  lookup.Resolve("ml", Sources({"e"}), settings);
  lookup.Resolve("ml", Sources({"e"}), settings);
  EXPECT_EQ(api.gets, before + 2);
}

TEST(ClaimLookup, OneDeadlineCoversAllOfAPodsLookups) {
  // A server that never answers until the call is broken from outside.
  ScriptedApi api;
  api.get = [](const std::string&, Canceller* cancel) -> Result<json> {
    std::mutex mutex;
    std::condition_variable broken;
    bool done = false;
    ArmedCall armed(cancel, [&] {
      std::lock_guard lock(mutex);
      done = true;
      broken.notify_all();
    });
    std::unique_lock lock(mutex);
    if (!armed.cancelled()) broken.wait_for(lock, std::chrono::seconds(30), [&] { return done; });
    return Status::Error(ErrorCode::kCancelled, "cancelled");
  };
  ClaimLookup lookup(api);
  ClaimSettings settings = DefaultConfig()->claims;
  // One deadline: 1.5 s for the four; a deadline each would take 6 s. The bound sits between.
  settings.lookup_timeout = milliseconds(1500);
  const auto start = Clock::now();
  PodClaims claims = lookup.Resolve("ml", Sources({"a", "b", "c", "d"}), settings);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, milliseconds(1500));
  EXPECT_LT(took, milliseconds(4500)) << "each lookup waited for a deadline of its own";
  EXPECT_EQ(claims.failed.size(), 4u);
  EXPECT_TRUE(claims.ours.empty());
  EXPECT_NE(claims.failed.at("c-a").find("lookupTimeout 1500ms"), std::string::npos);
}

TEST(ClaimLookup, ThePathNamesTheNamespaceAndTheKind) {
  EXPECT_EQ(ClaimObjectPath("ml", {"gpu", true, "vgpu-230"}),
            "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/vgpu-230");
  EXPECT_EQ(ClaimObjectPath("ml", {"gpu", false, "team"}),
            "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/team");
}

}  // namespace
}  // namespace kvgpu::webhook
