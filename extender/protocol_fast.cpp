// filter's and prioritize's arguments in the shape kube-scheduler sends with nodeCacheCapable
// (the Pod, NodeNames, Nodes null), read with simdjson's On-Demand parser: the Pod's fields
// kube::ParsePod reads and the names, with no document built. It reads every value of the body,
// the ones it does not use too, because On-Demand checks only what it is asked for: a body is
// taken only once all of it is known to be JSON as nlohmann reads it. Anything else - not JSON,
// a pod the document reader refuses, a key Go's decoder would match in another case, a key the
// document would take the last of, a value the document reader turns into text - is left to the
// document reader (ParseExtenderArgsText), so every body gets the answer and the error it got
// before.
#include <simdjson.h>

#include <cstring>
#include <memory>

#include "common/ascii.h"
#include "common/log_safe.h"
#include "extender/protocol.h"

namespace kvgpu::extender {

namespace {

namespace od = simdjson::ondemand;

// Deeper than this is read as a document (simdjson stops at 1,024 levels of its own).
constexpr int kMaxDepth = 256;

bool Validate(od::value value, int depth);

bool ValidateObject(od::object object, int depth) {
  for (auto field : object) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    od::value inner;
    if (field.value().get(inner) != simdjson::SUCCESS || !Validate(inner, depth + 1)) return false;
  }
  return true;
}

// Reads `value` whole, so that simdjson checks all of it: strings unescaped, numbers parsed,
// literals matched, every comma, colon and bracket in place.
bool Validate(od::value value, int depth) {
  od::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return false;
  switch (type) {
    case od::json_type::object: {
      od::object object;
      return depth < kMaxDepth && value.get_object().get(object) == simdjson::SUCCESS &&
             ValidateObject(object, depth);
    }
    case od::json_type::array: {
      od::array array;
      if (depth >= kMaxDepth || value.get_array().get(array) != simdjson::SUCCESS) return false;
      for (auto element : array) {
        od::value inner;
        if (element.get(inner) != simdjson::SUCCESS || !Validate(inner, depth + 1)) return false;
      }
      return true;
    }
    case od::json_type::string: {
      std::string_view text;
      return value.get_string().get(text) == simdjson::SUCCESS;
    }
    case od::json_type::number: {
      // Numbers nlohmann takes but simdjson does not (integers past 64 bits) fail here: the
      // document reader then reads the body.
      od::number number;
      return value.get_number().get(number) == simdjson::SUCCESS;
    }
    case od::json_type::boolean: {
      bool flag = false;
      return value.get_bool().get(flag) == simdjson::SUCCESS;
    }
    case od::json_type::null: {
      bool null = false;
      return value.is_null().get(null) == simdjson::SUCCESS && null;
    }
  }
  return false;
}

bool IsNull(od::value value, bool& null) {
  od::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return false;
  null = type == od::json_type::null;
  return Validate(value, 0);
}

// kube::ParsePod's StringAt: the string, or "" for any other value (read all the same).
bool StringOrEmpty(od::value value, int depth, std::string& out) {
  od::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return false;
  if (type != od::json_type::string) {
    out.clear();
    return Validate(value, depth);
  }
  std::string_view text;
  if (value.get_string().get(text) != simdjson::SUCCESS) return false;
  out.assign(text);
  return true;
}

// An object's fields, each key of `names` at most once (a repeated one: the document takes the
// last, which this reader does not follow; the document reads such a body); `read` gets the
// index of the name, or -1 for any other key, which is only checked.
template <size_t N, typename Read>
bool Fields(od::object object, int depth, const std::string_view (&names)[N], Read read) {
  unsigned seen = 0;
  for (auto field : object) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    od::value inner;
    if (field.value().get(inner) != simdjson::SUCCESS) return false;
    int index = -1;
    for (size_t i = 0; i < N; ++i) {
      if (key == names[i]) index = static_cast<int>(i);
    }
    if (index >= 0) {
      if ((seen & (1u << index)) != 0) return false;
      seen |= 1u << index;
      if (!read(index, inner)) return false;
    } else if (!Validate(inner, depth + 1)) {
      return false;
    }
  }
  return true;
}

// `value` as an object, or nullopt-like false in `is_object` when it is another value (read).
bool AsObject(od::value value, int depth, od::object& object, bool& is_object) {
  od::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return false;
  is_object = type == od::json_type::object;
  if (!is_object) return Validate(value, depth);
  return depth < kMaxDepth && value.get_object().get(object) == simdjson::SUCCESS;
}

