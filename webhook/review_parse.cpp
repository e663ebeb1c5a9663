#include "webhook/review_parse.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

// Which part of a value to keep. A container whose type does not match its rule (an array where
// an object is expected) is kept empty: the decision only needs its type to report the error.
struct Rule {
  enum class Kind { kAll, kObject, kArray, kAnnotations };
  Kind kind;
  std::initializer_list<std::pair<std::string_view, const Rule*>> fields = {};  // kObject
  const Rule* items = nullptr;                                                  // kArray
};

const Rule kAll{Rule::Kind::kAll};
const Rule kNamed{Rule::Kind::kObject, {{"name", &kAll}}};
const Rule kNamedList{Rule::Kind::kArray, {}, &kNamed};
const Rule kMount{Rule::Kind::kObject, {{"mountPath", &kAll}}};
const Rule kMounts{Rule::Kind::kArray, {}, &kMount};
const Rule kResources{Rule::Kind::kObject, {{"limits", &kAll}, {"requests", &kAll}}};
const Rule kContainer{Rule::Kind::kObject,
                      {{"name", &kAll},
                       {"resources", &kResources},
                       {"volumeMounts", &kMounts},
                       {"env", &kNamedList}}};
const Rule kContainers{Rule::Kind::kArray, {}, &kContainer};
const Rule kSpec{Rule::Kind::kObject,
                 {{"runtimeClassName", &kAll},
                  {"restartPolicy", &kAll},
                  {"containers", &kContainers},
                  {"initContainers", &kContainers},
                  {"ephemeralContainers", &kNamedList},
                  {"volumes", &kNamedList}}};
const Rule kAnnotations{Rule::Kind::kAnnotations};
// name and generateName: the decision log names the pod.
const Rule kMetadata{Rule::Kind::kObject,
                     {{"namespace", &kAll},
                      {"name", &kAll},
                      {"generateName", &kAll},
                      {"annotations", &kAnnotations}}};
const Rule kPod{Rule::Kind::kObject, {{"metadata", &kMetadata}, {"spec", &kSpec}}};
const Rule kRequest{Rule::Kind::kObject,
                    {{"uid", &kAll},
                     {"kind", &kAll},
                     {"resource", &kAll},
                     {"subResource", &kAll},
                     {"operation", &kAll},
                     {"namespace", &kAll},
                     {"name", &kAll},
                     {"object", &kPod}}};
const Rule kReview{Rule::Kind::kObject,
                   {{"apiVersion", &kAll}, {"kind", &kAll}, {"request", &kRequest}}};

// Bytes a string scan must stop at: the quote, the backslash, control characters (invalid
// unescaped) and non-ASCII (checked as UTF-8).
constexpr std::array<bool, 256> kStringStops = [] {
  std::array<bool, 256> stops{};
  for (int c = 0; c < 256; ++c)
    stops[static_cast<size_t>(c)] = c < 0x20 || c >= 0x80 || c == '"' || c == '\\';
  return stops;
}();

// RFC 8259 (the grammar nlohmann::json accepts, checked by a differential test and fuzzer):
// validates the whole text; builds only the values the rules keep. Values kept whole are
// handed, as their own text, to nlohmann::json, so they decode exactly as in a full parse.
class Parser {
 public:
  Parser(std::string_view text, const std::vector<std::string_view>& annotation_keys, int max_depth)
      : p_(text.data()),
        end_(text.data() + text.size()),
        annotation_keys_(annotation_keys),
        max_depth_(max_depth) {}

  bool too_deep = false;

  bool Document(json& out) {
    constexpr std::string_view kBom = "\xEF\xBB\xBF";
    if (static_cast<size_t>(end_ - p_) >= kBom.size() && std::string_view(p_, 3) == kBom) p_ += 3;
    if (!Value(&kReview, &out, 0)) return false;
    SkipSpace();
    return p_ == end_;
  }

