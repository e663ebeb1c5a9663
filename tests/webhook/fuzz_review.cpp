// libFuzzer target for the whole AdmissionReview path (bytes in, HTTP reply out). Besides
// crashes and sanitizer reports it checks the contract: only 200 or 400, every 200 is a valid
// review response echoing the uid, and every patch applies to the pod it was made for.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "webhook/admission.h"
#include "webhook/config.h"

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
