#include "deviceplugin/dra/device_metadata.h"

#include <algorithm>
#include <cctype>
#include <system_error>
#include <utility>

#include "deviceplugin/model/cdi.h"
#include "deviceplugin/model/state_store.h"

namespace kvgpu::deviceplugin::dra {

namespace {

using ordered_json = nlohmann::ordered_json;

// upstream kubeletplugin/metadata.go: cdiVersionStr, metadataFilePerms, metadataDirPerms.
constexpr const char* kCdiVersion = "0.5.0";
constexpr ::mode_t kFileMode = 0644;
constexpr std::filesystem::perms kDirMode =
    std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
    std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
    std::filesystem::perms::others_exec;
constexpr size_t kNameMax = 255;  // NAME_MAX: one path component

// A name for an error message: printable ASCII, cut at 80 characters.
std::string Shown(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 80) out += "...";
  return "\"" + out + "\"";
}

bool SafeUid(const std::string& uid) {
  return !uid.empty() && uid.size() <= 128 && std::all_of(uid.begin(), uid.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-';
  });
}

bool SafeRequest(const std::string& request) {
  const size_t slash = request.find('/');
  if (slash == std::string::npos) return IsDnsLabel(request);
  return IsDnsLabel(request.substr(0, slash)) && IsDnsLabel(request.substr(slash + 1));
}

bool SafeClaimDir(const std::string& namespace_, const std::string& name) {
  return IsDnsLabel(namespace_) && IsDnsSubdomain(name) &&
         namespace_.size() + 1 + name.size() <= kNameMax;
}

// Creates `path` (and its parents inside `base`) with upstream's directory mode where it makes
// them; `base` itself with its parents as the process makes directories.
Status MakeDirs(const std::filesystem::path& base, const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (ec) return Status::Error(ErrorCode::kIo, "create " + base.string() + ": " + ec.message());
  std::filesystem::path at = base;
  for (const auto& part : path.lexically_relative(base)) {
    at /= part;
    if (std::filesystem::create_directory(at, ec)) {
      std::filesystem::permissions(at, kDirMode, ec);
    }
    if (ec) return Status::Error(ErrorCode::kIo, "create " + at.string() + ": " + ec.message());
  }
  return Status::Ok();
}

bool LooksLikeUuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : std::isxdigit(static_cast<unsigned char>(s[i])) == 0) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> PodClaimNameOf(const nlohmann::json& claim) {
  if (!claim.is_object()) return std::nullopt;
  auto meta = claim.find("metadata");
  if (meta == claim.end() || !meta->is_object()) return std::nullopt;
  auto annotations = meta->find("annotations");
  if (annotations == meta->end() || !annotations->is_object()) return std::nullopt;
  auto value = annotations->find(std::string(kPodClaimNameAnnotation));
  if (value == annotations->end() || !value->is_string()) return std::nullopt;
  return value->get<std::string>();
}

std::string BaseRequest(const std::string& request) {
  return request.substr(0, request.find('/'));
}

nlohmann::json MetadataAttributes(const DraDevice& device, const std::string& vgpu_id) {
  nlohmann::json attributes = DeviceAttributes(device);
  if (device.flavour == mdev::Flavour::kMdev) {
    attributes[std::string(kMdevUuidAttribute)] = {{"string", vgpu_id}};
  } else {
    attributes[kPciBusIdAttribute] = {{"string", vgpu_id}};
  }
  return attributes;
}

nlohmann::json VgpuIdentityAttributes(const std::string& vgpu_id) {
  if (vgpu_id.empty()) return nlohmann::json::object();
  if (LooksLikeUuid(vgpu_id)) return {{std::string(kMdevUuidAttribute), {{"string", vgpu_id}}}};
  return {{kPciBusIdAttribute, {{"string", vgpu_id}}}};
}

std::string DeviceMetadataStream(const std::string& driver, const MetadataClaim& claim,
                                 const std::string& request,
                                 const std::vector<MetadataDevice>& devices) {
  ordered_json list = ordered_json::array();
  for (const MetadataDevice& d : devices) {
    ordered_json device = {{"driver", driver}, {"pool", d.pool}, {"name", d.device}};
    // Upstream's attributes are a Go map (written in key order) and left out when empty.
    if (d.attributes.is_object() && !d.attributes.empty()) device["attributes"] = d.attributes;
    list.push_back(std::move(device));
  }
  std::string out;
  for (std::string_view version : kMetadataApiVersions) {
    ordered_json object = {{"kind", "DeviceMetadata"},
                           {"apiVersion", version},
                           {"metadata",
                            {{"name", claim.name},
                             {"namespace", claim.namespace_},
                             {"uid", claim.uid},
                             // Upstream writes 1 at prepare; an update (network data) counts up.
                             {"generation", 1}}}};
    if (claim.pod_claim_name) object["podClaimName"] = *claim.pod_claim_name;
    object["requests"] = ordered_json::array({{{"name", request}, {"devices", list}}});
    out += object.dump(2) + "\n";
  }
  return out;
}

