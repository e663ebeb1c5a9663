// The fake API server's ResourceClaims (fake_apiserver.h says what it serves). The rules carried
// over, and where upstream has them (kubernetes/kubernetes, release-1.36):
// - create drops the status, updates of the object keep it and updates of status keep the rest:
//   pkg/registry/resource/resourceclaim/strategy.go (PrepareForCreate, PrepareForUpdate,
//   statusStrategy.PrepareForUpdate);
// - entries of status.devices whose device is no longer allocated are dropped by the server:
//   the same file, dropDeallocatedStatusDevices;
// - status validation: pkg/apis/resource/validation/validation.go
//   (ValidateResourceClaimStatusUpdate: allocation immutable once set, device status entries must
//   name an allocated device, unique by driver/pool/device/shareID, at most
//   AllocatedDeviceStatusMaxConditions = 8 conditions; ResourceClaimReservedForMaxSize = 256 in
//   kubernetes/api resource/v1/types.go v0.36.0); conditions as
//   k8s.io/apimachinery/pkg/apis/meta/v1/validation ValidateConditions;
// - list merge keys for strategic merge patches: the +listMapKey tags of ResourceClaimStatus
//   (reservedFor: uid; devices: driver, device, pool, shareID) and AllocatedDeviceStatus
//   (conditions: type) in kubernetes/api resource/v1/types.go v0.36.0.
#include <httplib.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "fakes/apiserver/api_answers.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "kube/json_fields.h"

