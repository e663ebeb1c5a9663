#include "mdev/nvidia.h"

#include <cctype>
#include <charconv>
#include <limits>

namespace kvgpu::mdev {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool IsDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

template <typename T>
std::optional<T> ParseNumber(std::string_view s) {
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

// "1024M" / "16G" / "1024" (MiB when no unit).
std::optional<uint64_t> ParseFramebufferMib(std::string_view s) {
  uint64_t scale = 1;
  if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) {
    s.remove_suffix(1);
  } else if (!s.empty() && (s.back() == 'G' || s.back() == 'g')) {
    s.remove_suffix(1);
    scale = 1024;
  }
  auto value = ParseNumber<uint64_t>(s);
  if (!value || *value > std::numeric_limits<uint64_t>::max() / scale) return std::nullopt;
  return *value * scale;
}

bool IsResolution(std::string_view s) {
  size_t x = s.find('x');
  return x != std::string_view::npos && IsDigits(s.substr(0, x)) && IsDigits(s.substr(x + 1));
}

}  // namespace

std::optional<NvidiaProfile> ParseNvidiaProfile(std::string_view type_name) {
  type_name = Trim(type_name);
  size_t space = type_name.find_last_of(" \t");
  std::string_view token =
      space == std::string_view::npos ? type_name : type_name.substr(space + 1);
  size_t dash = token.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash + 1 >= token.size()) return std::nullopt;
  std::string_view gpu = token.substr(0, dash);
  std::string_view size = token.substr(dash + 1);
  // The size part starts with a count ("1Q", "1-18C", "2B4"); its last letter is the series.
  if (!std::isdigit(static_cast<unsigned char>(size.front()))) return std::nullopt;
  char series = 0;
  for (char c : size) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      series = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!std::isdigit(static_cast<unsigned char>(c)) && c != '-') {
      return std::nullopt;
    }
  }
  if (series == 0) return std::nullopt;
  for (char c : gpu) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return std::nullopt;
  }
  // "1-18C": a MIG-backed type of 1 slice and 18 GB; "2B4", "1Q": time-sliced, 2 and 1 GB.
  uint32_t first = 0;
  uint32_t second = 0;
  bool dashed = false;
  for (char c : size) {
    if (c == '-') {
      dashed = true;
    } else if (!std::isdigit(static_cast<unsigned char>(c))) {
      break;
    } else {
      uint32_t& n = dashed ? second : first;
      n = n * 10 + static_cast<uint32_t>(c - '0');
      if (n > 1u << 20) return std::nullopt;
    }
  }
  return NvidiaProfile{std::string(token), std::string(gpu), series, dashed ? second : first,
                       dashed ? first : 0};
}

Result<NvidiaDescription> ParseNvidiaDescription(std::string_view description) {
  NvidiaDescription out;
  std::string_view rest = description;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = Trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Status::Error(ErrorCode::kInvalid,
                           "description item '" + std::string(item) + "' is not key=value");
    }
    std::string_view key = Trim(item.substr(0, eq));
    std::string_view value = Trim(item.substr(eq + 1));
    auto bad = [&] {
      return Status::Error(ErrorCode::kInvalid, "description key '" + std::string(key) +
                                                    "' has an unreadable value '" +
                                                    std::string(value) + "'");
    };
    if (key == "framebuffer") {
      out.framebuffer_mib = ParseFramebufferMib(value);
      if (!out.framebuffer_mib) return bad();
    } else if (key == "max_instance") {
      out.max_instance = ParseNumber<uint32_t>(value);
      if (!out.max_instance) return bad();
    } else if (key == "num_heads") {
      out.num_heads = ParseNumber<uint32_t>(value);
      if (!out.num_heads) return bad();
    } else if (key == "frl_config") {
      out.frl_config = ParseNumber<uint32_t>(value);
      if (!out.frl_config) return bad();
    } else if (key == "max_resolution") {
      if (!IsResolution(value)) return bad();
      out.max_resolution = std::string(value);
    }
    // Other keys appear in newer drivers; they are not needed and must not break discovery.
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> ParseCreatableVgpuTypes(
    std::string_view content) {
  std::vector<std::pair<std::string, std::string>> types;
  bool header_seen = false;
  size_t line_number = 0;
  while (!content.empty()) {
    size_t nl = content.find('\n');
    std::string_view line = Trim(content.substr(0, nl));
    content = nl == std::string_view::npos ? std::string_view() : content.substr(nl + 1);
    ++line_number;
    if (line.empty()) continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return Status::Error(ErrorCode::kInvalid, "creatable_vgpu_types line " +
                                                    std::to_string(line_number) + " '" +
                                                    std::string(line) + "' has no ':'");
    }
    std::string_view id = Trim(line.substr(0, colon));
    std::string_view name = Trim(line.substr(colon + 1));
    if (!header_seen && id == "ID") {
      header_seen = true;
      continue;
    }
    if (!IsDigits(id) || name.empty()) {
      return Status::Error(ErrorCode::kInvalid, "creatable_vgpu_types line " +
                                                    std::to_string(line_number) + " '" +
                                                    std::string(line) + "' is not '<id> : <name>'");
    }
    types.emplace_back(std::string(id), std::string(name));
  }
  return types;
}

bool IsNvidiaMdevType(std::string_view type_id) {
  constexpr std::string_view kPrefix = "nvidia-";
  return type_id.substr(0, kPrefix.size()) == kPrefix && IsDigits(type_id.substr(kPrefix.size()));
}

void FillNvidiaDetails(VgpuType& type) {
  if (!IsNvidiaMdevType(type.id)) return;
  if (type.description) {
    auto parsed = ParseNvidiaDescription(*type.description);
    if (parsed.ok()) type.nvidia = *parsed;
  }
  if (type.name) type.profile = ParseNvidiaProfile(*type.name);
}

}  // namespace kvgpu::mdev
