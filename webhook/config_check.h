// Validation of the webhook's config as one pass that stops at the first problem: each check
// returns false after recording a message that names the key and what it must be.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/config_keys.h"

namespace kvgpu::webhook {

class Checker {
 public:
  std::string failure;

  bool Fail(const std::string& message) {
    if (failure.empty()) failure = message;
    return false;
  }
  bool KnownKeys(const nlohmann::json& object, const std::string& where,
                 std::set<std::string> keys) {
    if (!object.is_object()) return Fail(where + " must be a mapping");
    std::vector<std::string> present;
    for (const auto& [key, value] : object.items()) present.push_back(key);
    std::string unknown = UnknownKeyMessage(present, keys, where);
    return unknown.empty() || Fail(unknown);
  }
  bool String(const nlohmann::json& object, const char* key, const std::string& where,
              std::string& out) {
    const nlohmann::json* value = object.contains(key) ? &object[key] : nullptr;
    if (value == nullptr || !value->is_string() || value->get_ref<const std::string&>().empty())
      return Fail(where + "." + key + " must be a non-empty string");
    out = value->get<std::string>();
    return true;
  }
  // One of `choices` (word, value), named in the failure as "key must be a or b, not 'x'".
  template <typename Value>
  bool Choice(const nlohmann::json& object, const char* key, const std::string& where,
              const std::vector<std::pair<const char*, Value>>& choices, Value& out) {
    std::string word;
    if (!String(object, key, where, word)) return false;
    std::string names;
    for (const auto& [name, value] : choices) {
      if (word == name) {
        out = value;
        return true;
      }
      names += names.empty() ? name : std::string(" or ") + name;
    }
    return Fail(std::string(key) + " must be " + names + ", not '" + word + "'");
  }
  bool StringList(const nlohmann::json& value, const std::string& where,
                  std::vector<std::string>& out, bool allow_empty_list) {
    if (!value.is_array()) return Fail(where + " must be a list of strings");
    out.clear();
    for (const auto& item : value) {
      if (!item.is_string() || item.get_ref<const std::string&>().empty())
        return Fail(where + " must hold only non-empty strings");
      out.push_back(item.get<std::string>());
    }
    if (out.empty() && !allow_empty_list) return Fail(where + " must not be empty");
    return true;
  }
};

}  // namespace kvgpu::webhook