namespace kvgpu::testing {

namespace {

constexpr const char* kGroup = "/apis/resource.k8s.io/v1";
constexpr std::size_t kMaxConditions = 8;     // AllocatedDeviceStatusMaxConditions
constexpr std::size_t kMaxReservedFor = 256;  // ResourceClaimReservedForMaxSize

using api_answers::Answer;
using api_answers::Failure;

using api_answers::Key;
using kube::Field;
using kube::StringField;

std::string Quoted(const std::string& name) {
  return "resourceclaims.resource.k8s.io \"" + name + "\"";
}

nlohmann::json ClaimNotFound(const std::string& name) {
  return Failure(404, "NotFound", Quoted(name) + " not found");
}

nlohmann::json Conflict(const std::string& name) {
  return Failure(409, "Conflict",
                 "Operation cannot be fulfilled on " + Quoted(name) +
                     ": the object has been modified; please apply your changes to the latest "
                     "version and try again");
}

nlohmann::json Invalid(const std::string& name, const std::string& detail) {
  return Failure(422, "Invalid",
                 "ResourceClaim.resource.k8s.io \"" + name + "\" is invalid: " + detail);
}

// driver/pool/device/shareID: how upstream names one allocated device (structured.SharedDeviceID).
std::string DeviceKey(const nlohmann::json& entry) {
  return StringField(entry, "driver") + "/" + StringField(entry, "pool") + "/" +
         StringField(entry, "device") + "/" + StringField(entry, "shareID");
}

std::set<std::string> AllocatedDevices(const nlohmann::json& status) {
  std::set<std::string> keys;
  const auto& results = Field(Field(Field(status, "allocation"), "devices"), "results");
  if (!results.is_array()) return keys;
  for (const auto& result : results) keys.insert(DeviceKey(result));
  return keys;
}

// The precondition a write carries: the resourceVersion it read, if any.
bool VersionMatches(const nlohmann::json& sent, const nlohmann::json& stored) {
  const std::string version = StringField(Field(sent, "metadata"), "resourceVersion");
  return version.empty() || version == StringField(Field(stored, "metadata"), "resourceVersion");
}

bool UidMatches(const nlohmann::json& sent, const nlohmann::json& stored) {
  const std::string uid = StringField(Field(sent, "metadata"), "uid");
  return uid.empty() || uid == StringField(Field(stored, "metadata"), "uid");
}

// An error message when `status` is not one the real server stores after `old_status`.
std::optional<std::string> ValidateStatus(const nlohmann::json& old_status,
                                          const nlohmann::json& status) {
  static const std::regex reason_re("^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$");
  static const std::regex type_re(
      "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
      "[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$");
  const auto& old_allocation = Field(old_status, "allocation");
  const auto& allocation = Field(status, "allocation");
  if (!old_allocation.is_null() && !allocation.is_null() && old_allocation != allocation) {
    return "status.allocation: field is immutable";
  }
  const auto& reserved = Field(status, "reservedFor");
  if (reserved.is_array() && !reserved.empty()) {
    if (allocation.is_null()) {
      return "status.reservedFor: Forbidden: may not be specified when `allocated` is not set";
    }
    if (reserved.size() > kMaxReservedFor) {
      return "status.reservedFor: Too many: must have at most 256 items";
    }
  }
  const auto& devices = Field(status, "devices");
  if (devices.is_null()) return std::nullopt;
  if (!devices.is_array()) return "status.devices: must be a list";
  const std::set<std::string> allocated = AllocatedDevices(status);
  std::set<std::string> seen;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const std::string at = "status.devices[" + std::to_string(i) + "]";
    const auto& entry = devices[i];
    const std::string key = DeviceKey(entry);
    if (!allocated.contains(key))
      return at + ": Invalid value: must be an allocated device in the claim";
    if (!seen.insert(key).second) return at + ": Duplicate value";
    const auto& conditions = Field(entry, "conditions");
    if (conditions.is_null()) continue;
    if (!conditions.is_array()) return at + ".conditions: must be a list";
    if (conditions.size() > kMaxConditions)
      return at + ".conditions: Too many: must have at most 8 items";
    std::set<std::string> types;
    for (const auto& condition : conditions) {
      const std::string type = StringField(condition, "type");
      const std::string state = StringField(condition, "status");
      const std::string reason = StringField(condition, "reason");
      if (type.empty() || !std::regex_match(type, type_re)) {
        return at + ".conditions.type: Invalid value: \"" + type + "\"";
      }
      if (!types.insert(type).second) return at + ".conditions: Duplicate value: \"" + type + "\"";
      if (state != "True" && state != "False" && state != "Unknown") {
        return at + ".conditions.status: Unsupported value: \"" + state + "\"";
      }
      if (reason.empty() || reason.size() > 1024 || !std::regex_match(reason, reason_re)) {
        return at + ".conditions.reason: Invalid value: \"" + reason + "\"";
      }
      if (StringField(condition, "lastTransitionTime").empty()) {
        return at + ".conditions.lastTransitionTime: Required value";
      }
    }
  }
  return std::nullopt;
}

// What the server does to status.devices on a write that deallocates devices.
void DropDeallocated(nlohmann::json& status, const nlohmann::json& old_status) {
  auto devices = Field(status, "devices");
  if (!devices.is_array()) return;
  const std::set<std::string> before = AllocatedDevices(old_status);
  const std::set<std::string> now = AllocatedDevices(status);
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& entry : devices) {
    const std::string key = DeviceKey(entry);
    if (before.contains(key) && !now.contains(key)) continue;
    kept.push_back(entry);
  }
  if (kept.empty()) {
    status.erase("devices");
  } else {
    status["devices"] = kept;
  }
}

// The merge keys of the lists a strategic merge patch of a claim's status may touch.
std::vector<std::string> MergeKeys(const std::string& path) {
  if (path == "/status/reservedFor") return {"uid"};
  if (path == "/status/devices") return {"driver", "device", "pool", "shareID"};
  if (path == "/status/devices/conditions") return {"type"};
  return {};
}

bool SameItem(const nlohmann::json& a, const nlohmann::json& b,
              const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    if (StringField(a, key.c_str()) != StringField(b, key.c_str())) return false;
  }
  return true;
}

void StrategicMerge(nlohmann::json& target, const nlohmann::json& patch, const std::string& path);