// kube::ParsePod's Quantities: a quantity that is not a string is written out by nlohmann's dump
// there; such a body is left to the document reader.
bool ReadQuantities(od::value value, int depth, std::map<std::string, std::string>& out) {
  od::object object;
  bool is_object = false;
  if (!AsObject(value, depth, object, is_object)) return false;
  if (!is_object) return true;
  for (auto field : object) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    od::value inner;
    if (field.value().get(inner) != simdjson::SUCCESS) return false;
    od::json_type type;
    if (inner.type().get(type) != simdjson::SUCCESS || type != od::json_type::string) return false;
    std::string_view quantity;
    if (inner.get_string().get(quantity) != simdjson::SUCCESS) return false;
    // A repeated resource: the last counts, as in the document.
    out.insert_or_assign(std::string(key), std::string(quantity));
  }
  return true;
}

bool ReadContainer(od::value value, int depth, bool init, std::vector<kube::ContainerInfo>& out) {
  kube::ContainerInfo container;
  container.init = init;
  od::object object;
  bool is_object = false;
  if (!AsObject(value, depth, object, is_object)) return false;
  if (is_object) {
    static constexpr std::string_view kNames[] = {"name", "resources"};
    std::string name;
    const bool read = Fields(object, depth, kNames, [&](int index, od::value inner) {
      if (index == 0) return StringOrEmpty(inner, depth + 1, name);
      od::object resources;
      bool resources_object = false;
      if (!AsObject(inner, depth + 1, resources, resources_object)) return false;
      if (!resources_object) return true;
      static constexpr std::string_view kKinds[] = {"requests", "limits"};
      return Fields(resources, depth + 1, kKinds, [&](int kind, od::value quantities) {
        return ReadQuantities(quantities, depth + 2,
                              kind == 0 ? container.requests : container.limits);
      });
    });
    if (!read) return false;
    container.name = PeerName(name);
  }
  out.push_back(std::move(container));
  return true;
}

bool ReadContainers(od::value value, int depth, bool init, std::vector<kube::ContainerInfo>& out) {
  od::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return false;
  if (type != od::json_type::array) return Validate(value, depth);
  od::array array;
  if (depth >= kMaxDepth || value.get_array().get(array) != simdjson::SUCCESS) return false;
  for (auto element : array) {
    od::value inner;
    if (element.get(inner) != simdjson::SUCCESS || !ReadContainer(inner, depth + 1, init, out)) {
      return false;
    }
  }
  return true;
}

// kube::ParsePod's reading, field by field; false for a pod it refuses (the document reader then
// says why) as for anything this reader does not follow.
bool ReadPod(od::value value, kube::PodInfo& pod) {
  od::object object;
  bool is_object = false;
  if (!AsObject(value, 1, object, is_object) || !is_object) return false;
  bool has_metadata = false;
  std::string uid, namespace_name, name, node_name, nominated_node;
  std::vector<kube::ContainerInfo> init_containers, containers;
  static constexpr std::string_view kPod[] = {"metadata", "spec", "status"};
  const bool read = Fields(object, 1, kPod, [&](int index, od::value inner) {
    od::object part;
    bool part_object = false;
    if (!AsObject(inner, 2, part, part_object)) return false;
    if (index == 0) {
      if (!part_object) return false;  // ParsePod: "pod has no metadata"
      has_metadata = true;
      static constexpr std::string_view kMetadata[] = {"uid", "namespace", "name",
                                                       "resourceVersion", "deletionTimestamp"};
      return Fields(part, 2, kMetadata, [&](int field, od::value text) {
        switch (field) {
          case 0:
            return StringOrEmpty(text, 3, uid);
          case 1:
            return StringOrEmpty(text, 3, namespace_name);
          case 2:
            return StringOrEmpty(text, 3, name);
          case 3:
            return StringOrEmpty(text, 3, pod.resource_version);
          default: {
            bool null = false;
            if (!IsNull(text, null)) return false;
            pod.deleting = !null;
            return true;
          }
        }
      });
    }
    if (!part_object) return true;  // a spec or status of another type reads as empty
    if (index == 1) {
      static constexpr std::string_view kSpec[] = {"nodeName", "initContainers", "containers"};
      return Fields(part, 2, kSpec, [&](int field, od::value item) {
        if (field == 0) return StringOrEmpty(item, 3, node_name);
        return field == 1 ? ReadContainers(item, 3, true, init_containers)
                          : ReadContainers(item, 3, false, containers);
      });
    }
    static constexpr std::string_view kStatus[] = {"phase", "nominatedNodeName"};
    return Fields(part, 2, kStatus, [&](int field, od::value text) {
      return StringOrEmpty(text, 3, field == 0 ? pod.phase : nominated_node);
    });
  });
  if (!read || !has_metadata) return false;
  pod.uid = PeerName(uid);
  pod.namespace_name = PeerName(namespace_name);
  pod.name = PeerName(name);
  if (pod.uid.empty() || pod.namespace_name.empty() || pod.name.empty()) return false;
  pod.node_name = PeerName(node_name);
  pod.nominated_node = PeerName(nominated_node);
  pod.containers = std::move(init_containers);
  for (kube::ContainerInfo& container : containers) pod.containers.push_back(std::move(container));
  return true;
}

