// The HTTP-facing half of admission: checks an AdmissionReview (admission.k8s.io/v1) request
// body, runs the pod decision, and writes the review response. No sockets here, so the whole
// path is unit-tested and fuzzed as a function of its input bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "webhook/config.h"
#include "webhook/pod_mutator.h"

namespace kvgpu::webhook {

// The largest review the API server can send us. It takes request bodies of up to 3 MiB and
// hands the pod on re-encoded by Go's encoding/json, which writes each of <, > and & as a
// six-byte \u003c: an object of 3 MiB can become 18 MiB. CREATE only (no oldObject), plus the
// AdmissionReview around it (user info, options): 19 MiB. A 600 kB pod with many < became a
// 3.6 MB review, more than the 3 MiB this limit once was.
inline constexpr size_t kMaxReviewBytes = 19 * 1024 * 1024;
// Deeper JSON is no Pod; the bound keeps every recursive walk of a document shallow.
inline constexpr int kMaxJsonDepth = 128;

// What reviewing a body may cost besides the body itself, every part bounded before it is spent
// (docs/webhook.md, "Memory"): the pruned document (refused past DocumentCostLimit while it is
// parsed), nlohmann's lexer buffer for the longest string (at most the body), and the answer
// with its patch (bounded by kMaxVgpuContainersPerPod and cut names: kAnswerAllowance). The
// server reserves this from its budget before calling HandleReview.
inline constexpr size_t kMaxDocumentCost = 8 * 1024 * 1024;
inline constexpr size_t kAnswerAllowance = 1024 * 1024;
// A real pod keeps a small part of its review (names, resources, mounts, env names, volumes):
// 16 bytes of document per body byte is several times what real reviews need (measured in
// docs/webhook.md) and refuses bodies made of nothing but tiny kept values.
inline constexpr size_t DocumentCostLimit(size_t body_bytes) {
  return std::min(kMaxDocumentCost, 16 * body_bytes + 256 * 1024);
}
inline constexpr size_t ReviewWorkingBytes(size_t body_bytes) {
  return DocumentCostLimit(body_bytes) + body_bytes + kAnswerAllowance;
}
// The server-wide budget all requests share: bodies as they arrive, ReviewWorkingBytes for each
// review being handled, answers until written (https/http_server.h).
inline constexpr size_t kRequestMemoryBytes = 56 * 1024 * 1024;

enum class ReviewOutcome {
  kBadRequest,  // HTTP 400: the body is not an AdmissionReview this webhook can answer
  kAllowed,     // allowed without a patch (out of scope, opted out, not a CREATE, ...)
  kMutated,
  kDenied,
};
const char* ReviewOutcomeName(ReviewOutcome outcome);

struct ReviewReply {
  int http_status = 200;
  std::string content_type;
  std::string body;
  ReviewOutcome outcome = ReviewOutcome::kBadRequest;
  PodOutcome pod_outcome = PodOutcome::kNoVgpu;  // meaningful unless kBadRequest
  // For the decision log (unless kBadRequest): as the request names them, and a denial's reason.
  std::string namespace_name;
  std::string pod_name;  // "" for a pod whose name the API server generates
  std::string reason;
};

// `content_type` is the request's Content-Type header value ("" when absent). `claims` looks up
// the pod's DRA claims (DecidePod); empty: they are not looked at.
ReviewReply HandleReview(std::string_view body, std::string_view content_type, const Config& config,
                         const ClaimResolver& claims = {});

// The answer for a review already parsed whole (after the HTTP-level checks). HandleReview
// parses only what the decision reads; tests hold the two to the same answers.
ReviewReply HandleReviewDocument(const nlohmann::json& review, const Config& config,
                                 const ClaimResolver& claims = {});

}  // namespace kvgpu::webhook