void MergeList(nlohmann::json& target, const nlohmann::json& patch, const std::string& path,
               const std::vector<std::string>& keys) {
  if (!target.is_array()) target = nlohmann::json::array();
  for (const auto& item : patch) {
    auto same = std::find_if(target.begin(), target.end(),
                             [&](const nlohmann::json& t) { return SameItem(t, item, keys); });
    if (StringField(item, "$patch") == "delete") {
      if (same != target.end()) target.erase(same);
      continue;
    }
    if (same == target.end()) {
      target.push_back(item);
    } else {
      StrategicMerge(*same, item, path);
    }
  }
}

void StrategicMerge(nlohmann::json& target, const nlohmann::json& patch, const std::string& path) {
  if (!patch.is_object() || !target.is_object()) {
    target = patch;
    return;
  }
  for (const auto& [field, value] : patch.items()) {
    // Items of a list are named by the list's path: devices/conditions, not devices/3/conditions.
    const std::string child = path + "/" + field;
    const auto keys = MergeKeys(child);
    if (value.is_null()) {
      target.erase(field);
    } else if (!keys.empty() && value.is_array()) {
      MergeList(target[field], value, child, keys);
    } else if (value.is_object() && target.contains(field) && target[field].is_object()) {
      StrategicMerge(target[field], value, child);
    } else {
      target[field] = value;
    }
  }
}

// fieldSelector for claims: metadata.name and metadata.namespace equality, as every resource has.
bool ParseClaimSelector(const std::string& text, std::map<std::string, std::string>& fields) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = text.find(',', start);
    const std::string term = text.substr(start, comma == std::string::npos ? comma : comma - start);
    const size_t eq = term.find('=');
    if (eq == std::string::npos) return false;
    const std::string field = term.substr(0, eq);
    if (field != "metadata.name" && field != "metadata.namespace") return false;
    fields[field] = term.substr(eq + 1);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

}  // namespace

std::uint64_t FakeApiServer::RecordClaimLocked(const std::string& type, nlohmann::json claim) {
  const std::uint64_t version = ++version_;
  claim["metadata"]["resourceVersion"] = std::to_string(version);
  const std::string ns = StringField(Field(claim, "metadata"), "namespace");
  const std::string key = Key(ns, StringField(Field(claim, "metadata"), "name"));
  if (type == "DELETED") {
    resource_claims_.erase(key);
  } else {
    resource_claims_[key] = claim;
  }
  const std::string line = nlohmann::json{{"type", type}, {"object", claim}}.dump() + "\n";
  for (const auto& watch : claim_watches_) {
    if (watch->node.empty() || watch->node == ns) watch->lines.push_back(line);
  }
  claim_history_.push_back({version, type, std::move(claim)});
  changed_.notify_all();
  return version;
}

std::uint64_t FakeApiServer::SetResourceClaim(nlohmann::json claim) {
  std::lock_guard lock(mutex_);
  auto& meta = claim["metadata"];
  const std::string key = Key(StringField(meta, "namespace"), StringField(meta, "name"));
  const bool exists = resource_claims_.contains(key);
  if (!meta.contains("uid")) {
    meta["uid"] = exists ? resource_claims_[key]["metadata"]["uid"]
                         : nlohmann::json("claim-uid-" + std::to_string(version_ + 1));
  }
  return RecordClaimLocked(exists ? "MODIFIED" : "ADDED", std::move(claim));
}

void FakeApiServer::DeleteResourceClaim(const std::string& ns, const std::string& name) {
  std::lock_guard lock(mutex_);
  const auto it = resource_claims_.find(Key(ns, name));
  if (it == resource_claims_.end()) return;
  RecordClaimLocked("DELETED", it->second);
}

nlohmann::json FakeApiServer::resource_claim(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto it = resource_claims_.find(Key(ns, name));
  return it == resource_claims_.end() ? nlohmann::json() : it->second;
}

