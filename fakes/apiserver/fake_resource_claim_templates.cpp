// The fake API server's ResourceClaimTemplates (fake_apiserver.h says what it serves).
#include <httplib.h>

#include "fakes/apiserver/api_answers.h"
#include "fakes/apiserver/fake_apiserver.h"

namespace kvgpu::testing {

void FakeApiServer::SetResourceClaimTemplate(const nlohmann::json& claim_template) {
  const nlohmann::json& metadata = claim_template.at("metadata");
  SetResourceClaimTemplateBody(metadata.value("namespace", ""), metadata.value("name", ""),
                               claim_template.dump());
}

void FakeApiServer::SetResourceClaimTemplateBody(const std::string& ns, const std::string& name,
                                                 std::string body) {
  std::lock_guard lock(mutex_);
  claim_templates_[ns + "/" + name] = std::move(body);
}

int FakeApiServer::resource_claim_template_gets() const {
  std::lock_guard lock(mutex_);
  return claim_template_gets_;
}

void FakeApiServer::RouteResourceClaimTemplates(httplib::Server& server) {
  server.Get(R"(/apis/resource.k8s.io/v1/namespaces/([^/]+)/resourceclaimtemplates/([^/]+))",
             [this](const httplib::Request& req, httplib::Response& res) {
               const std::string ns = req.matches[1];
               const std::string name = req.matches[2];
               std::string body;
               bool found = false;
               {
                 std::lock_guard lock(mutex_);
                 ++claim_template_gets_;
                 const auto it = claim_templates_.find(ns + "/" + name);
                 if (it != claim_templates_.end()) {
                   body = it->second;
                   found = true;
                 }
               }
               if (!found) {
                 api_answers::Answer(
                     res, 404,
                     api_answers::Failure(
                         404, "NotFound",
                         "resourceclaimtemplates.resource.k8s.io \"" + name + "\" not found"));
                 return;
               }
               res.status = 200;
               res.set_content(body, "application/json");
             });
}

}  // namespace kvgpu::testing
