// What the benchmarks report alike: percentiles of a run's samples, and this process's memory as
// the kernel counts it.
#pragma once

#include <algorithm>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace kvgpu::bench {

struct Percentiles {
  double p50 = 0, p99 = 0, max = 0;
};

// Nearest-rank percentiles of `samples` (any unit); all zero for none.
inline Percentiles Summarize(std::vector<double> samples) {
  if (samples.empty()) return {};
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[static_cast<size_t>(q * static_cast<double>(samples.size() - 1))];
  };
  return {at(0.5), at(0.99), samples.back()};
}

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 when absent.
inline long StatusKib(std::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      return std::stol(line.substr(field.size() + 1));
    }
  }
  return -1;
}

}  // namespace kvgpu::bench
