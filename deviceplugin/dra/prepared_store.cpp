#include "deviceplugin/dra/prepared_store.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "deviceplugin/model/state_store.h"

namespace kvgpu::deviceplugin::dra {

namespace {

constexpr int kVersion = 1;

nlohmann::json EncodeDevice(const PreparedDevice& d) {
  return {{"requestNames", d.request_names}, {"pool", d.pool},          {"device", d.device},
          {"resource", d.resource},          {"deviceID", d.device_id}, {"vgpuID", d.vgpu_id},
          {"cdiDeviceIDs", d.cdi_device_ids}};
}

PreparedDevice DecodeDevice(const nlohmann::json& j) {
  PreparedDevice d;
  d.request_names = j.at("requestNames").get<std::vector<std::string>>();
  d.pool = j.at("pool").get<std::string>();
  d.device = j.at("device").get<std::string>();
  d.resource = j.at("resource").get<std::string>();
  d.device_id = j.at("deviceID").get<std::string>();
  d.vgpu_id = j.at("vgpuID").get<std::string>();
  d.cdi_device_ids = j.at("cdiDeviceIDs").get<std::vector<std::string>>();
  return d;
}

}  // namespace

std::string EncodePreparedClaims(const std::map<std::string, PreparedClaim>& claims) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [uid, c] : claims) {
    nlohmann::json devices = nlohmann::json::array();
    for (const PreparedDevice& d : c.devices) devices.push_back(EncodeDevice(d));
    list.push_back({{"uid", c.uid},
                    {"namespace", c.namespace_},
                    {"name", c.name},
                    {"prepared", c.prepared},
                    {"devices", std::move(devices)}});
  }
  return nlohmann::json{{"version", kVersion}, {"claims", std::move(list)}}.dump(1) + "\n";
}

Result<std::map<std::string, PreparedClaim>> DecodePreparedClaims(const std::string& text) {
  std::map<std::string, PreparedClaim> out;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.at("version").get<int>() != kVersion) {
      return Status::Error(ErrorCode::kInvalid, "unknown version " + j.at("version").dump());
    }
    const nlohmann::json& list = j.at("claims");
    if (!list.is_array() || list.size() > kMaxPreparedClaims) {
      return Status::Error(ErrorCode::kInvalid,
                           "claims: not a list of at most " + std::to_string(kMaxPreparedClaims));
    }
    for (const nlohmann::json& e : list) {
      PreparedClaim c;
      c.uid = e.at("uid").get<std::string>();
      c.namespace_ = e.at("namespace").get<std::string>();
      c.name = e.at("name").get<std::string>();
      c.prepared = e.at("prepared").get<bool>();
      for (const nlohmann::json& d : e.at("devices")) c.devices.push_back(DecodeDevice(d));
      if (c.uid.empty() || !out.emplace(c.uid, c).second) {
        return Status::Error(ErrorCode::kInvalid, "claim uid empty or repeated: '" + c.uid + "'");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(ErrorCode::kInvalid, std::string("malformed: ") + e.what());
  }
  return out;
}

PreparedStore::PreparedStore(std::filesystem::path dir) : dir_(std::move(dir)) {}

Status PreparedStore::Load() {
  std::ifstream in(file());
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(file(), ec)) {
      std::lock_guard lock(mutex_);
      claims_.clear();
      return Status::Ok();
    }
    return Status::Error(ErrorCode::kIo, "cannot read " + file().string());
  }
  std::stringstream text;
  text << in.rdbuf();
  Result<std::map<std::string, PreparedClaim>> decoded = DecodePreparedClaims(text.str());
  if (!decoded.ok()) {
    return Status::Error(ErrorCode::kInvalid, file().string() + ": " + decoded.status().message());
  }
  std::lock_guard lock(mutex_);
  claims_ = std::move(decoded).value();
  return Status::Ok();
}

std::optional<PreparedClaim> PreparedStore::Find(const std::string& uid) const {
  std::lock_guard lock(mutex_);
  auto it = claims_.find(uid);
  if (it == claims_.end()) return std::nullopt;
  return it->second;
}

size_t PreparedStore::Count() const {
  std::lock_guard lock(mutex_);
  return claims_.size();
}

std::vector<PreparedClaim> PreparedStore::All() const {
  std::lock_guard lock(mutex_);
  std::vector<PreparedClaim> out;
  for (const auto& [uid, c] : claims_) out.push_back(c);
  return out;
}

std::optional<PreparedClaim> PreparedStore::ClaimOfDevice(const std::string& device_id) const {
  std::lock_guard lock(mutex_);
  for (const auto& [uid, c] : claims_) {
    for (const PreparedDevice& d : c.devices) {
      if (d.device_id == device_id) return c;
    }
  }
  return std::nullopt;
}

Status PreparedStore::SaveLocked(const std::map<std::string, PreparedClaim>& claims) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Status::Error(ErrorCode::kIo, "create " + dir_.string() + ": " + ec.message());
  return WriteFileAtomically(file(), EncodePreparedClaims(claims), 0600);
}

Status PreparedStore::Put(const PreparedClaim& claim) {
  std::lock_guard lock(mutex_);
  if (!claims_.contains(claim.uid) && claims_.size() >= kMaxPreparedClaims) {
    return Status::Error(ErrorCode::kNoRoom, "more than " + std::to_string(kMaxPreparedClaims) +
                                                 " claims prepared on this node");
  }
  std::map<std::string, PreparedClaim> next = claims_;
  next[claim.uid] = claim;
  Status saved = SaveLocked(next);
  if (saved.ok()) claims_ = std::move(next);
  return saved;
}

Status PreparedStore::Erase(const std::string& uid) {
  std::lock_guard lock(mutex_);
  if (!claims_.contains(uid)) return Status::Ok();
  std::map<std::string, PreparedClaim> next = claims_;
  next.erase(uid);
  Status saved = SaveLocked(next);
  if (saved.ok()) claims_ = std::move(next);
  return saved;
}

}  // namespace kvgpu::deviceplugin::dra
