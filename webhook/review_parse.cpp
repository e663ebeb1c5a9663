#include "webhook/review_parse.h"

#include <algorithm>
#include <initializer_list>
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

}  // namespace

PrunedReview ParsePrunedReview(std::string_view body,
                               const std::vector<std::string_view>& annotation_keys, int max_depth,
                               size_t max_cost) {
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

}  // namespace kvgpu::webhook
