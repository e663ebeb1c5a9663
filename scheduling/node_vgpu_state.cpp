#include "scheduling/node_vgpu_state.h"

#include <limits>
#include <nlohmann/json.hpp>

namespace kvgpu::scheduling {

using nlohmann::json;

bool NodeVgpuState::SameContent(const NodeVgpuState& other) const {
  return version == other.version && node == other.node && policy == other.policy &&
         gpus == other.gpus && holders == other.holders && unattributed == other.unattributed;
}

namespace {

// Version 1 knows only the per-type lock: every GPU with a rule is written as strict (an older
// extender reading it is stricter than the GPU, never looser), one with none as oneType false.
json RenderGpu(const GpuSlots& gpu, int version) {
  json resources = json::object();
  for (const auto& [name, slots] : gpu.resources) {
    json r = {{"type", slots.type_id}, {"used", slots.used}, {"free", slots.free}};
    if (version >= 2) r["framebufferMib"] = slots.framebuffer_mib;
    if (version >= 3 && !slots.placements.ids.empty()) {
      r["placementSize"] = slots.placements.size;
      r["placementIds"] = slots.placements.ids;
    }
    if (version >= 3 && slots.gi_profile) {
      r["gpuInstanceProfileId"] = *slots.gi_profile;
      r["maxPerGpuInstance"] = slots.max_per_gi;
    }
    resources[name] = std::move(r);
  }
  json out = {{"id", gpu.id},
              {"oneType", gpu.occupancy != Occupancy::kUnknown},
              {"lockedType", gpu.locked_type},
              {"resources", std::move(resources)}};
  if (version >= 2) {
    out["occupancy"] = OccupancyName(gpu.occupancy);
    out["lock"] = gpu.lock;
  }
  if (version >= 3 && gpu.occupancy == Occupancy::kMixedSize) {
    json used = json::array();
    for (const SlotRange& r : gpu.used_slots)
      used.push_back({{"start", r.start}, {"size", r.size}});
    out["usedSlots"] = std::move(used);
  }
  if (version >= 3 && gpu.occupancy == Occupancy::kMig) {
    json instances = json::array();
    for (const GpuInstanceSlots& gi : gpu.gpu_instances) {
      instances.push_back({{"id", gi.id},
                           {"profileId", gi.profile},
                           {"vgpuFramebufferMib", gi.vgpu_framebuffer_mib},
                           {"vgpus", gi.vgpus}});
    }
    out["gpuInstances"] = std::move(instances);
  }
  return out;
}

}  // namespace

std::string RenderNodeState(const NodeVgpuState& state) {
  json gpus = json::array();
  for (const GpuSlots& gpu : state.gpus) gpus.push_back(RenderGpu(gpu, state.version));
  json doc = {{"version", state.version},           {"node", state.node},
              {"generation", state.generation},     {"publishedUnixMs", state.published_unix_ms},
              {"policy", PolicyName(state.policy)}, {"gpus", std::move(gpus)},
              {"holders", state.holders},           {"unattributed", state.unattributed}};
  return doc.dump();
}

namespace {

// Field readers that say which field is wrong; the first error sticks.
class Reader {
 public:
  const json* Field(const json& object, const char* key, json::value_t type,
                    const std::string& where) {
    if (!error_.empty()) return nullptr;
    auto it = object.find(key);
    const bool number = type == json::value_t::number_unsigned;
    if (it == object.end() || (number ? !it->is_number_unsigned() : it->type() != type)) {
      error_ = where + key + ": missing or not " + TypeName(type);
      return nullptr;
    }
    return &*it;
  }
  std::string String(const json& object, const char* key, const std::string& where) {
    const json* v = Field(object, key, json::value_t::string, where);
    return v != nullptr ? v->get<std::string>() : std::string();
  }
  uint64_t Unsigned(const json& object, const char* key, const std::string& where,
                    uint64_t max = std::numeric_limits<uint32_t>::max()) {
    const json* v = Field(object, key, json::value_t::number_unsigned, where);
    if (v == nullptr) return 0;
    uint64_t n = v->get<uint64_t>();
    if (n > max) error_ = where + key + ": out of range";
    return n;
  }
  void Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
  }
  const std::string& error() const { return error_; }

