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

}  // namespace kvgpu
