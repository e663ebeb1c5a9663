#include "common/backoff.h"

#include <algorithm>

namespace kvgpu {

Backoff::Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, double jitter,
                 std::uint32_t seed)
    : initial_(initial),
      max_(std::max(max, initial)),
      jitter_(std::clamp(jitter, 0.0, 1.0)),
      random_(seed) {}

std::chrono::milliseconds Backoff::Next() {
  auto base = initial_;
  for (int i = 0; i < failures_ && base < max_; ++i) base *= 2;
  base = std::min(base, max_);
  ++failures_;
  if (jitter_ == 0.0) return base;
  std::uniform_real_distribution<double> factor(1.0 - jitter_, 1.0);
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(static_cast<double>(base.count()) * factor(random_)));
}

}  // namespace kvgpu
