#include "deviceplugin/dra/device_name.h"

#include <set>

namespace kvgpu::deviceplugin::dra {

std::string DraNameComponent(std::string_view part) {
  std::string out;
  out.reserve(part.size());
  for (char c : part) {
    if (c >= 'a' && c <= 'z') {
      out += c;
    } else if (c >= 'A' && c <= 'Z') {
      out += static_cast<char>(c - 'A' + 'a');
    } else if (c >= '0' && c <= '9') {
      out += c;
    } else {
      out += '-';
    }
  }
  return out;
}

std::optional<std::string> DraDeviceName(const DeviceKey& key) {
  if (key.parent.empty() || key.type_id.empty()) return std::nullopt;
  std::string name = DraNameComponent(key.parent) + "-" + DraNameComponent(key.type_id) + "-" +
                     std::to_string(key.slot);
  if (name.size() > kMaxDraDeviceNameLength || name.front() == '-') return std::nullopt;
  return name;
}

std::map<std::string, DeviceKey> UniqueDraNames(const std::vector<DeviceKey>& keys,
                                                std::vector<std::string>* collisions) {
  std::map<std::string, DeviceKey> names;
  std::set<std::string> shared;
  for (const DeviceKey& key : keys) {
    std::optional<std::string> name = DraDeviceName(key);
    if (!name) continue;
    auto [it, inserted] = names.emplace(*name, key);
    if (!inserted && it->second != key) shared.insert(*name);
  }
  for (const std::string& name : shared) {
    names.erase(name);
    if (collisions) collisions->push_back(name);
  }
  return names;
}

std::string DraPoolName(std::string_view node_name) {
  return std::string(node_name);
}

}  // namespace kvgpu::deviceplugin::dra
