#include "fakes/dra_allocator/claim_api.h"

#include <utility>

namespace kvgpu::testing::dra {

namespace {

using nlohmann::json;

constexpr const char* kGroup = "/apis/resource.k8s.io/v1";

std::string ClaimPath(const std::string& ns, const std::string& name = "") {
  std::string path = std::string(kGroup) + "/namespaces/" + ns + "/resourceclaims";
  if (!name.empty()) path += "/" + name;
  return path;
}

std::string Key(const std::string& ns, const std::string& name) {
  return ns + "/" + name;
}

}  // namespace

Result<json> HttpClaimApi::Create(const json& claim) {
  return api_.Post(ClaimPath(claim.value("/metadata/namespace"_json_pointer, std::string())),
                   claim);
}

Result<json> HttpClaimApi::Get(const std::string& ns, const std::string& name) {
  return api_.Get(ClaimPath(ns, name));
}

Result<std::vector<json>> HttpClaimApi::List() {
  auto list = api_.Get(std::string(kGroup) + "/resourceclaims");
  if (!list.ok()) return list.status();
  return list->value("items", json::array()).get<std::vector<json>>();
}

Result<json> HttpClaimApi::WriteStatus(const std::string& ns, const std::string& name,
                                       const std::string& resource_version, const json& allocation,
                                       const json& reserved_for) {
  json patch = {{"status", {{"allocation", allocation}, {"reservedFor", reserved_for}}}};
  if (!resource_version.empty()) patch["metadata"] = {{"resourceVersion", resource_version}};
  auto answer = api_.Patch(ClaimPath(ns, name) + "/status", patch, "application/merge-patch+json");
  if (!answer.ok() && answer.status().http_status() == 409) {
    return Status::Error(ErrorCode::kExists, answer.status().ToString());
  }
  return answer;
}

Status HttpClaimApi::Delete(const std::string& ns, const std::string& name) {
  auto answer = api_.Delete(ClaimPath(ns, name));
  return answer.ok() ? Status::Ok() : answer.status();
}

Result<std::vector<json>> HttpClaimApi::ListSlices() {
  auto list = api_.Get(std::string(kGroup) + "/resourceslices");
  if (!list.ok()) return list.status();
  return list->value("items", json::array()).get<std::vector<json>>();
}

Result<json> MemoryClaimApi::StoreLocked(json claim) {
  claim["metadata"]["resourceVersion"] = std::to_string(++version_);
  const std::string key = Key(claim["metadata"]["namespace"], claim["metadata"]["name"]);
  claims_[key] = claim;
  return claim;
}

Result<json> MemoryClaimApi::Create(const json& request) {
  json claim = request;
  Result<json> stored = Status::Error(ErrorCode::kInvalid, "unset");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    json& meta = claim["metadata"];
    if (!meta.contains("name") || meta["name"].get<std::string>().empty()) {
      if (!meta.contains("generateName")) {
        return Status::Error(ErrorCode::kInvalid, "a claim needs a name or generateName");
      }
      meta["name"] = meta["generateName"].get<std::string>() + std::to_string(++names_);
    }
    if (!meta.contains("namespace")) return Status::Error(ErrorCode::kInvalid, "no namespace");
    const std::string key = Key(meta["namespace"], meta["name"]);
    if (claims_.count(key)) return Status::Error(ErrorCode::kExists, key + " exists");
    meta["uid"] = "claim-uid-" + std::to_string(++names_);
    claim.erase("status");
    stored = StoreLocked(std::move(claim));
  }
  if (on_change_)
    on_change_((*stored)["metadata"]["namespace"], (*stored)["metadata"]["name"], *stored);
  return stored;
}

Result<json> MemoryClaimApi::Get(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = claims_.find(Key(ns, name));
  if (it == claims_.end()) return Status::Error(ErrorCode::kGone, Key(ns, name) + " not found");
  return it->second;
}

Result<std::vector<json>> MemoryClaimApi::List() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<json> out;
  for (const auto& [key, claim] : claims_) out.push_back(claim);
  return out;
}

Result<json> MemoryClaimApi::WriteStatus(const std::string& ns, const std::string& name,
                                         const std::string& resource_version,
                                         const json& allocation, const json& reserved_for) {
  Result<json> stored = Status::Error(ErrorCode::kInvalid, "unset");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = claims_.find(Key(ns, name));
    if (it == claims_.end()) return Status::Error(ErrorCode::kGone, Key(ns, name) + " not found");
    if (!resource_version.empty() &&
        it->second["metadata"]["resourceVersion"].get<std::string>() != resource_version) {
      return Status::Error(ErrorCode::kExists, Key(ns, name) + ": conflict");
    }
    json claim = it->second;
    claim["status"]["allocation"] = allocation;
    claim["status"]["reservedFor"] = reserved_for;
    if (allocation.is_null()) claim["status"].erase("devices");  // dropDeallocatedStatusDevices
    stored = StoreLocked(std::move(claim));
  }
  if (on_change_) on_change_(ns, name, *stored);
  return stored;
}

Status MemoryClaimApi::Delete(const std::string& ns, const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (claims_.erase(Key(ns, name)) == 0) {
      return Status::Error(ErrorCode::kGone, Key(ns, name) + " not found");
    }
  }
  if (on_change_) on_change_(ns, name, nullptr);
  return Status::Ok();
}

Result<std::vector<json>> MemoryClaimApi::ListSlices() {
  return slices_();
}

Status MemoryClaimApi::SetDeviceCondition(const std::string& ns, const std::string& name,
                                          const json& result, const std::string& type,
                                          const std::string& status) {
  Result<json> stored = Status::Error(ErrorCode::kInvalid, "unset");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = claims_.find(Key(ns, name));
    if (it == claims_.end()) return Status::Error(ErrorCode::kGone, Key(ns, name) + " not found");
    json claim = it->second;
    json& devices = claim["status"]["devices"];
    if (!devices.is_array()) devices = json::array();
    json* entry = nullptr;
    for (json& d : devices) {
      if (d["driver"] == result["driver"] && d["pool"] == result["pool"] &&
          d["device"] == result["device"]) {
        entry = &d;
      }
    }
    if (entry == nullptr) {
      devices.push_back({{"driver", result["driver"]},
                         {"pool", result["pool"]},
                         {"device", result["device"]},
                         {"conditions", json::array()}});
      entry = &devices.back();
    }
    json& conditions = (*entry)["conditions"];
    bool found = false;
    for (json& c : conditions) {
      if (c["type"] == type) {
        c["status"] = status;
        found = true;
      }
    }
    if (!found) {
      conditions.push_back({{"type", type},
                            {"status", status},
                            {"reason", "Test"},
                            {"message", ""},
                            {"lastTransitionTime", "2026-01-01T00:00:00Z"}});
    }
    stored = StoreLocked(std::move(claim));
  }
  if (on_change_) on_change_(ns, name, *stored);
  return Status::Ok();
}

}  // namespace kvgpu::testing::dra
