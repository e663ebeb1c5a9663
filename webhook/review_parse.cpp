#include "webhook/review_parse.h"

#include <simdjson.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "webhook/pod_fields.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

using Rule = FieldRule;

const Rule& kKeepAll = KeepAll();
const Rule kRequest{Rule::Kind::kObject,
                    {{"uid", &kKeepAll},
                     {"kind", &kKeepAll},
                     {"resource", &kKeepAll},
                     {"subResource", &kKeepAll},
                     {"operation", &kKeepAll},
                     {"namespace", &kKeepAll},
                     {"name", &kKeepAll},
                     {"object", &PodRule()}}};
const Rule kReview{Rule::Kind::kObject,
                   {{"apiVersion", &kKeepAll}, {"kind", &kKeepAll}, {"request", &kRequest}}};

const Rule* ChildOfObject(const Rule* rule, std::string_view key,
                          const std::vector<std::string_view>& annotation_keys) {
  if (rule == &kKeepAll) return &kKeepAll;
  if (rule->kind == FieldRule::Kind::kAnnotations) {
    bool wanted =
        std::find(annotation_keys.begin(), annotation_keys.end(), key) != annotation_keys.end();
    return wanted ? &kKeepAll : nullptr;
  }
  if (rule->kind != Rule::Kind::kObject) return nullptr;
  for (const auto& [field, child] : rule->fields)
    if (field == key) return child;
  return nullptr;
}

const Rule* ItemOfArray(const Rule* rule) {
  if (rule == &kKeepAll) return &kKeepAll;
  return rule->kind == Rule::Kind::kArray ? rule->items : nullptr;
}

// nlohmann's SAX events, turned into a document that holds only what the rules keep. The
// grammar, the escapes, UTF-8 and number range are nlohmann's own lexer's: this handler only
// decides where each value goes. A value with no place (nullptr slot) is validated and dropped.
class PruningHandler : public nlohmann::json_sax<json> {
 public:
  PruningHandler(json& root, const std::vector<std::string_view>& annotation_keys, int max_depth,
                 size_t max_cost)
      : annotation_keys_(annotation_keys),
        max_depth_(max_depth),
        max_cost_(max_cost),
        slot_(&root),
        rule_(&kReview) {}

  bool too_deep = false;
  bool too_large = false;
  size_t cost() const { return cost_; }

  bool null() override { return Scalar(nullptr); }
  bool boolean(bool value) override { return Scalar(value); }
  bool number_integer(number_integer_t value) override { return Scalar(value); }
  bool number_unsigned(number_unsigned_t value) override { return Scalar(value); }
  bool number_float(number_float_t value, const string_t& /*text*/) override {
    return Scalar(value);
  }
  // Copied, not moved: the lexer's buffer has grown by doubling, and a moved string would keep
  // that capacity (up to twice what is charged for it).
  bool string(string_t& value) override { return Scalar(string_t(value), value.size()); }
  bool binary(binary_t& /*value*/) override { return false; }  // not in JSON text

