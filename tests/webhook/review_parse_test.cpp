// The pruned review parser against nlohmann::json's full parse: the same texts are JSON, and
// every review gets the same answer as when the whole document is parsed.
#include "webhook/review_parse.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <iostream>

#include "tests/webhook/pod_cases.h"
#include "webhook/admission.h"
#include "webhook/config.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

void ExpectSameAnswer(const std::string& body, const Config& config) {
  ReviewReply pruned = HandleReview(body, "application/json", config);
  json whole = json::parse(body, nullptr, false);
  ASSERT_FALSE(whole.is_discarded());
  ReviewReply full = HandleReviewDocument(whole, config);
  EXPECT_EQ(pruned.http_status, full.http_status);
  EXPECT_EQ(pruned.body, full.body);
  EXPECT_EQ(pruned.outcome, full.outcome);
  EXPECT_EQ(pruned.pod_outcome, full.pod_outcome);
}

TEST(ReviewParse, EveryPodCaseGetsTheAnswerOfTheWholeDocument) {
  for (const auto& c : testing::PodCases()) {
    SCOPED_TRACE(c.description);
    auto config = ParseConfig(c.config_yaml);
    ASSERT_TRUE(config.ok()) << config.status().message();
    json review = testing::FixtureReview();
    c.shape(review["request"]["object"]);
    review["request"]["namespace"] = c.namespace_name;
    ExpectSameAnswer(review.dump(), *config.value());
  }
}

// Wrong types at every field the decision reads, and the documents' odd corners.
TEST(ReviewParse, OddDocumentsGetTheAnswerOfTheWholeDocument) {
  std::vector<std::pair<std::string, std::function<void(json&)>>> table = {
      {"containers an object",
       [](json& r) {
         r["request"]["object"]["spec"]["containers"] = {{"a", 1}};
       }},
      {"spec an array",
       [](json& r) {
         r["request"]["object"]["spec"] = json::array({1, 2});
       }},
      {"metadata null", [](json& r) { r["request"]["object"]["metadata"] = nullptr; }},
      {"annotations an array",
       [](json& r) { r["request"]["object"]["metadata"]["annotations"] = json::array({"x"}); }},
      {"marker annotation an object",
       [](json& r) {
         r["request"]["object"]["metadata"]["annotations"]["kata-vgpu.io/injected"] = {{"a", 1}};
       }},
      {"resources an array",
       [](json& r) {
         r["request"]["object"]["spec"]["containers"][0]["resources"] = json::array({1});
       }},
      {"container a string",
       [](json& r) { r["request"]["object"]["spec"]["containers"][0] = "web"; }},
      {"mount without mountPath",
       [](json& r) {
         r["request"]["object"]["spec"]["containers"][0]["volumeMounts"] = {{{"name", "x"}}};
       }},
      {"env items strings",
       [](json& r) { r["request"]["object"]["spec"]["containers"][0]["env"] = {"A=b"}; }},
      {"volumes of numbers",
       [](json& r) {
         r["request"]["object"]["spec"]["volumes"] = {1, 2};
       }},
      {"request.kind a list", [](json& r) { r["request"]["kind"] = {"Pod"}; }},
      {"uid a number", [](json& r) { r["request"]["uid"] = 12; }},
      {"review a list", [](json& r) { r = json::array({r}); }},
      {"review a string", [](json& r) { r = "AdmissionReview"; }},
  };
  for (const auto& [description, edit] : table) {
    SCOPED_TRACE(description);
    json review = testing::FixtureReview();
    review["request"]["object"]["spec"]["runtimeClassName"] = "kata";
    review["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]
          ["tencent.com/vgpu-1"] = "1";
    edit(review);
    ExpectSameAnswer(review.dump(), *DefaultConfig());
  }

  // Text-level corners: escaped keys, repeated keys (the last wins), a byte order mark.
  std::string mutating = testing::FixtureReview().dump();
  auto at = mutating.find("\"containers\":[{");
  ASSERT_NE(at, std::string::npos);
  mutating.insert(at, "\"runtimeClassName\":\"kata\",");
  at = mutating.find("\"resources\":{}");
  ASSERT_NE(at, std::string::npos);
  mutating.replace(at, 14, R"("resources":{"limits":{"tencent.com/vgpu-1":"1"}})");
  for (const std::string& body :
       {mutating, "\xEF\xBB\xBF" + mutating,
        std::string(R"({"ap\u0069Version":"admission.k8s.io/v1",)") + mutating.substr(1),
        std::string(R"({"apiVersion":"v0","kind":"x",)") + mutating.substr(1),
        mutating.substr(0, mutating.size() - 1) + R"(,"kind":"Other"})"}) {
    SCOPED_TRACE(body.substr(0, 60));
    ExpectSameAnswer(body, *DefaultConfig());
  }
}

// JSON values and near-misses: numbers at and past their ranges, escapes, surrogates, UTF-8
// good and bad, raw control bytes, broken grammar.
std::vector<std::string> OddValues() {
  return {"0",
          "-0",
          "01",
          "1.",
          ".5",
          "-",
          "1e",
          "1e+5",
          "1E-2",
          "-12.5e3",
          "1e400",
          "18446744073709551616",
          "-9223372036854775809",
          "true",
          "tru",
          "nul",
          "null",
          "falsey",
          R"("plain")",
          R"("\u00e9\n\t\/\"\\")",
          R"("\ud83d\ude00")",
          R"("\udc00")",
          R"("\ud800x")",
          R"("\ud800\u0041")",
          R"("\x")",
          R"("\u12g4")",
          "\"caf\xC3\xA9\"",
          "\"\xC0\x80\"",
          "\"\xED\xA0\x80\"",
          "\"\xF4\x90\x80\x80\"",
          "\"\xF0\x9F\x98\x80\"",
          "\"\xE2\x82\"",
          "\"\xF5\x80\x80\x80\"",
          "\"tab\there\"",
          std::string("\"nul\0byte\"", 10),
          "[1,]",
          "[1 2]",
          "{\"a\" 1}",
          "{\"a\":1,}",
          "{,}",
          "[]",
          "{}",
          " [ 1 , { } ] ",
          "\"unterminated",
          "[[[[]]]]",
          "{\"a\":[{\"b\":null}]}"};
}

