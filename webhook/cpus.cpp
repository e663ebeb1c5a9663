#include "webhook/cpus.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <string>
#include <thread>

namespace kvgpu::webhook {

size_t UsableCpus(const std::filesystem::path& cpu_max) {
  size_t cpus = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    cpus = static_cast<size_t>(std::max(1, CPU_COUNT(&set)));
  }
  std::ifstream file(cpu_max);
  std::string quota_text, period_text, rest;
  if (!(file >> quota_text >> period_text) || (file >> rest) || quota_text == "max") return cpus;
  long long quota = 0, period = 0;
  auto parse = [](const std::string& text, long long& value) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    return ec == std::errc() && end == text.data() + text.size() && value > 0;
  };
  if (!parse(quota_text, quota) || !parse(period_text, period)) return cpus;
  const auto limit = static_cast<size_t>(std::max(1LL, (quota + period - 1) / period));
  return std::min(cpus, limit);
}

}  // namespace kvgpu::webhook
