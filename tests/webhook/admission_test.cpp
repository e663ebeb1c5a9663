// The AdmissionReview edge: every malformed request is a 400 with a message that says what is
// wrong; well-formed requests outside the webhook's job are allowed untouched.
#include "webhook/admission.h"

#include <gtest/gtest.h>

#include "tests/webhook/pod_cases.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

json KataVgpuReview() {
  json review = testing::FixtureReview();
  review["request"]["object"]["spec"]["runtimeClassName"] = "kata";
  review["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]
        ["tencent.com/vgpu-492"] = "1";
  return review;
}

TEST(Admission, BadRequestsGet400WithAClearMessage) {
  struct Bad {
    std::string description;
    std::string body;
    std::string content_type;
    std::string message_part;
  };
  auto with = [](std::function<void(json&)> edit) {
    json review = KataVgpuReview();
    edit(review);
    return review.dump();
  };
  std::vector<Bad> table = {
      {"malformed JSON", R"({"apiVersion": "admission.k8s.io/v1", )", "application/json",
       "not valid JSON"},
      {"empty body", "", "application/json", "empty body"},
      {"JSON array", "[]", "application/json", "JSON object"},
      {"v1beta1 review", with([](json& r) { r["apiVersion"] = "admission.k8s.io/v1beta1"; }),
       "application/json", "admission.k8s.io/v1"},
      {"no apiVersion", with([](json& r) { r.erase("apiVersion"); }), "application/json",
       "apiVersion"},
      {"wrong kind", with([](json& r) { r["kind"] = "ConversionReview"; }), "application/json",
       "kind must be AdmissionReview"},
      {"missing request", with([](json& r) { r.erase("request"); }), "application/json",
       "missing request"},
      {"missing uid", with([](json& r) { r["request"].erase("uid"); }), "application/json", "uid"},
      {"empty uid", with([](json& r) { r["request"]["uid"] = ""; }), "application/json", "uid"},
      {"numeric uid", with([](json& r) { r["request"]["uid"] = 5; }), "application/json", "uid"},
      {"Deployment instead of Pod", with([](json& r) {
         r["request"]["kind"] = {{"group", "apps"}, {"version", "v1"}, {"kind", "Deployment"}};
       }),
       "application/json", "only handles core/v1 Pods"},
      {"resource other than pods",
       with([](json& r) { r["request"]["resource"]["resource"] = "services"; }), "application/json",
       "pods"},
      {"object missing on CREATE", with([](json& r) { r["request"].erase("object"); }),
       "application/json", "request.object"},
      {"object not a pod", with([](json& r) { r["request"]["object"]["spec"] = "x"; }),
       "application/json", "spec"},
      {"wrong content type", KataVgpuReview().dump(), "text/plain", "Content-Type"},
      {"no content type", KataVgpuReview().dump(), "", "Content-Type"},
      {"json-ish content type", KataVgpuReview().dump(), "application/jsonx", "Content-Type"},
      {"over the review limit", with([](json& r) {
         r["request"]["object"]["metadata"]["annotations"]["big"] =
             std::string(kMaxReviewBytes, 'x');
       }),
       "application/json", "19 MiB limit"},
      {"nested too deep", std::string(100000, '[') + std::string(100000, ']'), "application/json",
       "deeper"},
      {"invalid UTF-8 in a string", "{\"apiVersion\":\"\xff\xfe\"}", "application/json",
       "not valid JSON"},
  };
  for (const auto& bad : table) {
    SCOPED_TRACE(bad.description);
    ReviewReply reply = HandleReview(bad.body, bad.content_type, *DefaultConfig());
    EXPECT_EQ(reply.http_status, 400);
    EXPECT_EQ(reply.outcome, ReviewOutcome::kBadRequest);
    EXPECT_NE(reply.body.find(bad.message_part), std::string::npos) << reply.body;
    EXPECT_LT(reply.body.size(), 1024u) << "error messages quote input, never all of it";
  }
}

TEST(Admission, RequestsWithNothingToDoAreAllowedUntouched) {
  struct Case {
    std::string description;
    std::function<void(json&)> edit;
  };
  std::vector<Case> table = {
      {"UPDATE", [](json& r) { r["request"]["operation"] = "UPDATE"; }},
      {"DELETE without object",
       [](json& r) {
         r["request"]["operation"] = "DELETE";
         r["request"].erase("object");
       }},
      {"subresource", [](json& r) { r["request"]["subResource"] = "ephemeralcontainers"; }},
  };
  for (const auto& c : table) {
    SCOPED_TRACE(c.description);
    json review = KataVgpuReview();
    c.edit(review);
    ReviewReply reply = HandleReview(review.dump(), "application/json", *DefaultConfig());
    ASSERT_EQ(reply.http_status, 200) << reply.body;
    json response = json::parse(reply.body)["response"];
    EXPECT_EQ(response["uid"], review["request"]["uid"]);
    EXPECT_EQ(response["allowed"], true);
    EXPECT_FALSE(response.contains("patch"));
    EXPECT_EQ(reply.outcome, ReviewOutcome::kAllowed);
  }
}

// The answer is written as text, not dumped from a JSON object: byte for byte what dumping it
// with nlohmann gave before (keys in order, nlohmann's escapes), with the patch spliced in last.
void ExpectTheAnswerNlohmannWrote(const ReviewReply& reply) {
  if (reply.http_status != 200) return;
  json review = json::parse(reply.body);
  std::string patch;
  if (review["response"].contains("patch")) {
    patch = review["response"]["patch"].get<std::string>();
    review["response"].erase("patch");
  }
  std::string expected = review.dump();
  if (!patch.empty()) expected.insert(expected.size() - 2, ",\"patch\":\"" + patch + "\"");
  EXPECT_EQ(reply.body, expected);
}

TEST(Admission, TheAnswerIsTheTextNlohmannWouldHaveWritten) {
  for (const auto& c : testing::PodCases()) {
    SCOPED_TRACE(c.description);
    auto config = ParseConfig(c.config_yaml);
    ASSERT_TRUE(config.ok()) << config.status().message();
    json review = testing::FixtureReview();
    c.shape(review["request"]["object"]);
    review["request"]["namespace"] = c.namespace_name;
    ExpectTheAnswerNlohmannWrote(HandleReview(review.dump(), "application/json", *config.value()));
  }
  // uids that need escaping (a body's strings are valid UTF-8: the parser checks).
  for (const std::string uid : {"plain-uid", "quote\"back\\slash", "line\nfeed\ttab\x01\x7f",
                                "caf\xC3\xA9 \xF0\x9F\x98\x80"}) {
    SCOPED_TRACE(uid);
    json review = KataVgpuReview();
    review["request"]["uid"] = uid;
    ReviewReply reply = HandleReview(review.dump(), "application/json", *DefaultConfig());
    EXPECT_EQ(reply.http_status, 200);
    EXPECT_EQ(json::parse(reply.body)["response"]["uid"], uid);
    ExpectTheAnswerNlohmannWrote(reply);
  }
}

TEST(Admission, ContentTypeParametersAndCaseAreAccepted) {
  for (const char* type : {"application/json", "application/json; charset=utf-8",
                           "Application/JSON", " application/json ;charset=UTF-8"}) {
    SCOPED_TRACE(type);
    ReviewReply reply = HandleReview(KataVgpuReview().dump(), type, *DefaultConfig());
    EXPECT_EQ(reply.http_status, 200) << reply.body;
    EXPECT_EQ(reply.outcome, ReviewOutcome::kMutated);
  }
}

TEST(Admission, TheRealFixtureIsAllowedWithoutPatch) {
  // The fixture's oldObject is the string "None" (an artefact of its source): ignored on CREATE.
  ReviewReply reply =
      HandleReview(testing::FixtureReview().dump(), "application/json", *DefaultConfig());
  ASSERT_EQ(reply.http_status, 200);
  json response = json::parse(reply.body);
  EXPECT_EQ(response["response"]["uid"], "662c3df2-ade6-4165-b395-770857bc17b7");
  EXPECT_EQ(response["response"]["allowed"], true);
  EXPECT_FALSE(response["response"].contains("patchType"));
}

}  // namespace
}  // namespace kvgpu::webhook
