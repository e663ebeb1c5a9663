#include "webhook/admission.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "webhook/json_patch.h"
#include "webhook/pod_fields.h"
#include "webhook/review_parse.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

ReviewReply BadRequest(std::string message) {
  ReviewReply reply;
  reply.http_status = 400;
  reply.content_type = "text/plain; charset=utf-8";
  reply.body = "bad AdmissionReview request: " + std::move(message) + "\n";
  reply.outcome = ReviewOutcome::kBadRequest;
  return reply;
}

bool IsJsonMediaType(std::string_view content_type) {
  std::string_view media = content_type.substr(0, content_type.find(';'));
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  while (!media.empty() && media.front() == ' ') media.remove_prefix(1);
  constexpr std::string_view kJson = "application/json";
  return media.size() == kJson.size() &&
         std::equal(media.begin(), media.end(), kJson.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

// A fragment of the offending input for an error message, never the whole of a 3 MiB body.
std::string Short(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 120) text = text.substr(0, 120) + "...";
  return text;
}

std::string StringOr(const json& value, std::string fallback) {
  return value.is_string() ? value.get<std::string>() : fallback;
}

// A JSON string as nlohmann's dump() writes it (and with its check of UTF-8, which throws). A
// uid is a UUID: one with nothing to escape is copied as it is.
void AppendJsonText(std::string& out, const std::string& text) {
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
  });
  if (plain) {
    out += '"';
    out += text;
    out += '"';
  } else {
    out += json(text).dump();
  }
}

// The reply the API server reads: uid echoed, apiVersion/kind as sent. Written straight into one
// string, byte for byte what dumping the same object with nlohmann (its keys in order) gave, and
// the patch's base64 (which needs no escaping) written into it in place.
ReviewReply Respond(const std::string& uid, const PodDecision& decision) {
  // A patch goes with the first injection and with a re-invocation that completed the pod.
  const bool mutated = !decision.patch.empty();
  ReviewReply reply;
  reply.http_status = 200;
  reply.content_type = "application/json";
  std::string& body = reply.body;
  body.reserve(192 + uid.size() + (decision.patch.size() + 2) / 3 * 4);
  body += R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":)";
  body += decision.allowed ? "true" : "false";
  if (mutated) body += R"(,"patchType":"JSONPatch")";
  if (!decision.allowed) {
    body += R"(,"status":{"code":403,"message":)";
    body += json(decision.message).dump();
    body += R"(,"reason":"Forbidden"})";
  }
  body += R"(,"uid":)";
  AppendJsonText(body, uid);
  if (!decision.warnings.empty()) {
    body += R"(,"warnings":)";
    body += json(decision.warnings).dump();
  }
  if (mutated) {
    body += R"(,"patch":")";
    Base64EncodeAppend(body, decision.patch);
    body += '"';
  }
  body += "}}";
  reply.pod_outcome = decision.outcome;
  reply.outcome = !decision.allowed ? ReviewOutcome::kDenied
                  : mutated         ? ReviewOutcome::kMutated
                                    : ReviewOutcome::kAllowed;
  return reply;
}

ReviewReply HandleDocument(const json& review, const Config& config, const ClaimResolver& claims);

