// Who holds a device ID now. Allocate does not say which pod it serves and there is no
// Deallocate, so when kubelet hands out a device ID whose earlier vGPU still exists, only this
// answer decides whether that vGPU may be destroyed and made fresh (invariant 1: never destroy a
// vGPU a live pod uses). The lifecycle tracker (kubelet PodResources, checkpoint, API server)
// implements it; until then nothing can know, and the answer is "unknown".
#pragma once

#include <string>

#include "deviceplugin/state_store.h"

namespace kvgpu::deviceplugin {

enum class Holding {
  kFree,     // no live pod holds the device ID: its old vGPU may be removed and recreated
  kHeld,     // a live pod holds it: kubelet reused the ID too early; refuse
  kUnknown,  // nobody can tell: treated as held, the old vGPU is kept
};

struct HolderAnswer {
  Holding holding = Holding::kUnknown;
  std::string holder;  // "namespace/pod" when known, for messages
};

class HolderOracle {
 public:
  virtual ~HolderOracle() = default;
  virtual HolderAnswer Check(const CreatedVgpu& vgpu) = 0;
};

// The default without a lifecycle tracker: never claims a device ID is free.
class UnknownHolders : public HolderOracle {
 public:
  HolderAnswer Check(const CreatedVgpu&) override { return {}; }
};

}  // namespace kvgpu::deviceplugin
