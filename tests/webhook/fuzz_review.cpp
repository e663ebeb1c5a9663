// libFuzzer target for the whole AdmissionReview path (bytes in, HTTP reply out). Besides
// crashes and sanitizer reports it checks the contract: only 200 or 400, every 200 is a valid
// review response echoing the uid, and every patch applies to the pod it was made for; and the
// pruned parser against nlohmann::json: JSON for one exactly when JSON for the other, and the
// same answer as from the whole document; and its simdjson path against its nlohmann path.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "webhook/admission.h"
#include "webhook/config.h"
#include "webhook/review_parse.h"

namespace {

void Require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgpu::webhook;
  static const auto config = DefaultConfig();
  std::string_view body(reinterpret_cast<const char*>(data), size);
  ReviewReply reply = HandleReview(body, "application/json", *config);
  Require(reply.http_status == 200 || reply.http_status == 400);

  PrunedReview pruned = ParsePrunedReview(
      body, {config->opt_out_annotation, config->marker_annotation}, kMaxJsonDepth);
  // nlohmann::json takes a NUL byte outside a string for the end of the input ("1\0x" is JSON
  // to it); the pruned parser is stricter and refuses it.
  if (pruned.error != PrunedReview::Error::kTooDeep && body.find('\0') == std::string_view::npos)
    Require((pruned.error == PrunedReview::Error::kNone) == nlohmann::json::accept(body));
  // The simdjson path (bodies up to 64 KiB) against nlohmann's SAX parser alone: the same
  // document, cost and error.
  PrunedReview streaming = ParsePrunedReviewStreaming(
      body, {config->opt_out_annotation, config->marker_annotation}, kMaxJsonDepth);
  Require(pruned.error == streaming.error && pruned.cost == streaming.cost &&
          pruned.document == streaming.document);
  if (pruned.error == PrunedReview::Error::kNone && !body.empty()) {
    // Nesting is bounded here, so the whole document is safe to build.
    ReviewReply full = HandleReviewDocument(nlohmann::json::parse(body), *config);
    Require(full.http_status == reply.http_status && full.body == reply.body);
  }
  if (reply.http_status == 400) return 0;

  auto response = nlohmann::json::parse(reply.body, nullptr, false);
  Require(response.is_object() && response["kind"] == "AdmissionReview");
  auto request = nlohmann::json::parse(body, nullptr, false);
  Require(response["response"]["uid"] == request["request"]["uid"]);
  if (reply.outcome == ReviewOutcome::kMutated) {
    const auto& pod = request["request"]["object"];
    auto decision = DecidePod(pod, request["request"].value("namespace", ""), *config);
    Require(decision.ok());
    try {
      auto patched = pod.patch(nlohmann::json::parse(decision->patch));
      auto again = DecidePod(patched, request["request"].value("namespace", ""), *config);
      Require(again.ok() && again->outcome == PodOutcome::kAlreadyInjected);
    } catch (const nlohmann::json::exception&) {
      std::abort();  // a patch that does not apply to its own pod
    }
  }
  return 0;
}