bool ReadNames(od::value value, std::vector<CandidateNode>& nodes) {
  od::array array;
  if (value.get_array().get(array) != simdjson::SUCCESS) return false;
  // Counted on the structural index (the array is read again from its start).
  size_t count = 0;
  if (array.count_elements().get(count) != simdjson::SUCCESS) return false;
  nodes.reserve(count);
  for (auto element : array) {
    std::string_view name;
    // A name that is not a string: the document reader refuses the body.
    if (element.get_string().get(name) != simdjson::SUCCESS) return false;
    nodes.push_back({std::string(name), nullptr, std::nullopt});
  }
  return true;
}

std::optional<ExtenderArgs> Read(od::parser& parser, simdjson::padded_string_view text) {
  od::document document;
  if (parser.iterate(text).get(document) != simdjson::SUCCESS) return std::nullopt;
  od::object object;
  if (document.get_object().get(object) != simdjson::SUCCESS) return std::nullopt;
  ExtenderArgs args;
  bool has_pod = false;
  bool has_names = false;
  unsigned seen = 0;
  for (auto field : object) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return std::nullopt;
    od::value value;
    if (field.value().get(value) != simdjson::SUCCESS) return std::nullopt;
    int index = key == "Pod" ? 0 : key == "NodeNames" ? 1 : key == "Nodes" ? 2 : -1;
    if (index < 0) {
      // Go's decoder (and the document reader) would take a key of another case for one of these.
      if (EqualsIgnoringAsciiCase(key, "Pod") || EqualsIgnoringAsciiCase(key, "NodeNames") ||
          EqualsIgnoringAsciiCase(key, "Nodes") || !Validate(value, 1)) {
        return std::nullopt;
      }
      continue;
    }
    if ((seen & (1u << index)) != 0) return std::nullopt;  // repeated: the document takes the last
    seen |= 1u << index;
    bool null = false;
    switch (index) {
      case 0:
        if (!ReadPod(value, args.pod)) return std::nullopt;
        has_pod = true;
        break;
      case 1: {
        od::json_type type;
        if (value.type().get(type) != simdjson::SUCCESS) return std::nullopt;
        if (type == od::json_type::null) {
          if (!IsNull(value, null)) return std::nullopt;
          break;
        }
        if (type != od::json_type::array || !ReadNames(value, args.nodes)) return std::nullopt;
        has_names = true;
        break;
      }
      default:
        // Nodes: null beside NodeNames (Go marshals the unset pointer so); whole Node objects
        // are the document reader's.
        if (!IsNull(value, null) || !null) return std::nullopt;
    }
  }
  // Nothing may follow the object.
  if (document.current_location().error() != simdjson::OUT_OF_BOUNDS) return std::nullopt;
  if (!has_pod || !has_names) return std::nullopt;
  args.names_only = true;
  return args;
}

// Kept per serving thread between requests, up to a size; a larger body gets its own.
constexpr size_t kKeptCapacity = 1 << 20;

struct Reader {
  od::parser parser{kFastArgsMaxBody};
  std::string padded;  // the body and simdjson's padding
};

}  // namespace

std::optional<ExtenderArgs> ReadExtenderArgsFast(std::string_view body) {
  if (body.size() > kFastArgsMaxBody) return std::nullopt;
  thread_local std::unique_ptr<Reader> kept;
  std::unique_ptr<Reader> own;
  Reader* reader = nullptr;
  if (body.size() <= kKeptCapacity) {
    if (!kept) kept = std::make_unique<Reader>();
    reader = kept.get();
  } else {
    own = std::make_unique<Reader>();
    reader = own.get();
  }
  reader->padded.resize(body.size() + simdjson::SIMDJSON_PADDING);
  std::memcpy(reader->padded.data(), body.data(), body.size());
  std::memset(reader->padded.data() + body.size(), 0, simdjson::SIMDJSON_PADDING);
  return Read(reader->parser, simdjson::padded_string_view(reader->padded.data(), body.size(),
                                                           reader->padded.size()));
}

}  // namespace kvgpu::extender
