#include "fakes/dra_allocator/pools.h"

#include <algorithm>
#include <set>
#include <utility>

#include "fakes/dra_allocator/quantity.h"

namespace kvgpu::testing::dra {

namespace {

using nlohmann::json;

Result<std::map<std::string, int64_t>> Counters(const json& counters, const std::string& where) {
  std::map<std::string, int64_t> out;
  if (!counters.is_object()) {
    return Status::Error(ErrorCode::kInvalid, where + ": counters is not an object");
  }
  for (const auto& [name, counter] : counters.items()) {
    if (!counter.is_object() || !counter.contains("value") || !counter["value"].is_string()) {
      return Status::Error(ErrorCode::kInvalid, where + ": counter " + name + " has no value");
    }
    auto value = ParseQuantity(counter["value"].get<std::string>());
    if (!value.ok())
      return Status::Error(ErrorCode::kInvalid, where + ": " + value.status().ToString());
    out[name] = *value;
  }
  return out;
}

std::vector<std::string> Strings(const json& device, const char* field) {
  std::vector<std::string> out;
  for (const json& s : device.value(field, json::array())) {
    if (s.is_string()) out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

Result<std::vector<Pool>> GatherPools(const std::vector<json>& slices, const std::string& node) {
  // By pool: the slices of the highest generation, in name order (the order a lister gives).
  std::vector<const json*> sorted;
  for (const json& slice : slices) sorted.push_back(&slice);
  std::sort(sorted.begin(), sorted.end(), [](const json* a, const json* b) {
    return a->value("/metadata/name"_json_pointer, std::string()) <
           b->value("/metadata/name"_json_pointer, std::string());
  });
  std::map<std::pair<std::string, std::string>, std::vector<const json*>> by_pool;
  for (const json* slice : sorted) {
    const json& spec = slice->value("spec", json::object());
    const std::string where = "slice " + slice->value("/metadata/name"_json_pointer, std::string());
    if (!spec.contains("driver") || !spec.contains("pool")) {
      return Status::Error(ErrorCode::kInvalid, where + ": no driver or pool");
    }
    if (spec.contains("nodeSelector") || spec.value("perDeviceNodeSelection", false)) {
      return Status::Error(ErrorCode::kInvalid,
                           where + ": node selectors are not modelled by this allocator");
    }
    auto& pool =
        by_pool[{spec["driver"].get<std::string>(), spec["pool"]["name"].get<std::string>()}];
    const int64_t generation = spec["pool"].value("generation", int64_t{0});
    if (!pool.empty()) {
      const int64_t current = pool[0]->at("spec").at("pool").value("generation", int64_t{0});
      if (generation < current) continue;  // out of date
      if (generation > current) pool.clear();
    }
    pool.push_back(slice);
  }

  std::vector<Pool> out;
  for (const auto& [id, members] : by_pool) {
    Pool pool;
    pool.driver = id.first;
    pool.name = id.second;
    const json& first = members[0]->at("spec").at("pool");
    pool.generation = first.value("generation", int64_t{0});
    pool.complete =
        static_cast<int64_t>(members.size()) == first.value("resourceSliceCount", int64_t{0});
    bool targets_node = false;
    std::set<std::string> names;
    for (const json* slice : members) {
      const json& spec = slice->at("spec");
      const std::string where =
          "slice " + slice->value("/metadata/name"_json_pointer, std::string());
      for (const json& set : spec.value("sharedCounters", json::array())) {
        auto counters = Counters(set.value("counters", json::object()), where);
        if (!counters.ok()) return counters.status();
        pool.counter_sets[set.value("name", std::string())] = *counters;
      }
      const bool for_node =
          spec.value("nodeName", std::string()) == node || spec.value("allNodes", false);
      if (!for_node) continue;
      targets_node = true;
      for (const json& device : spec.value("devices", json::array())) {
        PoolDevice d;
        d.name = device.value("name", std::string());
        d.device = device;
        if (!names.insert(d.name).second && !pool.invalid) {
          pool.invalid = true;
          pool.invalid_reason = "duplicate device name " + d.name;
        }
        for (const json& c : device.value("consumesCounters", json::array())) {
          auto counters =
              Counters(c.value("counters", json::object()), where + " device " + d.name);
          if (!counters.ok()) return counters.status();
          d.consumes.push_back(
              {c.value("counterSet", std::string()), *counters, Strings(c, "compatibilityGroups")});
        }
        d.binding_conditions = Strings(device, "bindingConditions");
        d.binding_failure_conditions = Strings(device, "bindingFailureConditions");
        pool.devices.push_back(std::move(d));
      }
    }
    if (targets_node) out.push_back(std::move(pool));
  }
  return out;
}

}  // namespace kvgpu::testing::dra
