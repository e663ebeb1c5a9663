#include "webhook/decision_log.h"

#include <algorithm>

namespace kvgpu::webhook {

DecisionLog::DecisionLog(double per_second, double burst, Sink sink,
                         std::function<Clock::time_point()> now, std::string noun)
    : per_second_(per_second),
      burst_(burst),
      sink_(std::move(sink)),
      now_(std::move(now)),
      tokens_(burst),
      last_(now_()),
      noun_(std::move(noun)) {}

bool DecisionLog::Take(std::string& prefix) {
  std::lock_guard lock(mutex_);
  Clock::time_point now = now_();
  tokens_ =
      std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * per_second_);
  last_ = now;
  if (tokens_ < 1) {
    ++dropped_;
    return false;
  }
  tokens_ -= 1;
  if (dropped_ > 0) {
    prefix = "(" + std::to_string(dropped_) + " " + noun_ + " not logged: rate limit) ";
    dropped_ = 0;
  }
  return true;
}

void DecisionLog::Say(std::string_view text) {
  std::string line;
  if (!Take(line)) return;
  line += text;
  sink_(line);
}

void DecisionLog::Record(std::string_view decision, std::string_view namespace_name,
                         std::string_view pod, std::string_view reason) {
  std::string line;
  if (!Take(line)) return;
  line += "pod " + LogSafe(namespace_name, 63) + "/" +
          LogSafe(pod.empty() ? "<generated>" : pod, 253) + ": " + LogSafe(decision, 40);
  if (!reason.empty()) line += " (" + LogSafe(reason, kLogSafeBytes) + ")";
  sink_(line);
}

}  // namespace kvgpu::webhook