 private:
  void SkipSpace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  unsigned char Byte(const char* at) const { return static_cast<unsigned char>(*at); }

  // `rule` nullptr: validate and skip.
  bool Value(const Rule* rule, json* out, int depth) {
    SkipSpace();
    if (p_ == end_) return false;
    if (rule == &kAll) {
      const char* start = p_;
      if (!Value(nullptr, nullptr, depth)) return false;
      *out = json::parse(start, p_, nullptr, /*allow_exceptions=*/false);
      return !out->is_discarded();
    }
    switch (*p_) {
      case '{':
        return Object(rule, out, depth + 1);
      case '[':
        return Array(rule, out, depth + 1);
      case '"': {
        const char* start = p_;
        bool escaped = false;
        if (!String(escaped)) return false;
        if (out == nullptr) return true;
        if (!escaped) {
          *out = std::string(start + 1, p_ - 1);
          return true;
        }
        *out = json::parse(start, p_, nullptr, false);
        return !out->is_discarded();
      }
      case 't':
        return Literal("true", out, true);
      case 'f':
        return Literal("false", out, false);
      case 'n':
        return Literal("null", out, nullptr);
      default: {
        const char* start = p_;
        if (!Number()) return false;
        if (out == nullptr) return true;
        *out = json::parse(start, p_, nullptr, false);
        return !out->is_discarded();
      }
    }
  }