std::vector<nlohmann::json> FakeApiServer::resource_claims() const {
  std::lock_guard lock(mutex_);
  std::vector<nlohmann::json> out;
  for (const auto& [key, claim] : resource_claims_) out.push_back(claim);
  return out;
}

int FakeApiServer::resource_claim_gets() const {
  std::lock_guard lock(mutex_);
  return resource_claim_gets_;
}

int FakeApiServer::resource_claim_status_writes() const {
  std::lock_guard lock(mutex_);
  return claim_status_writes_;
}

std::vector<nlohmann::json> FakeApiServer::resource_claim_status_history() const {
  std::lock_guard lock(mutex_);
  return claim_status_history_;
}

void FakeApiServer::RouteResourceClaims(httplib::Server& server) {
  const std::string all = std::string(kGroup) + "/resourceclaims";
  const std::string in_ns = std::string(kGroup) + "/namespaces/([^/]+)/resourceclaims";
  const std::string one = in_ns + "/([^/]+)";

  const auto list_or_watch = [this](const httplib::Request& req, httplib::Response& res,
                                    const std::string& path_ns) {
    std::map<std::string, std::string> fields;
    if (!ParseClaimSelector(req.get_param_value("fieldSelector"), fields)) {
      Answer(res, 400,
             Failure(400, "BadRequest",
                     "field label not supported: " + req.get_param_value("fieldSelector")));
      return;
    }
    std::string ns = path_ns;
    if (fields.contains("metadata.namespace")) {
      if (!ns.empty() && ns != fields["metadata.namespace"]) {
        Answer(res, 200,
               {{"kind", "ResourceClaimList"},
                {"apiVersion", "resource.k8s.io/v1"},
                {"metadata", {{"resourceVersion", std::to_string(resource_version())}}},
                {"items", nlohmann::json::array()}});
        return;
      }
      ns = fields["metadata.namespace"];
    }
    const std::string name = fields.contains("metadata.name") ? fields["metadata.name"] : "";
    const auto matches = [&](const nlohmann::json& claim) {
      return (ns.empty() || StringField(Field(claim, "metadata"), "namespace") == ns) &&
             (name.empty() || StringField(Field(claim, "metadata"), "name") == name);
    };
    const std::string watch = req.get_param_value("watch");
    std::unique_lock lock(mutex_);
    if (watch != "1" && watch != "true") {
      ++lists_;
      nlohmann::json items = nlohmann::json::array();
      for (const auto& [key, claim] : resource_claims_) {
        if (matches(claim)) items.push_back(claim);
      }
      Answer(res, 200,
             {{"kind", "ResourceClaimList"},
              {"apiVersion", "resource.k8s.io/v1"},
              {"metadata", {{"resourceVersion", std::to_string(version_)}}},
              {"items", items}});
      return;
    }
    if (!name.empty()) {
      Answer(res, 400, Failure(400, "BadRequest", "this fake watches claims by namespace only"));
      return;
    }
    std::shared_ptr<Watch> w = OpenWatch(
        req, res,
        [&](std::deque<std::string>& lines) {
          for (const auto& [key, claim] : resource_claims_) {
            if (matches(claim)) {
              lines.push_back(nlohmann::json{{"type", "ADDED"}, {"object", claim}}.dump() + "\n");
            }
          }
        },
        [&](std::uint64_t from, std::deque<std::string>& lines) {
          for (const auto& change : claim_history_) {
            if (change.version <= from || !matches(change.claim)) continue;
            lines.push_back(nlohmann::json{{"type", change.type}, {"object", change.claim}}.dump() +
                            "\n");
          }
        });
    if (w == nullptr) return;
    w->node = ns;
    claim_watches_.insert(w);
    lock.unlock();
    Notify();
    StreamWatch(res, w, &claim_watches_);
  };
  server.Get(all, [list_or_watch](const httplib::Request& req, httplib::Response& res) {
    list_or_watch(req, res, "");
  });
  server.Get(in_ns, [list_or_watch](const httplib::Request& req, httplib::Response& res) {
    list_or_watch(req, res, req.matches[1]);
  });

  server.Post(in_ns, [this](const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1];
    auto claim = nlohmann::json::parse(req.body, nullptr, false);
    if (!claim.is_object() || !Field(claim, "metadata").is_object() ||
        (!StringField(Field(claim, "metadata"), "namespace").empty() &&
         StringField(Field(claim, "metadata"), "namespace") != ns)) {
      Answer(res, 400, Failure(400, "BadRequest", "not a ResourceClaim of namespace " + ns));
      return;
    }
    std::lock_guard lock(mutex_);
    auto& meta = claim["metadata"];
    if (StringField(meta, "name").empty()) {
      const std::string prefix = StringField(meta, "generateName");
      if (prefix.empty()) {
        Answer(res, 422,
               Invalid("", "metadata.name: Required value: name or generateName is required"));
        return;
      }
      meta["name"] = prefix + "x" + std::to_string(10000 + ++generated_names_);
    }
    const std::string name = StringField(meta, "name");
    if (resource_claims_.contains(Key(ns, name))) {
      Answer(res, 409, Failure(409, "AlreadyExists", Quoted(name) + " already exists"));
      return;
    }
    meta["namespace"] = ns;
    meta["uid"] = "claim-uid-" + std::to_string(version_ + 1);
    meta["creationTimestamp"] = "2024-01-01T00:00:00Z";
    meta["generation"] = 1;
    meta.erase("deletionTimestamp");
    claim.erase("status");  // the status is the system's: a create cannot set it
    claim["kind"] = "ResourceClaim";
    claim["apiVersion"] = "resource.k8s.io/v1";
    RecordClaimLocked("ADDED", claim);
    Answer(res, 201, resource_claims_.at(Key(ns, name)));
  });

  server.Get(one, [this](const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1];
    const std::string name = req.matches[2];
    std::lock_guard lock(mutex_);
    ++resource_claim_gets_;
    const auto it = resource_claims_.find(Key(ns, name));
    if (it == resource_claims_.end()) {
      Answer(res, 404, ClaimNotFound(name));
      return;
    }
    Answer(res, 200, it->second);
  });

  // Update of the object: metadata only (spec is immutable, status is the status's).
  server.Put(one, [this](const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1];
    const std::string name = req.matches[2];
    const auto sent = nlohmann::json::parse(req.body, nullptr, false);
    if (!sent.is_object() || StringField(Field(sent, "metadata"), "name") != name) {
      Answer(res, 400, Failure(400, "BadRequest", "the body is not this ResourceClaim"));
      return;
    }
    std::lock_guard lock(mutex_);
    const auto it = resource_claims_.find(Key(ns, name));
    if (it == resource_claims_.end()) {
      Answer(res, 404, ClaimNotFound(name));
      return;
    }
    if (!VersionMatches(sent, it->second) || !UidMatches(sent, it->second)) {
      Answer(res, 409, Conflict(name));
      return;
    }
    if (Field(sent, "spec") != it->second["spec"]) {
      Answer(res, 422, Invalid(name, "spec: Invalid value: field is immutable"));
      return;
    }
    nlohmann::json updated = it->second;
    for (const char* field : {"labels", "annotations", "finalizers", "ownerReferences"}) {
      const auto& value = Field(Field(sent, "metadata"), field);
      if (value.is_null()) {
        updated["metadata"].erase(field);
      } else {
        updated["metadata"][field] = value;
      }
    }
    const bool finalized =
        !updated["metadata"].contains("finalizers") || updated["metadata"]["finalizers"].empty();
    if (updated == it->second) {
      Answer(res, 200, it->second);
      return;
    }
    if (updated["metadata"].contains("deletionTimestamp") && finalized) {
      RecordClaimLocked("DELETED", updated);
      Answer(res, 200, updated);
      return;
    }
    RecordClaimLocked("MODIFIED", updated);
    Answer(res, 200, resource_claims_.at(Key(ns, name)));
  });

  // The status subresource: PUT (UpdateStatus) and PATCH.
  const auto write_status = [this](const httplib::Request& req, httplib::Response& res, bool put) {
    const std::string ns = req.matches[1];
    const std::string name = req.matches[2];
    const std::string type = req.get_header_value("Content-Type");
    const bool strategic = type == "application/strategic-merge-patch+json";
    if (!put && !strategic && type != "application/merge-patch+json") {
      Answer(res, 415,
             Failure(415, "UnsupportedMediaType",
                     "this fake takes merge and strategic merge patches of a claim's status"));
      return;
    }
    const auto sent = nlohmann::json::parse(req.body, nullptr, false);
    if (!sent.is_object()) {
      Answer(res, 400, Failure(400, "BadRequest", "the body is not a JSON object"));
      return;
    }
    std::lock_guard lock(mutex_);
    const auto it = resource_claims_.find(Key(ns, name));
    if (it == resource_claims_.end()) {
      Answer(res, 404, ClaimNotFound(name));
      return;
    }
    if (put && StringField(Field(sent, "metadata"), "name") != name) {
      Answer(res, 400, Failure(400, "BadRequest", "the body is not this ResourceClaim"));
      return;
    }
    if (!VersionMatches(sent, it->second) || !UidMatches(sent, it->second)) {
      Answer(res, 409, Conflict(name));
      return;
    }
    const nlohmann::json& old_status =
        it->second.contains("status") ? it->second["status"] : nlohmann::json::object();
    nlohmann::json status = old_status;
    if (put) {
      status = Field(sent, "status").is_object() ? sent["status"] : nlohmann::json::object();
    } else if (sent.contains("status")) {
      nlohmann::json whole = {{"status", old_status}};
      if (strategic) {
        StrategicMerge(whole, {{"status", sent["status"]}}, "");
      } else {
        whole.merge_patch({{"status", sent["status"]}});
      }
      status = whole["status"].is_object() ? whole["status"] : nlohmann::json::object();
    }
    // The strategy's PrepareForUpdate runs before validation.
    DropDeallocated(status, old_status);
    if (const auto error = ValidateStatus(old_status, status)) {
      Answer(res, 422, Invalid(name, *error));
      return;
    }
    ++claim_status_writes_;
    nlohmann::json updated = it->second;
    if (status.empty()) {
      updated.erase("status");
    } else {
      updated["status"] = status;
    }
    if (updated == it->second) {  // no change: no new version, no event
      if (record_for_inspection_) claim_status_history_.push_back(updated);
      Answer(res, 200, updated);
      return;
    }
    RecordClaimLocked("MODIFIED", updated);
    const auto& stored = resource_claims_.at(Key(ns, name));
    if (record_for_inspection_) claim_status_history_.push_back(stored);
    Answer(res, 200, stored);
  };
  server.Put(one + "/status", [write_status](const httplib::Request& req, httplib::Response& res) {
    write_status(req, res, true);
  });
  server.Patch(one + "/status",
               [write_status](const httplib::Request& req, httplib::Response& res) {
                 write_status(req, res, false);
               });

  server.Delete(one, [this](const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1];
    const std::string name = req.matches[2];
    std::lock_guard lock(mutex_);
    const auto it = resource_claims_.find(Key(ns, name));
    if (it == resource_claims_.end()) {
      Answer(res, 404, ClaimNotFound(name));
      return;
    }
    nlohmann::json claim = it->second;
    const auto& finalizers = Field(claim["metadata"], "finalizers");
    if (finalizers.is_array() && !finalizers.empty()) {
      if (!claim["metadata"].contains("deletionTimestamp")) {
        claim["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z";
        RecordClaimLocked("MODIFIED", claim);
      }
      Answer(res, 200, resource_claims_.at(Key(ns, name)));
      return;
    }
    RecordClaimLocked("DELETED", claim);
    Answer(res, 200, claim);
  });
}

}  // namespace kvgpu::testing