  bool start_object(std::size_t /*elements*/) override { return Open(json::object()); }
  bool start_array(std::size_t /*elements*/) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& name) override {
    const Frame& frame = frames_.back();
    const Rule* child =
        frame.node == nullptr ? nullptr : ChildOfObject(frame.rule, name, annotation_keys_);
    // std::map nodes stay put, so the slot survives later members (a repeated key overwrites,
    // as in nlohmann's own DOM). The key is copied for the reason string() copies.
    if (child != nullptr && !Spend(name.size())) return false;
    slot_ = child == nullptr ? nullptr : &(*frame.node)[string_t(name)];
    rule_ = child;
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& /*error*/) override {
    return false;
  }

 private:
  struct Frame {
    json* node;  // nullptr: a dropped container, its values dropped too
    const Rule* rule;
    bool array;
  };

  // Where the value starting now goes: the slot a key chose, or a new element of a kept array.
  void PlaceInArray() {
    if (frames_.empty() || !frames_.back().array) return;
    const Frame& frame = frames_.back();
    const Rule* item = frame.node == nullptr ? nullptr : ItemOfArray(frame.rule);
    if (item == nullptr) {
      slot_ = nullptr;
      rule_ = nullptr;
      return;
    }
    frame.node->push_back(nullptr);
    slot_ = &frame.node->back();
    rule_ = item;
  }

  // Every value kept is charged before it is built: what the document may cost is bounded by
  // the caller (a review's share of the server's memory budget), however the body is shaped.
  bool Spend(size_t string_bytes) {
    cost_ += kValueCost + string_bytes;
    if (cost_ <= max_cost_) return true;
    too_large = true;
    return false;
  }

  bool Scalar(json value, size_t string_bytes = 0) {
    PlaceInArray();
    if (slot_ == nullptr) return true;
    if (!Spend(string_bytes)) return false;
    *slot_ = std::move(value);
    return true;
  }

  // A container whose type does not match its rule (an array where an object is expected) is
  // kept empty: the decision only needs its type to report the error.
  bool Open(json empty) {
    if (static_cast<int>(frames_.size()) >= max_depth_) {
      too_deep = true;
      return false;
    }
    PlaceInArray();
    const bool array = empty.is_array();
    if (slot_ != nullptr && !Spend(0)) return false;
    if (slot_ != nullptr) *slot_ = std::move(empty);
    frames_.push_back({slot_, rule_, array});
    return true;
  }

  bool Close() {
    frames_.pop_back();
    return true;
  }

  const std::vector<std::string_view>& annotation_keys_;
  const int max_depth_;
  const size_t max_cost_;
  size_t cost_ = 0;
  std::vector<Frame> frames_;
  json* slot_;
  const Rule* rule_;
};

// The same pruning on simdjson's DOM, for bodies up to kFastParseBytes. simdjson validates all
// of the text first (grammar, escapes and surrogate pairs, UTF-8, unescaped control characters,
// numbers, nesting to its max_depth); only then is the tape walked, and a subtree the rules drop
// is stepped over in one move instead of being lexed value by value. It places, charges and
// refuses exactly as PruningHandler does, in the same order, so the two give the same document,
// the same cost and the same error (tests/webhook/review_parse_test.cpp runs both on every case;
// the fuzzer too). Whatever simdjson refuses goes to nlohmann's parser, which then decides: it
// accepts a superset (a UTF-8 byte order mark, integers past 64 bits read as doubles) and names
// the error as before.
class DomPruner {
 public:
  DomPruner(const std::vector<std::string_view>& annotation_keys, int max_depth, size_t max_cost)
      : annotation_keys_(annotation_keys), max_depth_(max_depth), max_cost_(max_cost) {}

  bool too_deep = false;
  bool too_large = false;
  size_t cost() const { return cost_; }

  // Fills `slot` (a kept value) from `value` by `rule`; `depth` containers enclose it. False:
  // stopped (too_deep or too_large).
  bool Keep(simdjson::dom::element value, const Rule* rule, json& slot, int depth) {
    using Type = simdjson::dom::element_type;
    switch (value.type()) {
      case Type::OBJECT: {
        if (!Open(depth)) return false;
        slot = json::object();
        const simdjson::dom::object object = value.get_object().value_unsafe();
        for (simdjson::dom::key_value_pair field : object) {
          const Rule* child = ChildOfObject(rule, field.key, annotation_keys_);
          if (child == nullptr) continue;
          if (!Spend(field.key.size())) return false;
          if (!Keep(field.value, child, slot[std::string(field.key)], depth + 1)) return false;
        }
        return true;
      }
      case Type::ARRAY: {
        if (!Open(depth)) return false;
        slot = json::array();
        const Rule* item = ItemOfArray(rule);
        if (item == nullptr) return true;
        const simdjson::dom::array array = value.get_array().value_unsafe();
        for (simdjson::dom::element element : array) {
          slot.push_back(nullptr);
          if (!Keep(element, item, slot.back(), depth + 1)) return false;
        }
        return true;
      }
      case Type::STRING: {
        const std::string_view text = value.get_string().value_unsafe();
        if (!Spend(text.size())) return false;
        slot = std::string(text);
        return true;
      }
      case Type::INT64: {
        // nlohmann reads a number without a minus sign as unsigned, one with it as signed ("-0"
        // is the one text this cannot tell: it is kept as unsigned 0, equal to signed 0).
        const int64_t number = value.get_int64().value_unsafe();
        if (!Spend(0)) return false;
        if (number < 0) {
          slot = number;
        } else {
          slot = static_cast<uint64_t>(number);
        }
        return true;
      }
      case Type::UINT64:
        if (!Spend(0)) return false;
        slot = value.get_uint64().value_unsafe();
        return true;
      case Type::DOUBLE:
        if (!Spend(0)) return false;
        slot = value.get_double().value_unsafe();
        return true;
      case Type::BOOL:
        if (!Spend(0)) return false;
        slot = value.get_bool().value_unsafe();
        return true;
      case Type::NULL_VALUE:
        if (!Spend(0)) return false;
        slot = nullptr;
        return true;
    }
    return true;
  }

