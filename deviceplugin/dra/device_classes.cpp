#include "deviceplugin/dra/device_classes.h"

#include <map>
#include <set>

#include "deviceplugin/dra/resource_slices.h"

namespace kvgpu::deviceplugin::dra {

namespace {

using nlohmann::json;

// A CEL string literal: double quotes, with backslash and quote escaped.
std::string CelString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

json DeviceClass(const std::string& name, const std::string& expression) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", name}}},
          {"spec", {{"selectors", json::array({{{"cel", {{"expression", expression}}}}})}}}};
}

std::string DriverIs(const std::string& driver) {
  return "device.driver == " + CelString(driver);
}

}  // namespace

json DriverDeviceClass(const std::string& driver) {
  return DeviceClass(driver, DriverIs(driver));
}

Result<std::vector<json>> TypeDeviceClasses(const std::string& driver, const NamingOptions& naming,
                                            const std::vector<mdev::VgpuType>& types) {
  if (Status s = ValidateDriverName(driver); !s.ok()) return s;
  std::map<std::string, std::set<std::string>> ids_by_resource;
  for (const mdev::VgpuType& type : types) {
    Result<std::string> resource = ResourceNameFor(naming, type);
    if (!resource.ok()) return resource.status();
    ids_by_resource[*resource].insert(type.id);
  }
  std::vector<json> classes;
  for (const auto& [resource, ids] : ids_by_resource) {
    const std::string name = resource.substr(resource.find('/') + 1) + "." + driver;
    if (!IsDnsSubdomain(name)) {
      return Status::Error(ErrorCode::kInvalid,
                           "DeviceClass name \"" + name + "\" is not a DNS subdomain");
    }
    // The driver test comes first: CEL's && is false when either side is, so other drivers'
    // devices, which lack the attribute, never reach the lookup.
    std::string type_test;
    const std::string attribute = "device.attributes[" + CelString(driver) + "].type";
    if (ids.size() == 1) {
      type_test = attribute + " == " + CelString(*ids.begin());
    } else {
      std::string list;
      for (const std::string& id : ids) list += (list.empty() ? "" : ", ") + CelString(id);
      type_test = attribute + " in [" + list + "]";
    }
    json device_class = DeviceClass(name, DriverIs(driver) + " && " + type_test);
    device_class["spec"]["extendedResourceName"] = resource;
    classes.push_back(std::move(device_class));
  }
  return classes;
}

}  // namespace kvgpu::deviceplugin::dra
