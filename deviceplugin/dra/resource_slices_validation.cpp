// The API server's ResourceSlice checks that the OpenAPI schema does not carry, as
// kubernetes/kubernetes pkg/apis/resource/validation/validation.go applies them with the limits
// of kubernetes/api resource/v1/types.go (v0.35.0, v0.36.0; resource_slices.h names each).
#include <cctype>
#include <map>
#include <set>

#include "deviceplugin/dra/resource_slices.h"

namespace kvgpu::deviceplugin::dra {

namespace {

using nlohmann::json;

Status Bad(const std::string& where, const std::string& what) {
  return Status::Error(ErrorCode::kInvalid, where + ": " + what);
}

// QualifiedName: a C identifier (<= 32), or "<DNS subdomain (<= 63)>/<C identifier (<= 32)>".
bool IsQualifiedName(const std::string& name) {
  const size_t slash = name.find('/');
  const std::string id = slash == std::string::npos ? name : name.substr(slash + 1);
  if (id.size() > kMaxQualifiedNameIdLength || !IsCIdentifier(id)) return false;
  if (slash == std::string::npos) return true;
  const std::string domain = name.substr(0, slash);
  return domain.size() <= kMaxQualifiedNameDomainLength && IsDnsSubdomain(domain);
}

// metav1validation.ValidateLabelName: a qualified name, "[prefix/]name", name <= 63 of
// alphanumerics, '-', '_', '.', starting and ending alphanumeric; prefix a DNS subdomain.
bool IsLabelName(const std::string& name) {
  const size_t slash = name.find('/');
  const std::string id = slash == std::string::npos ? name : name.substr(slash + 1);
  if (id.empty() || id.size() > 63) return false;
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(id.front()) || !alnum(id.back())) return false;
  for (char c : id) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return slash == std::string::npos || IsDnsSubdomain(name.substr(0, slash));
}

Status CheckCounters(const std::string& where, const json& counters) {
  if (!counters.is_object() || counters.empty()) return Bad(where, "counters must be set");
  if (counters.size() > kMaxCountersPerCounterSet) {
    return Bad(where, "more than 32 counters");
  }
  for (const auto& [name, counter] : counters.items()) {
    if (!IsDnsLabel(name)) return Bad(where, "counter name \"" + name + "\" is not a DNS label");
    if (!counter.is_object() || !counter.contains("value")) {
      return Bad(where, "counter " + name + " has no value");
    }
  }
  return {};
}

Status CheckAttribute(const std::string& where, const std::string& name, const json& value) {
  if (!IsQualifiedName(name)) return Bad(where, "attribute name \"" + name + "\" is not valid");
  if (!value.is_object() || value.size() != 1) {
    return Bad(where, "attribute " + name + " must have exactly one value");
  }
  const std::string kind = value.begin().key();
  const json& v = value.begin().value();
  if (kind == "string" || kind == "version") {
    if (!v.is_string()) return Bad(where, "attribute " + name + " is not a string");
    if (v.get<std::string>().size() > kMaxAttributeValueLength) {
      return Bad(where, "attribute " + name + " is longer than 64 characters");
    }
  } else if (kind == "int") {
    if (!v.is_number_integer()) return Bad(where, "attribute " + name + " is not an integer");
  } else if (kind == "bool") {
    if (!v.is_boolean()) return Bad(where, "attribute " + name + " is not a bool");
  } else {
    return Bad(where, "attribute " + name + " has value kind \"" + kind + "\"");
  }
  return {};
}

Status CheckDevice(const std::string& where, const json& device) {
  const std::string name = device.value("name", "");
  if (!IsDnsLabel(name)) return Bad(where, "device name \"" + name + "\" is not a DNS label");
  const std::string here = where + " device " + name;
  const json attributes = device.value("attributes", json::object());
  const json capacity = device.value("capacity", json::object());
  if (attributes.size() + capacity.size() > kMaxAttributesAndCapacities) {
    return Bad(here, "more than 32 attributes and capacities");
  }
  for (const auto& [key, value] : attributes.items()) {
    if (Status s = CheckAttribute(here, key, value); !s.ok()) return s;
  }
  for (const auto& [key, value] : capacity.items()) {
    if (!IsQualifiedName(key)) return Bad(here, "capacity name \"" + key + "\" is not valid");
    if (!value.is_object() || !value.contains("value")) {
      return Bad(here, "capacity " + key + " has no value");
    }
  }
  // validateDeviceBindingParameters (kubernetes/kubernetes pkg/apis/resource/validation,
  // release-1.36): at most 4 of each (BindingConditionsMaxSize, BindingFailureConditionsMaxSize),
  // label names, no duplicates, no overlap, and one kind never without the other.
  const json binding = device.value("bindingConditions", json::array());
  const json failure = device.value("bindingFailureConditions", json::array());
  if (binding.size() > kMaxBindingConditions || failure.size() > kMaxBindingConditions) {
    return Bad(here, "more than 4 binding or binding failure conditions");
  }
  if (binding.empty() != failure.empty()) {
    return Bad(here, "bindingConditions and bindingFailureConditions are required together");
  }
  std::set<std::string> conditions;
  for (const json& list : {binding, failure}) {
    for (const json& condition : list) {
      const std::string type = condition.is_string() ? condition.get<std::string>() : "";
      if (!IsLabelName(type)) return Bad(here, "condition \"" + type + "\" is not a label name");
      if (!conditions.insert(type).second) {
        return Bad(here, "condition " + type + " is listed twice");
      }
    }
  }
  const json consumes = device.value("consumesCounters", json::array());
  if (consumes.size() > kMaxCounterConsumptionsPerDevice) {
    return Bad(here, "more than 2 counter consumptions");
  }
  std::set<std::string> sets;
  for (const json& use : consumes) {
    const std::string set = use.value("counterSet", "");
    if (!IsDnsLabel(set)) return Bad(here, "counterSet \"" + set + "\" is not a DNS label");
    if (!sets.insert(set).second) return Bad(here, "counter set " + set + " consumed twice");
    if (Status s = CheckCounters(here, use.value("counters", json())); !s.ok()) return s;
    if (!use.contains("compatibilityGroups")) continue;
    const json& groups = use["compatibilityGroups"];
    if (!groups.is_array() || groups.size() > kMaxCompatibilityGroups) {
      return Bad(here, "compatibilityGroups of " + set + " is not a list of at most 2");
    }
    std::set<std::string> names;
    for (const json& group : groups) {
      if (!group.is_string() || !IsDnsLabel(group.get<std::string>()) ||
          !names.insert(group.get<std::string>()).second) {
        return Bad(here, "compatibilityGroups of " + set + ": " + group.dump() +
                             " is not a DNS label, or is there twice");
      }
    }
  }
  return {};
}

}  // namespace