// Each odd value where the pruned parser drops it and where it keeps it.
std::vector<std::string> OddBodies() {
  std::vector<std::string> bodies;
  for (const auto& value : OddValues()) {
    for (const std::string& body :
         {value, R"({"request":{"object":{"metadata":{"labels":)" + value + "}}}}",
          R"({"request":{"uid":)" + value + "}}", R"({"kind":)" + value + "} trailing",
          R"({"request":{"object":{"spec":{"containers":[{"resources":{"limits":)" + value +
              "}}]}}}}",
          R"({"request":{"object":{"spec":{"volumes":[)" + value + "," + value + "]}}}}"})
      bodies.push_back(body);
  }
  return bodies;
}

// Values placed where they are skipped and where they are kept: JSON for the pruned parser
// exactly when it is JSON for nlohmann.
TEST(ReviewParse, AcceptsExactlyWhatAFullParseAccepts) {
  for (const std::string& body : OddBodies()) {
    {
      SCOPED_TRACE(body);
      PrunedReview pruned = ParsePrunedReview(body, {"kata-vgpu.io/injected"}, 128);
      EXPECT_EQ(pruned.error == PrunedReview::Error::kNone, json::accept(body));
      if (json::accept(body)) ExpectSameAnswer(body, *DefaultConfig());
    }
  }
}

// The same type at every place, so the decision reports the same errors. The one difference
// allowed: "-0", signed for nlohmann, unsigned 0 on the simdjson path (equal, and printed alike).
void ExpectSameTypes(const json& fast, const json& streaming) {
  if (fast.is_number_integer() && streaming.is_number_integer() && fast == 0 && streaming == 0)
    return;
  ASSERT_EQ(fast.type(), streaming.type()) << fast.dump() << " / " << streaming.dump();
  if (fast.is_object()) {
    for (auto it = fast.begin(); it != fast.end(); ++it)
      ExpectSameTypes(it.value(), streaming[it.key()]);
  } else if (fast.is_array()) {
    for (size_t i = 0; i < fast.size(); ++i) ExpectSameTypes(fast[i], streaming[i]);
  }
}