ReviewReply Handle(std::string_view body, std::string_view content_type, const Config& config,
                   const ClaimResolver& claims) {
  if (!IsJsonMediaType(content_type))
    return BadRequest("Content-Type must be application/json, not \"" +
                      std::string(content_type.substr(0, 100)) + "\"");
  if (body.size() > kMaxReviewBytes)
    return BadRequest("body of " + std::to_string(body.size()) + " bytes exceeds the " +
                      std::to_string(kMaxReviewBytes >> 20) + " MiB limit");
  if (body.empty()) return BadRequest("empty body; expected an AdmissionReview JSON object");
  PrunedReview parsed =
      ParsePrunedReview(body, {config.opt_out_annotation, config.marker_annotation}, kMaxJsonDepth,
                        DocumentCostLimit(body.size()));
  if (parsed.error == PrunedReview::Error::kTooDeep)
    return BadRequest("JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  if (parsed.error == PrunedReview::Error::kTooLarge)
    return BadRequest(
        "the pod's containers, resources, mounts, env names and volumes would take "
        "more than the " +
        std::to_string(DocumentCostLimit(body.size()) >> 10) +
        " KiB of memory this webhook gives one review of " + std::to_string(body.size() >> 10) +
        " KiB; no pod that can run looks like this (docs/webhook.md, \"Memory\")");
  if (parsed.error != PrunedReview::Error::kNone) return BadRequest("body is not valid JSON");
  return HandleDocument(parsed.document, config, claims);
}

ReviewReply HandleDocument(const json& review, const Config& config, const ClaimResolver& claims) {
  if (!review.is_object()) return BadRequest("body must be a JSON object");

  const json& api_version = Member(review, "apiVersion");
  if (api_version != "admission.k8s.io/v1")
    return BadRequest("apiVersion must be admission.k8s.io/v1 (got " + Short(api_version) +
                      "); list only v1 in the webhook's admissionReviewVersions");
  if (Member(review, "kind") != "AdmissionReview")
    return BadRequest("kind must be AdmissionReview (got " + Short(Member(review, "kind")) + ")");
  const json& request = Member(review, "request");
  if (!request.is_object()) return BadRequest("missing request object");
  const json& uid = Member(request, "uid");
  if (!uid.is_string() || uid.get_ref<const std::string&>().empty())
    return BadRequest("request.uid must be a non-empty string");

  const json& kind = Member(request, "kind");
  if (Member(kind, "group") != "" || Member(kind, "version") != "v1" ||
      Member(kind, "kind") != "Pod") {
    return BadRequest("this webhook only handles core/v1 Pods, got request.kind " + Short(kind) +
                      "; check the webhook's rules (resources: [pods])");
  }
  const json& resource = Member(request, "resource");
  if (!resource.is_null() && Member(resource, "resource") != "pods")
    return BadRequest("request.resource must be pods, got " + Short(resource));

  PodDecision untouched;  // allowed, no patch
  // Subresources (ephemeralcontainers, binding, status ...) and non-CREATE operations carry no
  // new pod spec for this webhook to complete.
  if (!StringOr(Member(request, "subResource"), "").empty() ||
      Member(request, "operation") != "CREATE")
    return Respond(uid.get<std::string>(), untouched);

  const json& pod = Member(request, "object");
  if (!pod.is_object()) return BadRequest("request.object must hold the Pod being created");
  auto decision = DecidePod(pod, StringOr(Member(request, "namespace"), ""), config, claims);
  if (!decision.ok()) return BadRequest(decision.status().message());
  ReviewReply reply = Respond(uid.get<std::string>(), decision.value());
  reply.namespace_name = StringOr(Member(request, "namespace"), "");
  reply.pod_name = StringOr(Member(request, "name"), "");
  if (reply.pod_name.empty())
    reply.pod_name = StringOr(Member(Member(pod, "metadata"), "name"), "");
  if (reply.pod_name.empty()) {
    // Not named yet: the API server generates the name from this prefix after admission.
    std::string prefix = StringOr(Member(Member(pod, "metadata"), "generateName"), "");
    if (!prefix.empty()) reply.pod_name = prefix + "*";
  }
  if (!decision.value().allowed) reply.reason = decision.value().message;
  return reply;
}

}  // namespace

const char* ReviewOutcomeName(ReviewOutcome outcome) {
  switch (outcome) {
    case ReviewOutcome::kBadRequest:
      return "bad_request";
    case ReviewOutcome::kAllowed:
      return "allowed";
    case ReviewOutcome::kMutated:
      return "mutated";
    case ReviewOutcome::kDenied:
      return "denied";
  }
  return "unknown";
}

ReviewReply HandleReviewDocument(const json& review, const Config& config,
                                 const ClaimResolver& claims) {
  try {
    return HandleDocument(review, config, claims);
  } catch (const std::exception& e) {
    return BadRequest(std::string("could not process the request: ") + e.what());
  }
}

ReviewReply HandleReview(std::string_view body, std::string_view content_type, const Config& config,
                         const ClaimResolver& claims) {
  // Last line of defence: nothing in the request may take the server down. The paths above do
  // not throw by design (no .at(), parse without exceptions); this only catches what slipped by.
  try {
    return Handle(body, content_type, config, claims);
  } catch (const std::exception& e) {
    return BadRequest(std::string("could not process the request: ") + e.what());
  }
}

}  // namespace kvgpu::webhook