Status ValidateSlice(const json& slice) {
  const std::string name = slice.contains("metadata") ? slice["metadata"].value("name", "") : "";
  const std::string where = "ResourceSlice " + name;
  if (slice.value("apiVersion", "") != "resource.k8s.io/v1" ||
      slice.value("kind", "") != "ResourceSlice") {
    return Bad(where, "not a resource.k8s.io/v1 ResourceSlice");
  }
  if (!IsDnsSubdomain(name)) return Bad(where, "name is not a DNS subdomain");
  if (!slice.contains("spec") || !slice["spec"].is_object()) return Bad(where, "no spec");
  const json& spec = slice["spec"];
  if (Status s = ValidateDriverName(spec.value("driver", "")); !s.ok())
    return Bad(where, s.message());
  const json pool = spec.value("pool", json::object());
  const std::string pool_name = pool.value("name", "");
  if (pool_name.empty() || pool_name.size() > kPoolNameMaxLength) {
    return Bad(where, "pool name empty or longer than 253");
  }
  for (size_t start = 0;;) {
    const size_t slash = pool_name.find('/', start);
    if (!IsDnsSubdomain(
            pool_name.substr(start, slash == std::string::npos ? slash : slash - start))) {
      return Bad(where, "pool name \"" + pool_name + "\" is not DNS subdomains joined by '/'");
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (!pool.contains("generation") || !pool["generation"].is_number_integer() ||
      pool["generation"].get<int64_t>() < 0) {
    return Bad(where, "pool generation missing or negative");
  }
  if (!pool.contains("resourceSliceCount") || !pool["resourceSliceCount"].is_number_integer() ||
      pool["resourceSliceCount"].get<int64_t>() <= 0) {
    return Bad(where, "resourceSliceCount must be greater than zero");
  }
  int selections = 0;
  for (const char* field : {"nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection"}) {
    if (spec.contains(field)) ++selections;
  }
  if (selections != 1) {
    return Bad(where, "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection");
  }
  if (spec.contains("nodeName") && !IsDnsSubdomain(spec["nodeName"].get<std::string>())) {
    return Bad(where, "nodeName is not a DNS subdomain");
  }
  const json devices = spec.value("devices", json::array());
  const json sets = spec.value("sharedCounters", json::array());
  if (!devices.empty() && !sets.empty()) {
    return Bad(where, "only one of devices and sharedCounters may be set");
  }
  bool consuming = false;
  for (const json& device : devices) {
    consuming = consuming || device.contains("consumesCounters") || device.contains("taints");
  }
  const size_t most = consuming ? kMaxDevicesPerSliceConsumingCounters : kMaxDevicesPerSlice;
  if (devices.size() > most) {
    return Bad(where,
               std::to_string(devices.size()) + " devices, more than " + std::to_string(most));
  }
  std::set<std::string> device_names;
  for (const json& device : devices) {
    if (Status s = CheckDevice(where, device); !s.ok()) return s;
    if (!device_names.insert(device["name"].get<std::string>()).second) {
      return Bad(where, "device " + device["name"].get<std::string>() + " twice");
    }
  }
  if (sets.size() > kMaxCounterSetsPerSlice) return Bad(where, "more than 8 counter sets");
  std::set<std::string> set_names;
  for (const json& set : sets) {
    const std::string set_name = set.value("name", "");
    if (!IsDnsLabel(set_name)) {
      return Bad(where, "counter set name \"" + set_name + "\" is not a DNS label");
    }
    if (!set_names.insert(set_name).second) return Bad(where, "counter set " + set_name + " twice");
    if (Status s = CheckCounters(where + " counter set " + set_name, set.value("counters", json()));
        !s.ok()) {
      return s;
    }
  }
  return {};
}

Status ValidatePool(const std::vector<json>& slices) {
  if (slices.empty()) return {};
  const json& first = slices.front()["spec"];
  std::set<std::string> slice_names;
  std::set<std::string> device_names;
  std::map<std::string, std::map<std::string, json>> sets;  // set -> counter -> value
  for (const json& slice : slices) {
    if (Status s = ValidateSlice(slice); !s.ok()) return s;
    const json& spec = slice["spec"];
    const std::string where = "ResourceSlice " + slice["metadata"]["name"].get<std::string>();
    if (!slice_names.insert(slice["metadata"]["name"].get<std::string>()).second) {
      return Bad(where, "name used twice");
    }
    if (spec["driver"] != first["driver"] || spec["pool"]["name"] != first["pool"]["name"] ||
        spec["pool"]["generation"] != first["pool"]["generation"]) {
      return Bad(where, "driver, pool or generation differs from the pool's other slices");
    }
    if (spec["pool"]["resourceSliceCount"].get<int64_t>() != static_cast<int64_t>(slices.size())) {
      return Bad(where, "resourceSliceCount is not the number of the pool's slices");
    }
    for (const json& device : spec.value("devices", json::array())) {
      if (!device_names.insert(device["name"].get<std::string>()).second) {
        return Bad(where, "device " + device["name"].get<std::string>() + " twice in the pool");
      }
    }
    for (const json& set : spec.value("sharedCounters", json::array())) {
      const std::string name = set["name"].get<std::string>();
      if (sets.contains(name)) return Bad(where, "counter set " + name + " twice in the pool");
      for (const auto& [counter, value] : set["counters"].items())
        sets[name][counter] = value["value"];
    }
  }
  for (const json& slice : slices) {
    for (const json& device : slice["spec"].value("devices", json::array())) {
      const std::string where = "device " + device["name"].get<std::string>();
      for (const json& use : device.value("consumesCounters", json::array())) {
        auto set = sets.find(use["counterSet"].get<std::string>());
        if (set == sets.end()) return Bad(where, "consumes an undefined counter set");
        for (const auto& [counter, value] : use["counters"].items()) {
          auto total = set->second.find(counter);
          if (total == set->second.end())
            return Bad(where, "consumes undefined counter " + counter);
        }
      }
    }
  }
  return {};
}

}  // namespace kvgpu::deviceplugin::dra