// ParsePrunedReview takes bodies up to 64 KiB through simdjson; ParsePrunedReviewStreaming is
// nlohmann's SAX parser alone. Both must keep the same document, charge the same cost and refuse
// with the same error, on odd values, on every pod case, past the depth and past the cost limit.
TEST(ReviewParse, TheSimdjsonPathKeepsChargesAndRefusesAsTheStreamingParser) {
  std::vector<std::pair<std::string, size_t>> cases;  // body, cost limit
  for (const std::string& body : OddBodies()) cases.emplace_back(body, SIZE_MAX);
  for (const auto& c : testing::PodCases()) {
    json review = testing::FixtureReview();
    c.shape(review["request"]["object"]);
    cases.emplace_back(review.dump(), SIZE_MAX);
    cases.emplace_back(review.dump(), DocumentCostLimit(review.dump().size()));
    cases.emplace_back(review.dump(), 4000);  // stops partway through the kept fields
  }
  const std::string fixture = testing::FixtureReview().dump();
  cases.emplace_back(fixture.substr(0, fixture.size() / 2), SIZE_MAX);  // cut short
  for (int depth : {120, 127, 128, 129, 140}) {
    const std::string open(static_cast<size_t>(depth - 4), '[');
    const std::string close(static_cast<size_t>(depth - 4), ']');
    // Nested where it is dropped and where it is kept.
    cases.emplace_back(R"({"request":{"object":{"metadata":{"labels":)" + open + close + "}}}}",
                       SIZE_MAX);
    cases.emplace_back(R"({"request":{"object":{"spec":{"volumes":)" + open + close + "}}}}",
                       SIZE_MAX);
  }
  const std::vector<std::string_view> keys = {"kata-vgpu.io/injected", "kata-vgpu.io/inject"};
  for (const auto& [body, limit] : cases) {
    SCOPED_TRACE(body.substr(0, 200));
    PrunedReview fast = ParsePrunedReview(body, keys, 128, limit);
    PrunedReview streaming = ParsePrunedReviewStreaming(body, keys, 128, limit);
    EXPECT_EQ(fast.error, streaming.error);
    EXPECT_EQ(fast.cost, streaming.cost);
    EXPECT_EQ(fast.document, streaming.document);
    EXPECT_EQ(fast.document.dump(), streaming.document.dump());
    ExpectSameTypes(fast.document, streaming.document);
  }
}

TEST(ReviewParse, ANulByteAfterTheDocumentIsNotTheEndOfIt) {
  // nlohmann::json stops at a NUL byte outside a string and accepts what came before; the text
  // is not JSON (RFC 8259), and the pruned parser refuses it.
  const std::string body = testing::FixtureReview().dump() + std::string("\0trailing", 9);
  EXPECT_TRUE(json::accept(body));
  EXPECT_EQ(ParsePrunedReview(body, {}, 128).error, PrunedReview::Error::kNotJson);
  EXPECT_EQ(HandleReview(body, "application/json", *DefaultConfig()).http_status, 400);
}