 private:
  static const char* TypeName(json::value_t type) {
    switch (type) {
      case json::value_t::string:
        return "a string";
      case json::value_t::boolean:
        return "a boolean";
      case json::value_t::array:
        return "an array";
      case json::value_t::object:
        return "an object";
      default:
        return "a non-negative integer";
    }
  }
  std::string error_;
};

// Version 3's optional per-resource facts: placements (mixed-size), GPU-instance profile (MIG).
// Absent: not known. Present: complete and well-typed, or the node fails.
void ReadShapeFacts(Reader& read, const json& r, const std::string& at, ResourceSlots& slots) {
  if (r.contains("placementIds") || r.contains("placementSize")) {
    slots.placements.size = static_cast<uint32_t>(read.Unsigned(r, "placementSize", at));
    if (const json* ids = read.Field(r, "placementIds", json::value_t::array, at)) {
      for (const json& id : *ids) {
        if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
          read.Fail(at + "placementIds: not all slot numbers");
          break;
        }
        slots.placements.ids.push_back(id.get<uint32_t>());
      }
    }
    if (read.error().empty() && (slots.placements.size == 0 || slots.placements.ids.empty())) {
      read.Fail(at + "placementSize/placementIds: a placement needs a size and a start");
    }
  }
  if (r.contains("gpuInstanceProfileId") || r.contains("maxPerGpuInstance")) {
    slots.gi_profile = static_cast<uint32_t>(read.Unsigned(r, "gpuInstanceProfileId", at));
    slots.max_per_gi = static_cast<uint32_t>(read.Unsigned(r, "maxPerGpuInstance", at));
  }
}

// Version 3's per-GPU shape: the slots in use (mixed-size), the GPU instances (MIG).
void ReadGpuShape(Reader& read, const json& g, const std::string& where, GpuSlots& gpu) {
  if (g.contains("usedSlots")) {
    if (const json* used = read.Field(g, "usedSlots", json::value_t::array, where)) {
      for (size_t i = 0; i < used->size() && read.error().empty(); ++i) {
        const json& u = (*used)[i];
        const std::string at = where + "usedSlots[" + std::to_string(i) + "].";
        if (!u.is_object()) {
          read.Fail(at + ": not an object");
          break;
        }
        SlotRange range;
        range.start = static_cast<uint32_t>(read.Unsigned(u, "start", at));
        range.size = static_cast<uint32_t>(read.Unsigned(u, "size", at));
        gpu.used_slots.push_back(range);
      }
    }
  }
  if (g.contains("gpuInstances")) {
    if (const json* gis = read.Field(g, "gpuInstances", json::value_t::array, where)) {
      for (size_t i = 0; i < gis->size() && read.error().empty(); ++i) {
        const json& x = (*gis)[i];
        const std::string at = where + "gpuInstances[" + std::to_string(i) + "].";
        if (!x.is_object()) {
          read.Fail(at + ": not an object");
          break;
        }
        GpuInstanceSlots gi;
        gi.id = static_cast<uint32_t>(read.Unsigned(x, "id", at));
        gi.profile = static_cast<uint32_t>(read.Unsigned(x, "profileId", at));
        gi.vgpu_framebuffer_mib =
            read.Unsigned(x, "vgpuFramebufferMib", at, std::numeric_limits<uint64_t>::max());
        gi.vgpus = static_cast<uint32_t>(read.Unsigned(x, "vgpus", at));
        gpu.gpu_instances.push_back(gi);
      }
    }
  }
}