DeviceMetadataFiles::DeviceMetadataFiles(std::string driver, std::filesystem::path dir,
                                         std::filesystem::path cdi_dir)
    : driver_(std::move(driver)),
      dir_(dir.empty() ? dir : std::filesystem::absolute(dir)),
      cdi_dir_(cdi_dir.empty() ? cdi_dir : std::filesystem::absolute(cdi_dir)) {}

Status DeviceMetadataFiles::Check(const MetadataClaim& claim,
                                  const std::vector<std::string>& requests) const {
  auto bad = [](const std::string& why) {
    return Status::Error(ErrorCode::kInvalid, "device metadata: " + why);
  };
  if (!IsDnsLabel(claim.namespace_)) {
    return bad("claim namespace " + Shown(claim.namespace_) + " is not a DNS label");
  }
  if (!IsDnsSubdomain(claim.name)) {
    return bad("claim name " + Shown(claim.name) + " is not a DNS subdomain");
  }
  if (!SafeClaimDir(claim.namespace_, claim.name)) {
    return bad("claim namespace and name make a directory name over 255 bytes");
  }
  if (!SafeUid(claim.uid)) {
    return bad("claim UID " + Shown(claim.uid) +
               " is not 1-128 letters, digits and '-' (it names the CDI spec and device)");
  }
  if (claim.pod_claim_name && !IsDnsLabel(*claim.pod_claim_name)) {
    return bad("annotation " + std::string(kPodClaimNameAnnotation) + " " +
               Shown(*claim.pod_claim_name) + " is not a DNS label");
  }
  if (Status kind = ValidateCdiKind(CdiKind()); !kind.ok()) return bad(kind.message());
  for (const std::string& request : requests) {
    if (!SafeRequest(request)) {
      return bad("request " + Shown(request) +
                 " is not a DNS label or <request>/<subrequest> of DNS labels");
    }
    const std::string base = BaseRequest(request);
    if (CdiSpecFile(claim.uid, base).filename().string().size() > kNameMax) {
      return bad("the CDI spec file name of request " + Shown(base) + " is over 255 bytes");
    }
    if (!IsValidCdiDeviceName(claim.uid + "_" + base)) {
      return bad("\"" + claim.uid + "_" + base + "\" is no CDI device name");
    }
  }
  return Status::Ok();
}

Result<std::map<std::string, std::string>> DeviceMetadataFiles::Write(
    const MetadataClaim& claim, const std::vector<MetadataDevice>& devices) {
  if (dir_.empty() || cdi_dir_.empty()) {
    return Status::Error(ErrorCode::kConfig, "device metadata: no directory configured");
  }
  std::vector<std::string> requests;
  for (const MetadataDevice& d : devices) requests.push_back(d.request);
  if (Status ok = Check(claim, requests); !ok.ok()) return ok;

  // By base request, in the order the devices name them; the file records the request as the
  // allocation result names it (with its subrequest), as upstream's does.
  std::vector<std::pair<std::string, std::string>> order;  // base, request
  std::map<std::string, std::vector<MetadataDevice>> by_base;
  for (const MetadataDevice& d : devices) {
    const std::string base = BaseRequest(d.request);
    if (!by_base.contains(base)) order.emplace_back(base, d.request);
    by_base[base].push_back(d);
  }

  std::vector<std::filesystem::path> written;
  auto undo = [&](const Status& failed) -> Status {
    std::error_code ec;
    for (const std::filesystem::path& p : written) std::filesystem::remove(p, ec);
    for (const auto& [base, request] : order) {
      std::filesystem::remove(MetadataFile(claim.namespace_, claim.name, base).parent_path(), ec);
    }
    std::filesystem::remove(ClaimDir(claim.namespace_, claim.name), ec);  // only when empty
    return Status::Error(failed.code(), "device metadata not written: " + failed.message());
  };

  std::map<std::string, std::string> ids;
  for (const auto& [base, request] : order) {
    const std::filesystem::path file = MetadataFile(claim.namespace_, claim.name, base);
    if (Status made = MakeDirs(dir_, file.parent_path()); !made.ok()) return undo(made);
    Status saved = WriteFileAtomically(
        file, DeviceMetadataStream(driver_, claim, request, by_base[base]), kFileMode);
    if (!saved.ok()) return undo(saved);
    written.push_back(file);
    std::error_code ec;
    std::filesystem::create_directories(cdi_dir_, ec);
    if (ec) {
      return undo(
          Status::Error(ErrorCode::kIo, "create " + cdi_dir_.string() + ": " + ec.message()));
    }
    const std::filesystem::path spec = CdiSpecFile(claim.uid, base);
    if (Status spec_saved = WriteFileAtomically(spec, CdiSpecJson(claim, base), kFileMode);
        !spec_saved.ok()) {
      return undo(spec_saved);
    }
    written.push_back(spec);
    ids[base] = CdiDeviceId(claim.uid, base);
  }
  return ids;
}

