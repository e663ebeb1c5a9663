#include "extender/protocol.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "common/ascii.h"
#include "common/json_string.h"
#include "extender/protocol_internal.h"
#include "kube/pod.h"

namespace kvgpu::extender {

using nlohmann::json;

namespace {

// Go's encoding/json: the exact name first, else the first case-insensitive match.
json::const_iterator FindField(const json& object, std::string_view name) {
  if (auto it = object.find(std::string(name)); it != object.end()) return it;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (EqualsIgnoringAsciiCase(it.key(), name)) return it;
  }
  return object.end();
}

}  // namespace

const json* Field(const json& object, std::string_view name) {
  if (!object.is_object()) return nullptr;
  const auto it = FindField(object, name);
  return it == object.end() ? nullptr : &*it;
}

namespace {

Result<CandidateNode> NodeFromObject(const json& node) {
  const json* metadata = node.is_object() ? Field(node, "metadata") : nullptr;
  const json* name = metadata != nullptr ? Field(*metadata, "name") : nullptr;
  if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
    return Status::Invalid("Nodes.items: a node without metadata.name");
  }
  CandidateNode candidate{name->get<std::string>(), node, std::nullopt};
  if (const json* annotations = Field(*metadata, "annotations");
      annotations != nullptr && annotations->is_object()) {
    auto it = annotations->find(scheduling::kNodeStateAnnotation);
    if (it != annotations->end() && it->is_string()) {
      candidate.state_annotation = it->get<std::string>();
    }
  }
  return candidate;
}

Result<uint32_t> WholeCount(const std::string& quantity, const std::string& what) {
  uint32_t n = 0;
  auto [end, error] = std::from_chars(quantity.data(), quantity.data() + quantity.size(), n);
  if (error != std::errc() || end != quantity.data() + quantity.size()) {
    return Status::Invalid(what + ": \"" + quantity + "\" is not a whole number");
  }
  return n;
}

Result<scheduling::Demand> ContainerDemand(const kube::ContainerInfo& container,
                                           const std::string& prefix) {
  scheduling::Demand demand;
  auto add = [&](const std::map<std::string, std::string>& quantities) -> Status {
    for (const auto& [resource, quantity] : quantities) {
      if (!resource.starts_with(prefix) || demand.contains(resource)) continue;
      Result<uint32_t> n = WholeCount(quantity, "container " + container.name + " " + resource);
      if (!n.ok()) return n.status();
      if (*n > 0) demand[resource] = *n;
    }
    return Status::Ok();
  };
  Status limits = add(container.limits);  // the limit wins where both are given
  if (!limits.ok()) return limits;
  Status requests = add(container.requests);
  if (!requests.ok()) return requests;
  return demand;
}

}  // namespace

namespace {

// Top-level arrays under a key that reads as NodeNames, by key, kept out of the document.
using DivertedNames = std::map<std::string, std::vector<std::string>>;

Result<ExtenderArgs> ParseArgs(const json& body, DivertedNames* diverted) {
  if (!body.is_object()) return Status::Invalid("ExtenderArgs: not a JSON object");
  const json* pod = Field(body, "Pod");
  if (pod == nullptr || !pod->is_object()) return Status::Invalid("ExtenderArgs.Pod: missing");
  Result<kube::PodInfo> parsed = kube::ParsePod(*pod);
  if (!parsed.ok()) return Status::Invalid("ExtenderArgs.Pod: " + parsed.status().message());
  ExtenderArgs args;
  args.pod = std::move(*parsed);
  const auto names = FindField(body, "NodeNames");
  const json* nodes = Field(body, "Nodes");
  if (names != body.end() && names->is_array()) {
    args.names_only = true;
    if (diverted != nullptr) {
      if (const auto kept = diverted->find(names.key()); kept != diverted->end()) {
        args.nodes.reserve(kept->second.size());
        for (std::string& name : kept->second) {
          args.nodes.push_back({std::move(name), nullptr, std::nullopt});
        }
        return args;
      }
    }
    args.nodes.reserve(names->size());
    for (const json& name : *names) {
      if (!name.is_string()) return Status::Invalid("ExtenderArgs.NodeNames: not all strings");
      args.nodes.push_back({name.get<std::string>(), nullptr, std::nullopt});
    }
    return args;
  }
  if (nodes != nullptr && nodes->is_object()) {
    const json* items = Field(*nodes, "items");
    if (items == nullptr || !items->is_array()) {
      if (items == nullptr || items->is_null()) return args;  // an empty list
      return Status::Invalid("ExtenderArgs.Nodes.items: not a list");
    }
    for (const json& node : *items) {
      Result<CandidateNode> candidate = NodeFromObject(node);
      if (!candidate.ok()) return candidate.status();
      args.nodes.push_back(std::move(*candidate));
    }
    return args;
  }
  return Status::Invalid("ExtenderArgs: neither Nodes nor NodeNames");
}

// nlohmann's document builder for everything but the strings of a top-level NodeNames array,
// which are moved from the lexer into `names` (the document keeps an empty array in their place).
// Anything but a string in such an array stops the parse with `odd` set: the caller reads the body
// as a document then, so such a body gets the same answer either way.
class ArgsSax {
 public:
  ArgsSax(json& root, DivertedNames& names)
      : dom_(root, /*allow_exceptions=*/false), diverted_(names) {}

