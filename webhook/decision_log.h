// One log line per admission decision (mutated, denied, skipped; namespace, pod, reason), so an
// operator can tell from the webhook's log what it did to a pod. Rate-limited: a flood of
// reviews must not turn into a flood of log writes (a token bucket; the lines dropped are
// counted and said when logging resumes). Text that came from a request never reaches the log
// raw: it goes through common/log_safe.h, as the device plugin's peer text does.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "common/log_safe.h"

namespace kvgpu::webhook {

// Request text in the log: common/log_safe.h, with room for a pod name and a denial reason.
inline constexpr size_t kLogSafeBytes = 300;

class DecisionLog {
 public:
  using Clock = std::chrono::steady_clock;
  using Sink = std::function<void(const std::string& line)>;

  // `per_second` lines on average, bursts of up to `burst`. `noun` names what was dropped in
  // the line that says so.
  DecisionLog(double per_second, double burst, Sink sink,
              std::function<Clock::time_point()> now = Clock::now, std::string noun = "decisions");

  void Record(std::string_view decision, std::string_view namespace_name, std::string_view pod,
              std::string_view reason);
  // Any other line under the same limit (bad reviews): `text` is written as given, so it must
  // already be log-safe.
  void Say(std::string_view text);

 private:
  // Takes a token; false when the line is to be dropped. `prefix` says how many were dropped.
  bool Take(std::string& prefix);

  double per_second_;
  double burst_;
  Sink sink_;
  std::function<Clock::time_point()> now_;
  std::mutex mutex_;
  double tokens_;
  Clock::time_point last_;
  size_t dropped_ = 0;
  std::string noun_;
};

}  // namespace kvgpu::webhook
