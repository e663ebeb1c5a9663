#include "fakes/dra_allocator/allocator.h"

#include <algorithm>
#include <utility>

namespace kvgpu::testing::dra {

namespace {

using nlohmann::json;

constexpr const char* kImplicitPrefix = "deviceclass.resource.kubernetes.io/";

Status NotModelled(const std::string& what) {
  return Status::Error(ErrorCode::kInvalid, "not modelled by the allocator model: " + what);
}

Result<std::vector<CelSelector>> Selectors(const json& list, const std::string& where) {
  std::vector<CelSelector> out;
  if (!list.is_array()) return Status::Error(ErrorCode::kInvalid, where + ": selectors not a list");
  for (const json& selector : list) {
    if (!selector.contains("cel") || !selector["cel"].contains("expression") ||
        !selector["cel"]["expression"].is_string()) {
      return Status::Error(ErrorCode::kInvalid,
                           where + ": a selector without cel.expression (unknown selector type)");
    }
    auto parsed = CelSelector::Parse(selector["cel"]["expression"].get<std::string>());
    if (!parsed.ok())
      return Status::Error(ErrorCode::kInvalid, where + ": " + parsed.status().ToString());
    out.push_back(std::move(*parsed));
  }
  return out;
}

struct Need {
  std::string request;
  const DeviceClass* device_class = nullptr;
  std::vector<CelSelector> selectors;
};

struct Candidate {
  size_t pool;
  size_t device;
};

using CounterUse = std::map<std::string, std::map<std::string, int64_t>>;  // set -> counter -> n

// KEP-5963's rolling intersection on one counter set.
struct Rolling {
  bool any = false;        // a device is allocated on the set
  bool ungrouped = false;  // ... and it declared no group
  std::set<std::string> groups;

  bool Admits(const std::vector<std::string>& declared) const {
    if (!any) return true;
    if (declared.empty() || ungrouped) return declared.empty() && ungrouped;
    return std::any_of(declared.begin(), declared.end(),
                       [&](const std::string& g) { return groups.contains(g); });
  }
  void Fold(const std::vector<std::string>& declared) {
    const std::set<std::string> mine(declared.begin(), declared.end());
    if (!any) {
      any = true;
      ungrouped = mine.empty();
      groups = mine;
      return;
    }
    std::erase_if(groups, [&](const std::string& g) { return !mine.contains(g); });
  }
};
using RollingUse = std::map<std::string, Rolling>;  // counter set -> its intersection

class Search {
 public:
  Search(const std::vector<Pool>& pools, const std::set<DeviceId>& in_use, std::vector<Need> needs,
         std::vector<std::vector<Candidate>> candidates, const GroupSnapshots* groups)
      : pools_(pools),
        in_use_(in_use),
        needs_(std::move(needs)),
        candidates_(std::move(candidates)),
        consumed_(pools.size()),
        available_(pools.size()),
        enforce_groups_(groups != nullptr),
        rolling_(pools.size()) {
    // The intersections of what is allocated, from the claims' snapshots, keyed by counter set:
    // an allocated device counts there whether or not the slice of now still lists it (a driver
    // re-publishes, or narrows its devices away). A counter set the snapshot does not name, of a
    // device the slice lists, was drawn from with no group declared.
    for (size_t p = 0; enforce_groups_ && p < pools_.size(); ++p) {
      for (const auto& [id, sets] : *groups) {
        if (id.driver != pools_[p].driver || id.pool != pools_[p].name || !in_use_.count(id)) {
          continue;
        }
        for (const auto& [set, declared] : sets) rolling_[p][set].Fold(declared);
      }
      for (const PoolDevice& device : pools_[p].devices) {
        const DeviceId id{pools_[p].driver, pools_[p].name, device.name};
        if (!in_use_.count(id)) continue;
        const auto snapshot = groups->find(id);
        for (const CounterConsumption& c : device.consumes) {
          if (snapshot != groups->end() && snapshot->second.contains(c.counter_set)) continue;
          rolling_[p][c.counter_set].Fold({});
        }
      }
    }
    // What each pool offers less what its allocated devices consume (checkAvailableCounters).
    for (size_t p = 0; p < pools_.size(); ++p) {
      available_[p] = pools_[p].counter_sets;
      for (const PoolDevice& device : pools_[p].devices) {
        if (!in_use_.count({pools_[p].driver, pools_[p].name, device.name})) continue;
        for (const CounterConsumption& c : device.consumes) {
          auto set = available_[p].find(c.counter_set);
          if (set == available_[p].end()) continue;
          for (const auto& [name, value] : c.counters) {
            auto counter = set->second.find(name);
            if (counter != set->second.end()) counter->second -= value;
          }
        }
      }
    }
  }

  Result<bool> Run() { return Step(0, 0); }
  const std::vector<DeviceResult>& results() const { return results_; }

