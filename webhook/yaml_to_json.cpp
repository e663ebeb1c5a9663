#include "webhook/yaml_to_json.h"

#include <yaml-cpp/yaml.h>

#include "webhook/api_rules.h"

namespace kvgpu::webhook {

using nlohmann::json;

namespace {

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsFloat(std::string_view text) {
  text = WithoutSign(text);
  auto exponent = text.find_first_of("eE");
  if (exponent != std::string_view::npos) {
    if (!IsDigits(WithoutSign(text.substr(exponent + 1)))) return false;
    text = text.substr(0, exponent);
  }
  auto dot = text.find('.');
  if (dot == std::string_view::npos) return IsDigits(text);
  std::string_view whole = text.substr(0, dot), fraction = text.substr(dot + 1);
  if (whole.empty()) return IsDigits(fraction);
  return IsDigits(whole) && (fraction.empty() || IsDigits(fraction));
}

// YAML 1.2 core-schema typing for plain scalars; quoted scalars stay strings.
json ScalarToJson(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  if (IsDigits(WithoutSign(text))) {
    try {
      return std::stoll(text);
    } catch (const std::out_of_range&) {
      return text;
    }
  }
  if (IsFloat(text)) return std::stod(text);
  return text;
}

json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return ScalarToJson(node);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) out[entry.first.as<std::string>()] = YamlToJson(entry.second);
      return out;
    }
  }
  return nullptr;
}

}  // namespace

Result<json> ParseYamlMapping(std::string_view text, const std::string& what) {
  try {
    YAML::Node node = YAML::Load(std::string(text));
    if (node.IsNull()) return json::object();
    if (!node.IsMap()) return Status::Error(ErrorCode::kConfig, what + " must be a YAML mapping");
    return YamlToJson(node);
  } catch (const YAML::Exception& e) {
    return Status::Error(ErrorCode::kConfig, what + " is not valid YAML: " + e.what());
  }
}

void MergeOver(json& base, const json& overlay) {
  if (!base.is_object() || !overlay.is_object()) {
    base = overlay;
    return;
  }
  for (const auto& [key, value] : overlay.items()) MergeOver(base[key], value);
}

}  // namespace kvgpu::webhook
