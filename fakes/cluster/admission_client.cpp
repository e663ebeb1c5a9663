#include "fakes/cluster/admission_client.h"

#include <httplib.h>

#include "kube/config.h"

namespace kvgpu::testing {

AdmissionClient::AdmissionClient(std::string host, int port, std::filesystem::path ca_file)
    : host_(std::move(host)), port_(port), ca_file_(std::move(ca_file)) {}

namespace {

std::unique_ptr<httplib::SSLClient> Connect(const std::string& host, int port,
                                            const std::filesystem::path& ca_file) {
  auto client = std::make_unique<httplib::SSLClient>(host, port);
  client->set_ca_cert_path(ca_file.string());
  client->enable_server_certificate_verification(true);
  client->set_connection_timeout(2, 0);
  client->set_read_timeout(10, 0);
  return client;
}

}  // namespace

AdmissionAnswer AdmissionClient::Review(const nlohmann::json& pod,
                                        const std::string& review_uid) const {
  const auto& meta = pod.value("metadata", nlohmann::json::object());
  const nlohmann::json review = {
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", review_uid},
        {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
        {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
        {"requestKind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
        {"requestResource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
        {"name", meta.value("name", "")},
        {"namespace", meta.value("namespace", "default")},
        {"operation", "CREATE"},
        {"userInfo", {{"username", "kubernetes-admin"}, {"groups", {"system:authenticated"}}}},
        {"object", pod},
        {"oldObject", nullptr},
        {"dryRun", false},
        {"options", {{"apiVersion", "meta.k8s.io/v1"}, {"kind", "CreateOptions"}}}}}};
  AdmissionAnswer answer;
  auto client = Connect(host_, port_, ca_file_);
  auto result = client->Post("/mutate", review.dump(), "application/json");
  if (!result) {
    answer.error = "POST https://" + host_ + ":" + std::to_string(port_) +
                   "/mutate: " + httplib::to_string(result.error());
    return answer;
  }
  answer.http_status = result->status;
  if (result->status != 200) {
    answer.error = "HTTP " + std::to_string(result->status) + ": " + result->body;
    return answer;
  }
  const auto body = nlohmann::json::parse(result->body, nullptr, false);
  if (body.is_discarded() || !body.contains("response")) {
    answer.error = "not an AdmissionReview response: " + result->body;
    return answer;
  }
  const auto& response = body["response"];
  if (response.value("uid", "") != review_uid) {
    answer.error =
        "response uid " + response.value("uid", "") + " is not the request's " + review_uid;
    return answer;
  }
  answer.allowed = response.value("allowed", false);
  if (response.contains("status")) answer.message = response["status"].value("message", "");
  for (const auto& warning : response.value("warnings", nlohmann::json::array())) {
    answer.warnings.push_back(warning.get<std::string>());
  }
  if (response.contains("patch")) {
    if (response.value("patchType", "") != "JSONPatch") {
      answer.error = "patchType is not JSONPatch";
      return answer;
    }
    auto decoded = kube::DecodeBase64(response["patch"].get<std::string>());
    if (!decoded.ok()) {
      answer.error = "patch is not base64";
      return answer;
    }
    answer.patch = nlohmann::json::parse(decoded.value(), nullptr, false);
    if (!answer.patch.is_array()) {
      answer.error = "patch is not a JSON array";
      return answer;
    }
  }
  return answer;
}

bool AdmissionClient::Healthy() const {
  auto client = Connect(host_, port_, ca_file_);
  auto result = client->Get("/healthz");
  return result && result->status == 200;
}

nlohmann::json ApplyAnswer(const nlohmann::json& pod, const AdmissionAnswer& answer) {
  if (answer.patch.is_null()) return pod;
  return pod.patch(answer.patch);
}

}  // namespace kvgpu::testing
