#include "common/canceller.h"

namespace kvgpu {

void Canceller::Cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  if (hook_) hook_();
}

void Canceller::Reset() {
  std::lock_guard lock(mutex_);
  cancelled_ = false;
}

bool Canceller::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

bool Canceller::Arm(std::function<void()> hook) {
  std::lock_guard lock(mutex_);
  if (cancelled_) return false;
  hook_ = std::move(hook);
  return true;
}

void Canceller::Disarm() {
  std::lock_guard lock(mutex_);
  hook_ = nullptr;
}

}  // namespace kvgpu