// One entry of "gpus"; `version` says which fields it has (see RenderGpu).
GpuSlots ReadGpu(Reader& read, const json& g, const std::string& where, uint64_t version) {
  GpuSlots gpu;
  gpu.id = read.String(g, "id", where);
  bool one_type = true;
  if (const json* one = read.Field(g, "oneType", json::value_t::boolean, where)) {
    one_type = one->get<bool>();
  }
  gpu.locked_type = read.String(g, "lockedType", where);
  if (version >= 2) {
    const std::string occupancy = read.String(g, "occupancy", where);
    if (auto parsed = ParseOccupancy(occupancy)) {
      gpu.occupancy = *parsed;
    } else if (read.error().empty()) {
      read.Fail(where + "occupancy: \"" + occupancy + "\" is no occupancy mode");
    }
    gpu.lock = read.String(g, "lock", where);
  } else {
    gpu.occupancy = one_type ? Occupancy::kStrict : Occupancy::kUnknown;
    if (!gpu.locked_type.empty()) gpu.lock = LockKey(gpu.occupancy, gpu.locked_type, 0);
  }
  if (version >= 3) ReadGpuShape(read, g, where, gpu);
  if (const json* resources = read.Field(g, "resources", json::value_t::object, where)) {
    for (const auto& [name, r] : resources->items()) {
      const std::string at = where + "resources[" + name + "].";
      if (!r.is_object()) {
        read.Fail(at + ": not an object");
        break;
      }
      ResourceSlots slots;
      slots.type_id = read.String(r, "type", at);
      slots.used = static_cast<uint32_t>(read.Unsigned(r, "used", at));
      slots.free = static_cast<uint32_t>(read.Unsigned(r, "free", at));
      if (version >= 2) {
        slots.framebuffer_mib =
            read.Unsigned(r, "framebufferMib", at, std::numeric_limits<uint64_t>::max());
      }
      if (version >= 3) ReadShapeFacts(read, r, at, slots);
      gpu.resources[name] = slots;
    }
  }
  return gpu;
}

}  // namespace

Result<NodeVgpuState> ParseNodeState(const std::string& text) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::Error(ErrorCode::kInvalid, "vGPU state is not a JSON object");
  }
  Reader read;
  NodeVgpuState state;
  const uint64_t version = read.Unsigned(doc, "version", "");
  if (read.error().empty() && (version < static_cast<uint64_t>(kNodeStateReadMin) ||
                               version > static_cast<uint64_t>(kNodeStateReadMax))) {
    return Status::Error(ErrorCode::kInvalid, "vGPU state version " + std::to_string(version) +
                                                  " is outside the versions this extender reads (" +
                                                  std::to_string(kNodeStateReadMin) + " to " +
                                                  std::to_string(kNodeStateReadMax) + ")");
  }
  state.version = static_cast<int>(version);
  state.node = read.String(doc, "node", "");
  state.generation = read.Unsigned(doc, "generation", "", std::numeric_limits<uint64_t>::max());
  state.published_unix_ms = static_cast<int64_t>(read.Unsigned(
      doc, "publishedUnixMs", "", static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
  const std::string policy = read.String(doc, "policy", "");
  if (read.error().empty()) {
    if (auto parsed = ParsePolicy(policy)) {
      state.policy = *parsed;
    } else {
      read.Fail("policy: \"" + policy + "\" is neither pack nor spread");
    }
  }
  if (const json* gpus = read.Field(doc, "gpus", json::value_t::array, "")) {
    for (size_t i = 0; i < gpus->size() && read.error().empty(); ++i) {
      const json& g = (*gpus)[i];
      const std::string where = "gpus[" + std::to_string(i) + "].";
      if (!g.is_object()) {
        read.Fail(where + ": not an object");
        break;
      }
      state.gpus.push_back(ReadGpu(read, g, where, version));
    }
  }
  if (const json* holders = read.Field(doc, "holders", json::value_t::array, "")) {
    for (const json& h : *holders) {
      if (!h.is_string()) {
        read.Fail("holders: not all strings");
        break;
      }
      state.holders.insert(h.get<std::string>());
    }
  }
  if (const json* counts = read.Field(doc, "unattributed", json::value_t::object, "")) {
    for (const auto& [name, n] : counts->items()) {
      if (!n.is_number_unsigned() || n.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        read.Fail("unattributed[" + name + "]: not a count");
        break;
      }
      state.unattributed[name] = n.get<uint32_t>();
    }
  }
  if (!read.error().empty()) {
    return Status::Error(ErrorCode::kInvalid, "vGPU state: " + read.error());
  }
  return state;
}

}  // namespace kvgpu::scheduling