 private:
  Result<bool> Step(size_t slot, size_t start) {
    if (slot == needs_.size()) return true;
    if (++steps_ > kMaxAllocateSteps) {
      return Status::Error(ErrorCode::kTimeout, "allocation search exceeded its step bound");
    }
    const bool same_request = slot > 0 && needs_[slot - 1].request == needs_[slot].request;
    const std::vector<Candidate>& list = candidates_[slot];
    for (size_t i = same_request ? start : 0; i < list.size(); ++i) {
      const Pool& pool = pools_[list[i].pool];
      const PoolDevice& device = pool.devices[list[i].device];
      DeviceId id{pool.driver, pool.name, device.name};
      if (in_use_.count(id) || picked_.count(id)) continue;
      if (!GroupsAdmit(list[i].pool, device)) continue;
      if (!device.consumes.empty() && !TakeCounters(list[i].pool, device)) continue;
      picked_.insert(id);
      const RollingUse before = enforce_groups_ ? rolling_[list[i].pool] : RollingUse{};
      std::map<std::string, std::vector<std::string>> snapshot;
      for (const CounterConsumption& c : device.consumes) {
        if (!enforce_groups_) break;
        rolling_[list[i].pool][c.counter_set].Fold(c.compatibility_groups);
        if (!c.compatibility_groups.empty()) snapshot[c.counter_set] = c.compatibility_groups;
      }
      results_.push_back({needs_[slot].request, id, device.binding_conditions,
                          device.binding_failure_conditions, snapshot});
      auto done = Step(slot + 1, i + 1);
      if (!done.ok()) return done;
      if (*done) return true;
      results_.pop_back();
      picked_.erase(id);
      if (enforce_groups_) rolling_[list[i].pool] = before;
      if (!device.consumes.empty()) GiveCounters(list[i].pool, device);
    }
    return false;
  }

  // On every counter set it consumes, admitted by the intersection there (each on its own).
  bool GroupsAdmit(size_t p, const PoolDevice& device) const {
    if (!enforce_groups_) return true;
    for (const CounterConsumption& c : device.consumes) {
      auto it = rolling_[p].find(c.counter_set);
      if (it != rolling_[p].end() && !it->second.Admits(c.compatibility_groups)) return false;
    }
    return true;
  }

  bool TakeCounters(size_t p, const PoolDevice& device) {
    for (const CounterConsumption& c : device.consumes) {
      for (const auto& [name, value] : c.counters) consumed_[p][c.counter_set][name] += value;
    }
    // Every counter of the pool, as upstream checks them all after adding the device.
    for (const auto& [set, counters] : available_[p]) {
      for (const auto& [name, value] : counters) {
        if (value < consumed_[p][set][name]) {
          GiveCounters(p, device);
          return false;
        }
      }
    }
    return true;
  }
  void GiveCounters(size_t p, const PoolDevice& device) {
    for (const CounterConsumption& c : device.consumes) {
      for (const auto& [name, value] : c.counters) consumed_[p][c.counter_set][name] -= value;
    }
  }