 private:
  // PruningHandler::Open's test: the container about to open would be the (depth + 1)th.
  bool Open(int depth) {
    if (depth >= max_depth_) {
      too_deep = true;
      return false;
    }
    return Spend(0);
  }
  bool Spend(size_t string_bytes) {
    cost_ += kValueCost + string_bytes;
    if (cost_ <= max_cost_) return true;
    too_large = true;
    return false;
  }

  const std::vector<std::string_view>& annotation_keys_;
  const int max_depth_;
  const size_t max_cost_;
  size_t cost_ = 0;
};

// Bodies up to this size take the simdjson path. Its parser is kept per thread and sized once:
// about 14 bytes per input byte (structural indexes, tape, string buffer, a padded copy of the
// body), ~0.9 MiB for 64 KiB; the pages are touched only as far as the largest body parsed. An
// ordinary review is 3-20 KiB; a larger one is parsed by nlohmann as before.
constexpr size_t kFastParseBytes = 64 * 1024;

simdjson::dom::parser* FastParser(int max_depth) {
  thread_local std::unique_ptr<simdjson::dom::parser> parser;
  thread_local int depth = 0;
  if (!parser || depth != max_depth) {
    auto fresh = std::make_unique<simdjson::dom::parser>(kFastParseBytes);
    if (fresh->allocate(kFastParseBytes, static_cast<size_t>(std::max(max_depth, 1))) !=
        simdjson::SUCCESS)
      return nullptr;
    parser = std::move(fresh);
    depth = max_depth;
  }
  return parser.get();
}

// True when simdjson took the body: `out` is then the answer. False: nlohmann's turn.
bool ParseFast(std::string_view body, const std::vector<std::string_view>& annotation_keys,
               int max_depth, size_t max_cost, PrunedReview& out) {
  if (body.size() > kFastParseBytes || max_depth < 1) return false;
  simdjson::dom::parser* parser = FastParser(max_depth);
  if (parser == nullptr) return false;
  simdjson::dom::element root;
  if (parser->parse(body.data(), body.size(), true).get(root) != simdjson::SUCCESS) return false;
  DomPruner pruner(annotation_keys, max_depth, max_cost);
  if (!pruner.Keep(root, &kReview, out.document, 0)) {
    out.error = pruner.too_deep ? PrunedReview::Error::kTooDeep : PrunedReview::Error::kTooLarge;
    out.document = nullptr;
  }
  out.cost = pruner.cost();
  return true;
}

}  // namespace

PrunedReview ParsePrunedReviewStreaming(std::string_view body,
                                        const std::vector<std::string_view>& annotation_keys,
                                        int max_depth, size_t max_cost) {
  PrunedReview out;
  // nlohmann's lexer takes a NUL byte for the end of the input and accepts what came before;
  // raw NUL is never valid JSON (not between tokens, not unescaped in a string).
  if (body.find('\0') != std::string_view::npos) {
    out.error = PrunedReview::Error::kNotJson;
    return out;
  }
  PruningHandler handler(out.document, annotation_keys, max_depth, max_cost);
  if (!json::sax_parse(body.begin(), body.end(), &handler)) {
    out.error = handler.too_deep    ? PrunedReview::Error::kTooDeep
                : handler.too_large ? PrunedReview::Error::kTooLarge
                                    : PrunedReview::Error::kNotJson;
    out.document = nullptr;
  }
  out.cost = handler.cost();
  return out;
}

PrunedReview ParsePrunedReview(std::string_view body,
                               const std::vector<std::string_view>& annotation_keys, int max_depth,
                               size_t max_cost) {
  PrunedReview out;
  if (ParseFast(body, annotation_keys, max_depth, max_cost, out)) return out;
  return ParsePrunedReviewStreaming(body, annotation_keys, max_depth, max_cost);
}

}  // namespace kvgpu::webhook
