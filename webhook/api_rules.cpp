#include "webhook/api_rules.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

namespace kvgpu::webhook {

using nlohmann::json;

// std::regex is avoided in this file: GCC 12 warns inside it under -fsanitize=address (a false
// positive that -Werror turns into a broken sanitizer build).
bool IsDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string_view WithoutSign(std::string_view text) {
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) text.remove_prefix(1);
  return text;
}

bool IsAbsolutePath(const json& value) {
  return value.is_string() && !value.get_ref<const std::string&>().empty() &&
         value.get_ref<const std::string&>()[0] == '/';
}

// The grammar: [+-]?(digits|digits.|digits.digits|.digits) then nothing, a binary suffix
// (Ki..Ei), a decimal one (m, k, M..E) or an exponent (e/E, signed digits).
std::optional<long double> QuantityValue(const json& quantity) {
  if (quantity.is_number()) {
    long double value = quantity.get<long double>();
    return std::isfinite(value) ? std::optional(value) : std::nullopt;
  }
  if (!quantity.is_string()) return std::nullopt;
  std::string_view text = quantity.get_ref<const std::string&>();
  size_t at = 0;
  if (at < text.size() && (text[at] == '+' || text[at] == '-')) ++at;
  size_t digits = 0;
  while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) ++at, ++digits;
  if (at < text.size() && text[at] == '.') {
    ++at;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) ++at, ++digits;
  }
  if (digits == 0) return std::nullopt;
  const std::string number(text.substr(0, at));
  std::string_view suffix = text.substr(at);
  long double scale = 1;
  static const std::pair<std::string_view, long double> kSuffixes[] = {
      {"", 1},
      {"m", 1e-3L},
      {"k", 1e3L},
      {"M", 1e6L},
      {"G", 1e9L},
      {"T", 1e12L},
      {"P", 1e15L},
      {"E", 1e18L},
      {"Ki", 1024.0L},
      {"Mi", 1048576.0L},
      {"Gi", 1073741824.0L},
      {"Ti", 1099511627776.0L},
      {"Pi", 1125899906842624.0L},
      {"Ei", 1152921504606846976.0L}};
  bool known = false;
  for (const auto& [name, factor] : kSuffixes) {
    if (suffix == name) {
      scale = factor;
      known = true;
    }
  }
  if (!known) {
    if (suffix.empty() || (suffix[0] != 'e' && suffix[0] != 'E')) return std::nullopt;
    std::string_view exponent = WithoutSign(suffix.substr(1));
    if (!IsDigits(exponent) || exponent.size() > 4) return std::nullopt;
    scale = std::pow(10.0L, std::stold(std::string(suffix.substr(1))));
  }
  return std::stold(number) * scale;
}

bool IsEnvName(const std::string& name) {
  auto allowed = [](char c, bool first) {
    return c == '-' || c == '.' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
  };
  if (name.empty() || !allowed(name[0], true)) return false;
  return std::all_of(name.begin() + 1, name.end(), [&](char c) { return allowed(c, false); });
}

bool IsDnsSubdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    if (!IsDnsLabel(name.substr(start, dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsQualifiedName(std::string_view key) {
  size_t slash = key.find('/');
  std::string_view name = key;
  if (slash != std::string_view::npos) {
    if (!IsDnsSubdomain(key.substr(0, slash))) return false;
    name = key.substr(slash + 1);
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (name.empty() || name.size() > 63 || !alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool IsDnsLabel(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-'; });
}

}  // namespace kvgpu::webhook
