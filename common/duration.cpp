#include "common/duration.h"

#include <cctype>
#include <string>

namespace kvgpu {

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  auto invalid = [&](const char* why) {
    return Status::Error(ErrorCode::kInvalid, "duration \"" + std::string(text) + "\" " + why);
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string_view unit = text.substr(digits);
  if (digits == 0 || digits > 9) return invalid("must be a number with ms, s or m");
  int64_t n = std::stoll(std::string(text.substr(0, digits)));
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit == "s") return std::chrono::milliseconds(n * 1000);
  if (unit == "m") return std::chrono::milliseconds(n * 60000);
  return invalid("must end in ms, s or m");
}

}  // namespace kvgpu