bool DeviceMetadataFiles::Present(const MetadataClaim& claim,
                                  const std::vector<std::string>& base_requests) const {
  if (dir_.empty() || cdi_dir_.empty()) return false;
  std::error_code ec;
  for (const std::string& base : base_requests) {
    if (!std::filesystem::is_regular_file(MetadataFile(claim.namespace_, claim.name, base), ec) ||
        !std::filesystem::is_regular_file(CdiSpecFile(claim.uid, base), ec)) {
      return false;
    }
  }
  return true;
}

Status DeviceMetadataFiles::Remove(const std::string& namespace_, const std::string& name,
                                   const std::string& uid, bool keep_dir) const {
  if (dir_.empty() || cdi_dir_.empty()) return Status::Ok();
  std::error_code ec;
  // Names that could not have made files made none; they never reach a path here.
  if (!keep_dir && SafeClaimDir(namespace_, name)) {
    const std::filesystem::path claim_dir = ClaimDir(namespace_, name);
    std::filesystem::remove_all(claim_dir, ec);
    // ENOTDIR: something that is not a directory stands where the metadata directory goes, so no
    // file of the claim can exist under it.
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
      return Status::Error(ErrorCode::kIo, "remove " + claim_dir.string() + ": " + ec.message());
    }
  }
  if (!SafeUid(uid)) return Status::Ok();
  const std::string prefix = driver_ + "_metadata_" + uid + "_";
  std::filesystem::directory_iterator it(cdi_dir_, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return Status::Ok();
    return Status::Error(ErrorCode::kIo, "read " + cdi_dir_.string() + ": " + ec.message());
  }
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string file = it->path().filename().string();
    // A spec, or the temp file of one a crash interrupted.
    if (!file.starts_with(prefix) || !(file.ends_with(".json") || file.ends_with(".json.tmp"))) {
      continue;
    }
    std::error_code removed;
    std::filesystem::remove(it->path(), removed);
    if (removed && removed != std::errc::no_such_file_or_directory) {
      return Status::Error(ErrorCode::kIo,
                           "remove " + it->path().string() + ": " + removed.message());
    }
  }
  if (ec) return Status::Error(ErrorCode::kIo, "read " + cdi_dir_.string() + ": " + ec.message());
  return Status::Ok();
}

std::string DeviceMetadataFiles::CdiDeviceId(const std::string& uid,
                                             const std::string& base_request) const {
  return deviceplugin::CdiDeviceId(CdiKind(), uid + "_" + base_request);
}

bool DeviceMetadataFiles::IsMetadataCdiId(const std::string& cdi_device_id) const {
  return cdi_device_id.starts_with(CdiKind() + "=");
}

std::filesystem::path DeviceMetadataFiles::ClaimDir(const std::string& namespace_,
                                                    const std::string& name) const {
  return dir_ / (namespace_ + "_" + name);
}

std::filesystem::path DeviceMetadataFiles::MetadataFile(const std::string& namespace_,
                                                        const std::string& name,
                                                        const std::string& base_request) const {
  return ClaimDir(namespace_, name) / base_request / "metadata.json";
}

std::filesystem::path DeviceMetadataFiles::CdiSpecFile(const std::string& uid,
                                                       const std::string& base_request) const {
  return cdi_dir_ / (driver_ + "_metadata_" + uid + "_" + base_request + ".json");
}

std::string DeviceMetadataFiles::ContainerPath(const MetadataClaim& claim,
                                               const std::string& base_request) const {
  const bool from_template = claim.pod_claim_name && !claim.pod_claim_name->empty();
  return std::string(kMetadataContainerDir) + "/" +
         std::string(from_template ? kMetadataTemplatesSubDir : kMetadataClaimsSubDir) + "/" +
         (from_template ? *claim.pod_claim_name : claim.name) + "/" + base_request + "/" + driver_ +
         "-metadata.json";
}

std::string DeviceMetadataFiles::CdiSpecJson(const MetadataClaim& claim,
                                             const std::string& base_request) const {
  ordered_json mount = {
      {"hostPath", MetadataFile(claim.namespace_, claim.name, base_request).string()},
      {"containerPath", ContainerPath(claim, base_request)},
      {"options", ordered_json::array({"ro", "bind"})}};
  ordered_json spec = {
      {"cdiVersion", kCdiVersion},
      {"kind", CdiKind()},
      {"devices",
       ordered_json::array({{{"name", claim.uid + "_" + base_request},
                             {"containerEdits", {{"mounts", ordered_json::array({mount})}}}}})}};
  return spec.dump(2) + "\n";
}

}  // namespace kvgpu::deviceplugin::dra
