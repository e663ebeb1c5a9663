#include "deviceplugin/model/cdi.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/ascii.h"
#include "deviceplugin/model/state_store.h"

namespace kvgpu::deviceplugin {
namespace {

// Spec version 0.5.0 has everything used here (deviceNodes, env) and is read by every CDI
// implementation containerd and CRI-O ship.
constexpr const char* kCdiVersion = "0.5.0";

}  // namespace

std::string CdiDeviceId(std::string_view kind, std::string_view device) {
  std::string id(kind);
  id += '=';
  id += device;
  return id;
}

Status ValidateCdiKind(std::string_view kind) {
  size_t slash = kind.find('/');
  auto bad = [&](const std::string& why) {
    return Status::Error(ErrorCode::kInvalid,
                         "\"" + std::string(kind) + "\" cannot be a CDI kind: " + why);
  };
  if (slash == std::string_view::npos) return bad("no '/'");
  std::string_view vendor = kind.substr(0, slash);
  std::string_view cls = kind.substr(slash + 1);
  if (vendor.empty() || !IsAsciiAlpha(vendor.front()) || !IsAsciiAlnum(vendor.back()) ||
      !std::all_of(vendor.begin(), vendor.end(),
                   [](char c) { return IsAsciiAlnum(c) || c == '-' || c == '_' || c == '.'; })) {
    return bad("the vendor part allows letters, digits, '-', '_', '.'");
  }
  if (cls.empty() || !IsAsciiAlpha(cls.front()) || !IsAsciiAlnum(cls.back()) ||
      !std::all_of(cls.begin(), cls.end(),
                   [](char c) { return IsAsciiAlnum(c) || c == '-' || c == '_'; })) {
    return bad("the class part allows letters, digits, '-', '_' (no '.')");
  }
  return Status::Ok();
}

bool IsValidCdiDeviceName(std::string_view name) {
  return !name.empty() && IsAsciiAlnum(name.front()) &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return IsAsciiAlnum(c) || c == '_' || c == '-' || c == '.' || c == ':';
         });
}

std::string CdiSpecJson(std::string_view kind, const std::vector<CdiDevice>& devices) {
  using nlohmann::json;
  json list = json::array();
  for (const CdiDevice& d : devices) {
    list.push_back({{"name", d.name},
                    {"containerEdits",
                     {{"deviceNodes", json::array({{{"path", d.vfio_device}}})},
                      {"env", json::array({"KVGPU_VGPU_ID=" + d.vgpu_id})}}}});
  }
  json spec = {{"cdiVersion", kCdiVersion},
               {"kind", std::string(kind)},
               {"devices", std::move(list)},
               // The container (or Kata VM) needs the VFIO container device for any group.
               {"containerEdits", {{"deviceNodes", json::array({{{"path", "/dev/vfio/vfio"}}})}}}};
  return spec.dump(2) + "\n";
}

std::filesystem::path CdiSpecPath(const std::filesystem::path& dir, std::string_view kind) {
  std::string file = "kata-vgpu_" + std::string(kind) + ".json";
  std::replace(file.begin(), file.end(), '/', '_');
  return dir / file;
}

Status WriteCdiSpec(const std::filesystem::path& dir, std::string_view kind,
                    const std::vector<CdiDevice>& devices) {
  std::filesystem::path path = CdiSpecPath(dir, kind);
  std::error_code ec;
  if (devices.empty()) {
    std::filesystem::remove(path, ec);
    if (ec) return Status::Error(ErrorCode::kIo, "remove " + path.string() + ": " + ec.message());
    return Status::Ok();
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error(ErrorCode::kIo, "create " + dir.string() + ": " + ec.message());
  return WriteFileAtomically(path, CdiSpecJson(kind, devices));
}

}  // namespace kvgpu::deviceplugin
