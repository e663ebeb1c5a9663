#include "deviceplugin/dra/device_name.h"

#include <cstdio>

namespace kvgpu::deviceplugin::dra {

std::string DraSanitize(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    const bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (keep) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string DraShortHash(std::string_view text) {
  uint32_t hash = 2166136261u;
  for (char c : text) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 16777619u;
  }
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", hash);
  return buf;
}

std::string DraFit(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  std::string head(text.substr(0, limit - 9));
  while (!head.empty() && (head.back() == '-' || head.back() == '.')) head.pop_back();
  return head + "-" + DraShortHash(text);
}

std::string DraGpuKey(std::string_view physical_gpu) {
  return "gpu-" + DraSanitize(physical_gpu);
}

std::string DraDeviceName(std::string_view physical_gpu, std::string_view type_id, uint32_t slot) {
  const std::string suffix = "-" + std::to_string(slot);
  return DraFit(DraGpuKey(physical_gpu) + "-" + DraSanitize(type_id),
                kMaxDraDeviceNameLength - suffix.size()) +
         suffix;
}

std::string DraPoolName(std::string_view node_name) {
  return std::string(node_name);
}

}  // namespace kvgpu::deviceplugin::dra