  bool null() { return Value() && dom_.null(); }
  bool boolean(bool value) { return Value() && dom_.boolean(value); }
  bool number_integer(json::number_integer_t value) {
    return Value() && dom_.number_integer(value);
  }
  bool number_unsigned(json::number_unsigned_t value) {
    return Value() && dom_.number_unsigned(value);
  }
  bool number_float(json::number_float_t value, const json::string_t& text) {
    return Value() && dom_.number_float(value, text);
  }
  bool binary(json::binary_t& value) { return Value() && dom_.binary(value); }
  bool string(json::string_t& value) {
    if (names_ != nullptr) {
      names_->push_back(std::move(value));
      return true;
    }
    return Value() && dom_.string(value);
  }
  bool start_object(std::size_t size) {
    if (!Value()) return false;
    ++depth_;
    return dom_.start_object(size);
  }
  bool key(json::string_t& name) {
    names_key_ = depth_ == 1 && EqualsIgnoringAsciiCase(name, "NodeNames");
    if (names_key_) key_ = name;
    return dom_.key(name);
  }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t size) {
    if (names_key_ && names_ == nullptr) {
      names_key_ = false;
      names_ = &diverted_[key_];
      names_->clear();  // a repeated key: the last one counts, as in the document
      return dom_.start_array(0);
    }
    if (!Value()) return false;
    ++depth_;
    return dom_.start_array(size);
  }
  bool end_array() {
    if (names_ != nullptr) {
      names_ = nullptr;
    } else {
      --depth_;
    }
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& error) {
    return dom_.parse_error(position, token, error);
  }

  bool odd() const { return odd_; }
  bool errored() const { return dom_.is_errored(); }

 private:
  // Before any value but a string: inside a NodeNames array it is odd.
  bool Value() {
    names_key_ = false;
    if (names_ != nullptr) odd_ = true;
    return !odd_;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  DivertedNames& diverted_;
  int depth_ = 0;
  bool names_key_ = false;  // the last key read was a top-level NodeNames
  std::string key_;
  std::vector<std::string>* names_ = nullptr;  // the NodeNames array being read
  bool odd_ = false;
};

}  // namespace

Result<ExtenderArgs> ParseExtenderArgs(const json& body) {
  return ParseArgs(body, nullptr);
}

Result<ExtenderArgs> ParseExtenderArgsText(std::string_view body) {
  if (std::optional<ExtenderArgs> read = ReadExtenderArgsFast(body)) return std::move(*read);
  json document;
  DivertedNames names;
  ArgsSax sax(document, names);
  const bool parsed = json::sax_parse(body.begin(), body.end(), &sax);
  if (sax.odd()) {
    document = json::parse(body, nullptr, false);
    if (document.is_discarded()) return Status::Error(ErrorCode::kDecode, "the body is not JSON");
    return ParseArgs(document, nullptr);
  }
  if (!parsed || sax.errored()) return Status::Error(ErrorCode::kDecode, "the body is not JSON");
  return ParseArgs(document, &names);
}

namespace {

void AppendReasons(std::string& out, const std::map<std::string, std::string>& reasons) {
  out.push_back('{');
  bool first = true;
  for (const auto& [node, reason] : reasons) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, node);
    out.push_back(':');
    AppendJsonString(out, reason);
  }
  out.push_back('}');
}

}  // namespace