  bool Literal(std::string_view word, json* out, json value) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      return false;
    p_ += word.size();
    if (out != nullptr) *out = std::move(value);
    return true;
  }

  const Rule* ChildOfObject(const Rule* rule, std::string_view key) const {
    if (rule == nullptr) return nullptr;
    if (rule->kind == Rule::Kind::kAnnotations) {
      bool wanted = std::find(annotation_keys_.begin(), annotation_keys_.end(), key) !=
                    annotation_keys_.end();
      return wanted ? &kAll : nullptr;
    }
    if (rule->kind != Rule::Kind::kObject) return nullptr;
    for (const auto& [field, child] : rule->fields)
      if (field == key) return child;
    return nullptr;
  }

  // Past the opening bracket; `closed` when the container is empty (and then past it too).
  bool Open(int depth, char close, bool& closed) {
    if (depth > max_depth_) {
      too_deep = true;
      return false;
    }
    ++p_;
    SkipSpace();
    closed = p_ < end_ && *p_ == close;
    if (closed) ++p_;
    return true;
  }

  // After a member or element: a comma (more follow) or the closing bracket (`closed`).
  bool Separator(char close, bool& closed) {
    SkipSpace();
    if (p_ == end_) return false;
    closed = *p_ == close;
    if (!closed && *p_ != ',') return false;
    ++p_;
    return true;
  }

  bool Object(const Rule* rule, json* out, int depth) {
    bool closed = false;
    if (!Open(depth, '}', closed)) return false;
    if (out != nullptr) *out = json::object();
    while (!closed) {
      SkipSpace();
      if (p_ == end_ || *p_ != '"') return false;
      const char* start = p_;
      bool escaped = false;
      if (!String(escaped)) return false;
      std::string key;
      if (out != nullptr) {
        if (escaped) {
          json decoded = json::parse(start, p_, nullptr, false);
          if (!decoded.is_string()) return false;
          key = decoded.get<std::string>();
        } else {
          key.assign(start + 1, p_ - 1);
        }
      }
      SkipSpace();
      if (p_ == end_ || *p_ != ':') return false;
      ++p_;
      const Rule* child = out == nullptr ? nullptr : ChildOfObject(rule, key);
      if (!Value(child, child == nullptr ? nullptr : &(*out)[key], depth)) return false;
      if (!Separator('}', closed)) return false;
    }
    return true;
  }

  bool Array(const Rule* rule, json* out, int depth) {
    bool closed = false;
    if (!Open(depth, ']', closed)) return false;
    if (out != nullptr) *out = json::array();
    const Rule* child = out != nullptr && rule != nullptr && rule->kind == Rule::Kind::kArray
                            ? rule->items
                            : nullptr;
    while (!closed) {
      json* slot = nullptr;
      if (child != nullptr) {
        out->push_back(nullptr);
        slot = &out->back();
      }
      if (!Value(child, slot, depth)) return false;
      if (!Separator(']', closed)) return false;
    }
    return true;
  }

  // From the opening quote to past the closing one.
  bool String(bool& escaped) {
    ++p_;
    while (true) {
      while (p_ < end_ && !kStringStops[Byte(p_)]) ++p_;
      if (p_ == end_) return false;
      const unsigned char c = Byte(p_);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        escaped = true;
        if (!Escape()) return false;
        continue;
      }
      if (!Utf8Sequence()) return false;
    }
  }

  bool Hex4(unsigned& code) {
    if (end_ - p_ < 4) return false;
    code = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      const char c = *p_;
      unsigned digit;
      if (c >= '0' && c <= '9') {
        digit = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<unsigned>(c - 'A' + 10);
      } else {
        return false;
      }
      code = code * 16 + digit;
    }
    return true;
  }

  // After a backslash: one escape; a UTF-16 high surrogate must be followed by a low one.
  bool Escape() {
    ++p_;
    if (p_ == end_) return false;
    const char c = *p_++;
    if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
        c == 't')
      return true;
    if (c != 'u') return false;
    unsigned code = 0;
    if (!Hex4(code)) return false;
    if (code >= 0xDC00 && code <= 0xDFFF) return false;
    if (code < 0xD800 || code > 0xDBFF) return true;
    if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
    p_ += 2;
    unsigned low = 0;
    return Hex4(low) && low >= 0xDC00 && low <= 0xDFFF;
  }

  // RFC 3629's well-formed sequences (no overlongs, surrogates or code points past U+10FFFF).
  bool Utf8Sequence() {
    const unsigned char lead = Byte(p_);
    int continuation;
    unsigned char low = 0x80, high = 0xBF;  // range of the first continuation byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      continuation = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      continuation = 2;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      continuation = 3;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return false;
    }
    if (end_ - p_ <= continuation) return false;
    ++p_;
    for (int i = 0; i < continuation; ++i, ++p_) {
      const unsigned char c = Byte(p_);
      if (c < (i == 0 ? low : 0x80) || c > (i == 0 ? high : 0xBF)) return false;
    }
    return true;
  }

  bool Digits() {
    const char* start = p_;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ > start;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, and like nlohmann::json no number whose
  // value as a double is infinite (1e400; integers too long for 64 bits become doubles).
  bool Number() {
    const char* start = p_;
    if (!NumberSyntax()) return false;
    const bool whole_64_bit = p_ - start <= 18 && std::find_if(start, p_, [](char c) {
                                                    return c == '.' || c == 'e' || c == 'E';
                                                  }) == p_;
    return whole_64_bit || std::isfinite(std::strtod(std::string(start, p_).c_str(), nullptr));
  }

  bool NumberSyntax() {
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ == end_) return false;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      Digits();
    } else {
      return false;
    }
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!Digits()) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!Digits()) return false;
    }
    return true;
  }

  const char* p_;
  const char* const end_;
  const std::vector<std::string_view>& annotation_keys_;
  const int max_depth_;
};

}  // namespace

PrunedReview ParsePrunedReview(std::string_view body,
                               const std::vector<std::string_view>& annotation_keys,
                               int max_depth) {
  Parser parser(body, annotation_keys, max_depth);
  PrunedReview out;
  if (!parser.Document(out.document)) {
    out.error = parser.too_deep ? PrunedReview::Error::kTooDeep : PrunedReview::Error::kNotJson;
    out.document = nullptr;
  }
  return out;
}

}  // namespace kvgpu::webhook