TEST(ReviewParse, NestingIsBoundedWhereverItIs) {
  auto nested = [](int depth) {
    return R"({"request":{"object":{"metadata":{"labels":)" +
           std::string(static_cast<size_t>(depth - 4), '[') +
           std::string(static_cast<size_t>(depth - 4), ']') + "}}}}";
  };
  EXPECT_EQ(ParsePrunedReview(nested(128), {}, 128).error, PrunedReview::Error::kNone);
  EXPECT_EQ(ParsePrunedReview(nested(129), {}, 128).error, PrunedReview::Error::kTooDeep);
  // Brackets inside strings are text, not nesting.
  EXPECT_EQ(ParsePrunedReview(R"({"a":"[[[[[[[[[[\"[[[["})", {}, 2).error,
            PrunedReview::Error::kNone);
  ReviewReply reply = HandleReview(nested(200), "application/json", *DefaultConfig());
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.find("nests deeper than 128"), std::string::npos) << reply.body;
}

size_t HeapInUse() {
  struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// Bodies made of the smallest values the parser keeps: what the document charges must cover
// what glibc's heap really holds for it, or the server's budget would be a fiction.
TEST(ReviewParse, TheChargedCostCoversTheHeapTheDocumentHolds) {
  auto review = [](const std::string& spec_items) {
    return R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"object":)"
           R"({"spec":)" +
           spec_items + "}}}";
  };
  auto repeat = [](const std::string& item, size_t count) {
    std::string out;
    for (size_t i = 0; i < count; ++i) out += (i == 0 ? "" : ",") + item;
    return out;
  };
  struct Shape {
    const char* description;
    std::string body;
  };
  const size_t n = 20000;
  for (const Shape& shape : {
           Shape{"containers with one-letter names",
                 review(R"({"containers":[)" + repeat(R"({"name":"a"})", n) + "]}")},
           Shape{"volumes of bare numbers", review(R"({"volumes":[)" + repeat("1", n) + "]}")},
           Shape{"volumes of empty objects",
                 review(R"({"volumes":[)" + repeat(R"({"k":{}})", n) + "]}")},
           Shape{"env names", review(R"({"containers":[{"name":"a","env":[)" +
                                     repeat(R"({"name":"e"})", n) + "]}]}")},
           Shape{"long strings", review(R"({"volumes":[)" +
                                        repeat('"' + std::string(1000, 'x') + '"', 200) + "]}")},
       }) {
    SCOPED_TRACE(shape.description);
    const size_t before = HeapInUse();
    PrunedReview pruned = ParsePrunedReview(shape.body, {}, 128);
    const size_t held = HeapInUse() - before;
    ASSERT_EQ(pruned.error, PrunedReview::Error::kNone);
    EXPECT_LE(held, pruned.cost) << "held " << held << " bytes, charged " << pruned.cost;
    EXPECT_GT(pruned.cost, held / 2) << "an estimate far above the truth refuses real pods";
  }
}

// Issue #26: a 3 MiB review of 45,054 minimal vGPU containers cost 83 MiB; now it is refused
// while it is parsed, once its document would pass its share of the budget.
TEST(ReviewParse, ADocumentPastItsLimitIsRefusedWhileParsing) {
  std::string containers;
  for (int i = 0; i < 45054; ++i)
    containers += std::string(i == 0 ? "" : ",") +
                  R"({"name":"c","resources":{"limits":{"tencent.com/vgpu-492":"1"}}})";
  json review = testing::FixtureReview();
  std::string body = review.dump();
  const std::string key = R"("containers":[)";
  size_t at = body.find(key);
  ASSERT_NE(at, std::string::npos);
  body.insert(at + key.size(), containers + ",");
  ASSERT_GT(body.size(), 2'900'000u);
  PrunedReview pruned = ParsePrunedReview(body, {}, 128, DocumentCostLimit(body.size()));
  EXPECT_EQ(pruned.error, PrunedReview::Error::kTooLarge);
  EXPECT_LE(pruned.cost, DocumentCostLimit(body.size()) + kValueCost + 64);
  ReviewReply reply = HandleReview(body, "application/json", *DefaultConfig());
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.find("of memory this webhook gives one review"), std::string::npos)
      << reply.body.substr(0, 300);
  EXPECT_LT(reply.body.size(), 1000u);
}

// What each review shape costs (the table in docs/webhook.md, "Memory"): the document charged and
// the answer stay inside what the server reserves for the review before handling it.
TEST(ReviewParse, EveryShapeFitsTheReserveTheServerTakesForIt) {
  auto with_vgpu_containers = [](size_t count, bool minimal) {
    json review = testing::FixtureReview();
    json& spec = review["request"]["object"]["spec"];
    spec["runtimeClassName"] = "kata";
    json base = minimal ? json{{"name", "c"}} : spec["containers"][0];
    spec["containers"] = json::array();
    for (size_t i = 0; i < count; ++i) {
      json container = base;
      if (!minimal) container["name"] = "c" + std::to_string(i);
      container["resources"] = {{"limits", {{"tencent.com/vgpu-492", "1"}}}};
      spec["containers"].push_back(container);
    }
    return review.dump();
  };
  struct Shape {
    const char* description;
    std::string body;
  };
  const auto config = DefaultConfig();
  for (const Shape& shape :
       {Shape{"the fixture, one vGPU container", with_vgpu_containers(1, false)},
        Shape{"32 vGPU containers", with_vgpu_containers(32, false)},
        Shape{"33 vGPU containers", with_vgpu_containers(33, false)},
        Shape{"45,054 minimal", with_vgpu_containers(45054, true)},
        Shape{"282,069 minimal", with_vgpu_containers(282069, true)}}) {
    SCOPED_TRACE(shape.description);
    PrunedReview pruned =
        ParsePrunedReview(shape.body, {"kata-vgpu.io/injected", "kata-vgpu.io/inject"}, 128,
                          DocumentCostLimit(shape.body.size()));
    ReviewReply reply = HandleReview(shape.body, "application/json", *config);
    std::cout << shape.description << ": body " << shape.body.size() << " B, document "
              << pruned.cost << " B (limit " << DocumentCostLimit(shape.body.size()) << "), answer "
              << reply.body.size() << " B, HTTP " << reply.http_status << "\n";
    EXPECT_LE(pruned.cost, DocumentCostLimit(shape.body.size()) + kValueCost + 64);
    EXPECT_LE(reply.body.size(), kAnswerAllowance);
  }
}

}  // namespace
}  // namespace kvgpu::webhook
