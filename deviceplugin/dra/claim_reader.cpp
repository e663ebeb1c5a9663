#include "deviceplugin/dra/claim_reader.h"

namespace kvgpu::deviceplugin::dra {

std::string ResourceClaimPath(const ClaimRef& ref) {
  return "/apis/resource.k8s.io/v1/namespaces/" + ref.namespace_ + "/resourceclaims/" + ref.name;
}

Result<std::vector<AllocatedDevice>> OurDevices(const nlohmann::json& claim, const ClaimRef& ref,
                                                const std::string& driver,
                                                const std::string& pool) {
  const std::string what = "ResourceClaim " + ref.namespace_ + "/" + ref.name;
  if (!claim.is_object()) return Status::Error(ErrorCode::kDecode, what + ": not an object");
  const nlohmann::json* uid = nullptr;
  if (auto m = claim.find("metadata"); m != claim.end() && m->is_object()) {
    if (auto u = m->find("uid"); u != m->end() && u->is_string()) uid = &*u;
  }
  if (uid == nullptr || uid->get<std::string>() != ref.uid) {
    return Status::Error(ErrorCode::kGone, what + " has UID " +
                                               (uid ? uid->get<std::string>() : "<none>") +
                                               ", kubelet asked for " + ref.uid);
  }
  const nlohmann::json* results = nullptr;
  if (auto s = claim.find("status"); s != claim.end() && s->is_object()) {
    if (auto a = s->find("allocation"); a != s->end() && a->is_object()) {
      if (auto d = a->find("devices"); d != a->end() && d->is_object()) {
        if (auto r = d->find("results"); r != d->end()) results = &*r;
      }
    }
  }
  if (results == nullptr) return Status::Error(ErrorCode::kInvalid, what + " is not allocated");
  if (!results->is_array() || results->size() > kMaxAllocationResults) {
    return Status::Error(ErrorCode::kDecode,
                         what + ": status.allocation.devices.results is not a list of at most " +
                             std::to_string(kMaxAllocationResults));
  }
  std::vector<AllocatedDevice> out;
  for (const nlohmann::json& r : *results) {
    auto text = [&](const char* key) -> std::string {
      auto it = r.is_object() ? r.find(key) : r.end();
      return (r.is_object() && it != r.end() && it->is_string()) ? it->get<std::string>() : "";
    };
    AllocatedDevice d{text("request"), text("pool"), text("device")};
    const std::string result_driver = text("driver");
    if (result_driver.empty() || d.pool.empty() || d.device.empty()) {
      return Status::Error(ErrorCode::kDecode,
                           what + ": an allocation result without driver, pool or device");
    }
    if (result_driver != driver || d.pool != pool) continue;
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<AllocatedDevice>> ReadOurDevices(kube::ApiTransport& api, const ClaimRef& ref,
                                                    const std::string& driver,
                                                    const std::string& pool, Canceller* cancel) {
  Result<nlohmann::json> claim = api.Get(ResourceClaimPath(ref), cancel);
  if (!claim.ok()) {
    if (claim.status().code() == ErrorCode::kHttp && claim.status().http_status() == 404) {
      return Status::Error(ErrorCode::kGone,
                           "ResourceClaim " + ref.namespace_ + "/" + ref.name + " not found");
    }
    return claim.status();
  }
  return OurDevices(claim.value(), ref, driver, pool);
}

}  // namespace kvgpu::deviceplugin::dra

namespace kvgpu::deviceplugin::dra {

namespace {

bool LabelChars(std::string_view s, bool dots) {
  if (s.empty()) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(s.front()) || !alnum(s.back())) return false;
  for (char c : s) {
    if (!alnum(c) && c != '-' && !(dots && c == '.')) return false;
  }
  return true;
}

}  // namespace

Status CheckClaimRef(const ClaimRef& ref) {
  if (ref.namespace_.size() > 63 || !LabelChars(ref.namespace_, false)) {
    return Status::Error(ErrorCode::kInvalid, "claim namespace is not a DNS label");
  }
  if (ref.name.size() > 253 || !LabelChars(ref.name, true)) {
    return Status::Error(ErrorCode::kInvalid, "claim name is not a DNS subdomain");
  }
  if (ref.uid.empty() || ref.uid.size() > 128) {
    return Status::Error(ErrorCode::kInvalid, "claim UID is empty or longer than 128 characters");
  }
  for (char c : ref.uid) {
    if (c < 0x21 || c > 0x7e) {
      return Status::Error(ErrorCode::kInvalid,
                           "claim UID has a character outside printable ASCII");
    }
  }
  return Status::Ok();
}

}  // namespace kvgpu::deviceplugin::dra