std::string FilterResultText(const ExtenderArgs& args, const std::vector<std::string_view>& kept,
                             const std::map<std::string, std::string>& failed,
                             const std::map<std::string, std::string>& unresolvable) {
  if (!args.names_only) return FilterResult(args, kept, failed, unresolvable).dump();
  // The fields in the order FilterResult's document has them (by name).
  std::string out;
  size_t size = 128;
  for (std::string_view name : kept) size += name.size() + 3;
  out.reserve(size);
  out.append("{\"Error\":\"\",\"FailedAndUnresolvableNodes\":");
  AppendReasons(out, unresolvable);
  out.append(",\"FailedNodes\":");
  AppendReasons(out, failed);
  out.append(",\"NodeNames\":[");
  for (size_t i = 0; i < kept.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendJsonString(out, kept[i]);
  }
  out.append("],\"Nodes\":null}");
  return out;
}

json FilterResult(const ExtenderArgs& args, const std::vector<std::string_view>& kept,
                  const std::map<std::string, std::string>& failed,
                  const std::map<std::string, std::string>& unresolvable) {
  if (args.names_only) return json::parse(FilterResultText(args, kept, failed, unresolvable));
  json result = {{"Nodes", nullptr},
                 {"NodeNames", nullptr},
                 {"FailedNodes", failed},
                 {"FailedAndUnresolvableNodes", unresolvable},
                 {"Error", ""}};
  const std::set<std::string_view> keep(kept.begin(), kept.end());
  json items = json::array();
  for (const CandidateNode& node : args.nodes) {
    if (keep.contains(node.name)) items.push_back(node.object);
  }
  result["Nodes"] = {{"metadata", json::object()}, {"items", std::move(items)}};
  return result;
}

json FilterError(const std::string& message) {
  return {{"Nodes", nullptr},
          {"NodeNames", nullptr},
          {"FailedNodes", json::object()},
          {"FailedAndUnresolvableNodes", json::object()},
          {"Error", message}};
}

std::string PriorityListText(const std::vector<std::pair<std::string_view, int64_t>>& scores) {
  std::string out;
  size_t size = 2;
  for (const auto& [host, score] : scores) size += host.size() + 32;
  out.reserve(size);
  out.push_back('[');
  for (size_t i = 0; i < scores.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append("{\"Host\":");
    AppendJsonString(out, scores[i].first);
    out.append(",\"Score\":");
    out.append(std::to_string(scores[i].second));
    out.push_back('}');
  }
  out.push_back(']');
  return out;
}

json PriorityList(const std::vector<std::pair<std::string_view, int64_t>>& scores) {
  return json::parse(PriorityListText(scores));
}

Result<BindingArgs> ParseBindingArgs(const json& body) {
  BindingArgs args;
  for (auto [name, value] :
       {std::pair{"PodName", &args.pod_name}, std::pair{"PodNamespace", &args.pod_namespace},
        std::pair{"PodUID", &args.pod_uid}, std::pair{"Node", &args.node}}) {
    const json* field = Field(body, name);
    if (field == nullptr || !field->is_string() || field->get<std::string>().empty()) {
      return Status::Invalid(std::string("ExtenderBindingArgs.") + name + ": missing");
    }
    *value = field->get<std::string>();
  }
  return args;
}

json BindingResult(const std::string& error) {
  return {{"Error", error}};
}

Result<std::vector<scheduling::Demand>> PodDemand(const kube::PodInfo& pod,
                                                  const std::string& prefix) {
  std::vector<scheduling::Demand> apps;
  scheduling::Demand app_total;
  scheduling::Demand init_peak;
  for (const kube::ContainerInfo& container : pod.containers) {
    Result<scheduling::Demand> demand = ContainerDemand(container, prefix);
    if (!demand.ok()) return demand.status();
    for (const auto& [resource, n] : *demand) {
      if (container.init) {
        init_peak[resource] = std::max(init_peak[resource], n);
      } else {
        app_total[resource] += n;
      }
    }
    if (!container.init && !demand->empty()) apps.push_back(std::move(*demand));
  }
  scheduling::Demand beyond_apps;
  for (const auto& [resource, n] : init_peak) {
    if (n > app_total[resource]) beyond_apps[resource] = n - app_total[resource];
  }
  std::vector<scheduling::Demand> out;
  if (!beyond_apps.empty()) out.push_back(std::move(beyond_apps));
  for (scheduling::Demand& demand : apps) out.push_back(std::move(demand));
  return out;
}

}  // namespace kvgpu::extender
