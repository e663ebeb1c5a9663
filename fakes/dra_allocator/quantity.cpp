#include "fakes/dra_allocator/quantity.h"

#include <limits>
#include <string>
#include <utility>

namespace kvgpu::testing::dra {

namespace {

Status Bad(std::string_view text, const std::string& why) {
  return Status::Error(ErrorCode::kInvalid,
                       "quantity '" + std::string(text) + "' not modelled: " + why);
}

}  // namespace

Result<int64_t> ParseQuantity(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return Bad(text, "no leading digits (signs and fractions are not read)");
  const std::string_view suffix = text.substr(digits);
  // quantity.go's suffixes: binary (2^10 steps) and decimal (10^3 steps).
  static const std::pair<std::string_view, int64_t> kSuffixes[] = {
      {"", 1},
      {"Ki", int64_t{1} << 10},
      {"Mi", int64_t{1} << 20},
      {"Gi", int64_t{1} << 30},
      {"Ti", int64_t{1} << 40},
      {"Pi", int64_t{1} << 50},
      {"Ei", int64_t{1} << 60},
      {"k", 1000},
      {"M", 1000 * 1000},
      {"G", int64_t{1000} * 1000 * 1000},
      {"T", int64_t{1000} * 1000 * 1000 * 1000},
      {"P", int64_t{1000} * 1000 * 1000 * 1000 * 1000},
      {"E", int64_t{1000} * 1000 * 1000 * 1000 * 1000 * 1000},
  };
  int64_t scale = 0;
  for (const auto& [name, factor] : kSuffixes) {
    if (suffix == name) scale = factor;
  }
  if (scale == 0) return Bad(text, "unknown suffix '" + std::string(suffix) + "'");
  int64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    const int digit = text[i] - '0';
    if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) return Bad(text, "too large");
    value = value * 10 + digit;
  }
  if (value != 0 && scale > std::numeric_limits<int64_t>::max() / value) {
    return Bad(text, "too large");
  }
  return value * scale;
}

}  // namespace kvgpu::testing::dra
