// Lets one thread break another's call in flight: Stop() of a watch blocked in a read, a list or
// a patch against an API server that answers slowly, a registration with a kubelet that accepts
// and never answers. The transport arms it with what breaks its call (closing the connection,
// cancelling the gRPC context) for as long as the call lasts.
#pragma once

#include <functional>
#include <mutex>

namespace kvgpu {

class Canceller {
 public:
  // Breaks the call in flight, and every later one until Reset().
  void Cancel();
  void Reset();
  bool cancelled() const;
  // For transports: `hook` breaks the call now in flight; false when already cancelled.
  bool Arm(std::function<void()> hook);
  void Disarm();

 private:
  mutable std::mutex mutex_;
  bool cancelled_ = false;
  std::function<void()> hook_;
};

// Arms `cancel` (may be null: nothing to arm) with `hook` for as long as it lives: one call's
// scope. `cancelled()` says whether the call should not start, or was broken.
class ArmedCall {
 public:
  ArmedCall(Canceller* cancel, std::function<void()> hook) : cancel_(cancel) {
    if (cancel_ != nullptr) armed_ = cancel_->Arm(std::move(hook));
  }
  ~ArmedCall() {
    if (cancel_ != nullptr && armed_) cancel_->Disarm();
  }
  ArmedCall(const ArmedCall&) = delete;
  ArmedCall& operator=(const ArmedCall&) = delete;
  bool cancelled() const { return cancel_ != nullptr && (!armed_ || cancel_->cancelled()); }

 private:
  Canceller* cancel_;
  bool armed_ = true;
};

}  // namespace kvgpu
