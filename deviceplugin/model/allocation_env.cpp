#include "deviceplugin/model/allocation_env.h"

#include <cctype>

namespace kvgpu::deviceplugin {
namespace {

constexpr const char* kIds = "DEVICE_IDS";
constexpr const char* kUuids = "UUIDS";
constexpr const char* kTypes = "TYPES";

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(',', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

}  // namespace

std::string EnvPrefix(const std::string& resource) {
  std::string part = resource.substr(resource.find('/') + 1);
  std::string out = "KVGPU_";
  for (char c : part) {
    out += std::isalnum(static_cast<unsigned char>(c))
               ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
               : '_';
  }
  return out + "_";
}

void RenderAllocationEnv(const std::string& resource, const EnvVgpus& vgpus,
                         std::map<std::string, std::string>& envs) {
  std::string prefix = EnvPrefix(resource);
  envs[prefix + kIds] = Join(vgpus.device_ids);
  envs[prefix + kUuids] = Join(vgpus.vgpu_ids);
  envs[prefix + kTypes] = Join(vgpus.types);
}

std::vector<ParsedEnv> ParseAllocationEnv(const std::map<std::string, std::string>& envs,
                                          std::vector<std::string>& notes) {
  std::vector<ParsedEnv> out;
  const std::string ids_suffix = std::string("_") + kIds;
  for (const auto& [name, ids_text] : envs) {
    if (name.rfind("KVGPU_", 0) != 0 || name.size() < ids_suffix.size() ||
        name.compare(name.size() - ids_suffix.size(), ids_suffix.size(), ids_suffix) != 0) {
      continue;
    }
    ParsedEnv parsed;
    parsed.prefix = name.substr(0, name.size() - std::string(kIds).size());
    auto uuids = envs.find(parsed.prefix + kUuids);
    if (uuids == envs.end()) continue;
    parsed.vgpus.device_ids = Split(ids_text);
    parsed.vgpus.vgpu_ids = Split(uuids->second);
    if (auto types = envs.find(parsed.prefix + kTypes); types != envs.end()) {
      parsed.vgpus.types = Split(types->second);
    }
    if (parsed.vgpus.device_ids.size() != parsed.vgpus.vgpu_ids.size()) {
      notes.push_back(name + " and " + kUuids + " differ in length");
      continue;
    }
    out.push_back(std::move(parsed));
  }
  return out;
}

}  // namespace kvgpu::deviceplugin
