#include "fakes/dra_allocator/cel_selector.h"

#include <cctype>
#include <optional>

namespace kvgpu::testing::dra {

namespace {

// A cursor over the expression; every Take* either consumes what it names or leaves `pos` as it
// was and answers nothing.
struct Cursor {
  std::string_view text;
  size_t pos = 0;

  void SkipSpace() {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  }
  bool Take(std::string_view token) {
    SkipSpace();
    if (text.substr(pos, token.size()) != token) return false;
    pos += token.size();
    return true;
  }
  // A double-quoted string without escapes (the project's classes need none).
  std::optional<std::string> TakeString() {
    SkipSpace();
    if (pos >= text.size() || text[pos] != '"') return std::nullopt;
    const size_t end = text.find('"', pos + 1);
    if (end == std::string_view::npos) return std::nullopt;
    std::string value(text.substr(pos + 1, end - pos - 1));
    if (value.find('\\') != std::string::npos) return std::nullopt;
    pos = end + 1;
    return value;
  }
  // A CEL identifier: [A-Za-z_][A-Za-z0-9_]*.
  std::optional<std::string> TakeIdent() {
    SkipSpace();
    size_t end = pos;
    while (end < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) {
      ++end;
    }
    if (end == pos || std::isdigit(static_cast<unsigned char>(text[pos]))) return std::nullopt;
    std::string ident(text.substr(pos, end - pos));
    pos = end;
    return ident;
  }
  bool AtEnd() {
    SkipSpace();
    return pos == text.size();
  }
};

Status Refuse(std::string_view expression, size_t at, const std::string& what) {
  return Status::Error(ErrorCode::kInvalid,
                       "CEL selector not modelled (" + what + " at offset " + std::to_string(at) +
                           "): '" + std::string(expression) +
                           "'; the model reads only `device.driver == \"...\"` and "
                           "`device.attributes[\"<domain>\"].<name> == \"...\"` joined by &&");
}

}  // namespace

Result<CelSelector> CelSelector::Parse(std::string_view expression) {
  CelSelector selector;
  selector.expression_ = std::string(expression);
  Cursor c{expression};
  do {
    Term term;
    if (!c.Take("device.")) return Refuse(expression, c.pos, "expected `device.`");
    if (c.Take("driver")) {
      // device.driver
    } else if (c.Take("attributes[")) {
      auto domain = c.TakeString();
      if (!domain || domain->empty()) return Refuse(expression, c.pos, "expected a domain string");
      if (!c.Take("]") || !c.Take(".")) return Refuse(expression, c.pos, "expected `].`");
      auto name = c.TakeIdent();
      if (!name) return Refuse(expression, c.pos, "expected an attribute name");
      term.domain = *domain;
      term.name = *name;
    } else {
      return Refuse(expression, c.pos, "expected `driver` or `attributes[`");
    }
    if (!c.Take("==")) return Refuse(expression, c.pos, "expected `==`");
    auto value = c.TakeString();
    if (!value) return Refuse(expression, c.pos, "expected a string literal");
    term.value = *value;
    selector.terms_.push_back(std::move(term));
  } while (c.Take("&&"));
  if (!c.AtEnd()) return Refuse(expression, c.pos, "unexpected text");
  return selector;
}

Result<bool> CelSelector::Matches(const std::string& driver, const nlohmann::json& device) const {
  std::optional<Status> error;
  bool all = true;
  for (const Term& term : terms_) {
    if (term.domain.empty()) {
      if (driver != term.value) all = false;
      continue;
    }
    // The qualified name, or the bare name when the domain is the driver's.
    const nlohmann::json* attribute = nullptr;
    const std::string qualified = term.domain + "/" + term.name;
    const auto attributes = device.find("attributes");
    if (attributes != device.end() && attributes->is_object()) {
      auto found = attributes->find(qualified);
      if (found == attributes->end() && term.domain == driver) found = attributes->find(term.name);
      if (found != attributes->end()) attribute = &*found;
    }
    if (attribute == nullptr) {
      error = Status::Error(ErrorCode::kInvalid, "no such key: " + qualified + " on device " +
                                                     device.value("name", std::string()));
      continue;
    }
    if (!attribute->contains("string") || !attribute->at("string").is_string()) {
      error = Status::Error(ErrorCode::kInvalid, "no such overload: " + qualified +
                                                     " is not a string on device " +
                                                     device.value("name", std::string()));
      continue;
    }
    if (attribute->at("string").get<std::string>() != term.value) all = false;
  }
  if (!all) return false;
  if (error) return *error;
  return true;
}

}  // namespace kvgpu::testing::dra
