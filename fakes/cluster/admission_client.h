// kube-apiserver's side of a mutating admission webhook call: an admission.k8s.io/v1
// AdmissionReview POSTed over HTTPS (server certificate checked against the caBundle), the
// response read and its base64 JSON Patch decoded and applied (RFC 6902) as the API server does.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvgpu::testing {

struct AdmissionAnswer {
  std::string error;    // transport failure or a malformed response; empty otherwise
  int http_status = 0;  // 200 when the webhook answered the review
  bool allowed = false;
  std::string message;   // status.message of a denial
  nlohmann::json patch;  // the decoded JSON Patch, null when none
  std::vector<std::string> warnings;
  bool ok() const { return error.empty() && http_status == 200; }
};

class AdmissionClient {
 public:
  // `ca_file`: the PEM the webhook configuration's caBundle would carry.
  AdmissionClient(std::string host, int port, std::filesystem::path ca_file);

  // A CREATE review of `pod` (uid `review_uid`), as the API server sends it.
  AdmissionAnswer Review(const nlohmann::json& pod, const std::string& review_uid) const;
  // GET /healthz answered 200 over a verified TLS connection.
  bool Healthy() const;

 private:
  std::string host_;
  int port_;
  std::filesystem::path ca_file_;
};

// The pod after the API server applied the answer's patch (the pod itself when there is none).
// Throws nlohmann::json::exception when the patch does not apply.
nlohmann::json ApplyAnswer(const nlohmann::json& pod, const AdmissionAnswer& answer);

}  // namespace kvgpu::testing