  const std::vector<Pool>& pools_;
  const std::set<DeviceId>& in_use_;
  std::vector<Need> needs_;
  std::vector<std::vector<Candidate>> candidates_;
  std::vector<CounterUse> consumed_;
  std::vector<CounterUse> available_;
  bool enforce_groups_;
  std::vector<RollingUse> rolling_;  // per pool
  std::set<DeviceId> picked_;
  std::vector<DeviceResult> results_;
  int steps_ = 0;
};

}  // namespace

Result<DeviceClass> ParseDeviceClass(const json& object) {
  if (object.value("kind", std::string()) != "DeviceClass") {
    return Status::Error(ErrorCode::kInvalid, "not a DeviceClass");
  }
  DeviceClass out;
  out.name = object.value("/metadata/name"_json_pointer, std::string());
  const json spec = object.value("spec", json::object());
  if (spec.contains("config")) return NotModelled("class " + out.name + ": config");
  auto selectors = Selectors(spec.value("selectors", json::array()), "class " + out.name);
  if (!selectors.ok()) return selectors.status();
  out.selectors = std::move(*selectors);
  out.extended_resource_name = spec.value("extendedResourceName", std::string());
  return out;
}

const DeviceClass* ClassForExtendedResource(const std::vector<DeviceClass>& classes,
                                            const std::string& resource) {
  for (const DeviceClass& c : classes) {
    if (!c.extended_resource_name.empty() && c.extended_resource_name == resource) return &c;
  }
  const std::string prefix = kImplicitPrefix;
  if (resource.rfind(prefix, 0) == 0) {
    for (const DeviceClass& c : classes) {
      if (c.name == resource.substr(prefix.size())) return &c;
    }
  }
  return nullptr;
}

std::set<DeviceId> AllocatedDevices(const std::vector<json>& claims) {
  std::set<DeviceId> out;
  for (const json& claim : claims) {
    const json results =
        claim.value("/status/allocation/devices/results"_json_pointer, json::array());
    for (const json& r : results) {
      out.insert({r.value("driver", std::string()), r.value("pool", std::string()),
                  r.value("device", std::string())});
    }
  }
  return out;
}

GroupSnapshots AllocatedGroups(const std::vector<json>& claims) {
  GroupSnapshots out;
  for (const json& claim : claims) {
    const json results =
        claim.value("/status/allocation/devices/results"_json_pointer, json::array());
    for (const json& r : results) {
      const json groups = r.value("compatibilityGroups", json::object());
      if (!groups.is_object() || groups.empty()) continue;
      auto& sets = out[{r.value("driver", std::string()), r.value("pool", std::string()),
                        r.value("device", std::string())}];
      for (const auto& [set, names] : groups.items()) {
        if (names.is_array()) sets[set] = names.get<std::vector<std::string>>();
      }
    }
  }
  return out;
}

Result<std::optional<std::vector<DeviceResult>>> Allocate(const json& claim,
                                                          const std::vector<DeviceClass>& classes,
                                                          const std::vector<Pool>& pools,
                                                          const std::set<DeviceId>& in_use,
                                                          const GroupSnapshots* groups) {
  const std::string who = "claim " +
                          claim.value("/metadata/namespace"_json_pointer, std::string()) + "/" +
                          claim.value("/metadata/name"_json_pointer, std::string());
  const json devices = claim.value("/spec/devices"_json_pointer, json::object());
  if (!devices.value("constraints", json::array()).empty())
    return NotModelled(who + ": constraints");
  std::vector<Need> needs;
  for (const json& request : devices.value("requests", json::array())) {
    const std::string name = request.value("name", std::string());
    if (request.contains("firstAvailable")) return NotModelled(who + ": firstAvailable");
    if (!request.contains("exactly"))
      return NotModelled(who + ": request " + name + " without exactly");
    const json& exactly = request["exactly"];
    for (const char* field : {"adminAccess", "tolerations", "capacity"}) {
      if (exactly.contains(field)) return NotModelled(who + ": request " + name + " " + field);
    }
    if (exactly.value("allocationMode", std::string("ExactCount")) != "ExactCount") {
      return NotModelled(who + ": allocationMode " +
                         exactly.value("allocationMode", std::string()));
    }
    const std::string class_name = exactly.value("deviceClassName", std::string());
    const DeviceClass* device_class = nullptr;
    for (const DeviceClass& c : classes) {
      if (c.name == class_name) device_class = &c;
    }
    if (device_class == nullptr) {
      return Status::Error(ErrorCode::kGone, who + ": device class " + class_name + " not found");
    }
    auto selectors = Selectors(exactly.value("selectors", json::array()), who + " request " + name);
    if (!selectors.ok()) return selectors.status();
    const int64_t count = exactly.value("count", int64_t{1});
    if (count < 1 || count > 32) {  // AllocationResultsMaxSize
      return Status::Error(ErrorCode::kInvalid, who + ": count " + std::to_string(count));
    }
    for (int64_t i = 0; i < count; ++i) needs.push_back({name, device_class, *selectors});
  }
  if (needs.empty()) return Status::Error(ErrorCode::kInvalid, who + ": no requests");

  // Selectable devices per slot, from complete and valid pools only.
  std::vector<std::vector<Candidate>> candidates(needs.size());
  for (size_t slot = 0; slot < needs.size(); ++slot) {
    if (slot > 0 && needs[slot].request == needs[slot - 1].request) {
      candidates[slot] = candidates[slot - 1];
      continue;
    }
    for (size_t p = 0; p < pools.size(); ++p) {
      if (!pools[p].complete || pools[p].invalid) continue;
      for (size_t d = 0; d < pools[p].devices.size(); ++d) {
        bool selectable = true;
        const std::vector<CelSelector>* lists[] = {&needs[slot].device_class->selectors,
                                                   &needs[slot].selectors};
        for (const std::vector<CelSelector>* list : lists) {
          for (const CelSelector& s : *list) {
            auto match = s.Matches(pools[p].driver, pools[p].devices[d].device);
            if (!match.ok()) return match.status();
            if (!*match) selectable = false;
            if (!selectable) break;
          }
          if (!selectable) break;
        }
        if (selectable) candidates[slot].push_back({p, d});
      }
    }
  }
  Search search(pools, in_use, std::move(needs), std::move(candidates), groups);
  auto done = search.Run();
  if (!done.ok()) return done.status();
  if (!*done) return std::optional<std::vector<DeviceResult>>();
  return std::optional<std::vector<DeviceResult>>(search.results());
}

json AllocationJson(const std::vector<DeviceResult>& results, const std::string& node,
                    const std::string& timestamp) {
  json list = json::array();
  for (const DeviceResult& r : results) {
    json entry = {{"request", r.request},
                  {"driver", r.id.driver},
                  {"pool", r.id.pool},
                  {"device", r.id.device}};
    if (!r.binding_conditions.empty()) entry["bindingConditions"] = r.binding_conditions;
    if (!r.binding_failure_conditions.empty()) {
      entry["bindingFailureConditions"] = r.binding_failure_conditions;
    }
    if (!r.compatibility_groups.empty()) entry["compatibilityGroups"] = r.compatibility_groups;
    list.push_back(std::move(entry));
  }
  return {{"devices", {{"results", list}}},
          {"nodeSelector",
           {{"nodeSelectorTerms",
             json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                         {"operator", "In"},
                                                         {"values", json::array({node})}}})}}})}}},
          {"allocationTimestamp", timestamp}};
}

}  // namespace kvgpu::testing::dra
