// Who holds a device ID now. Allocate does not say which pod it serves and there is no
// Deallocate, so when kubelet hands out a device ID whose earlier vGPU still exists, only this
// answer decides what happens to that vGPU (invariant 1: never destroy a vGPU a live pod uses;
// and a vGPU is never shared between pods).
//
// kubelet means never to hand a device that an active pod holds to another pod, and asks for a
// pod's device again only when its app container reuses its init container's: that pod gets its
// existing vGPU back. kubelet can lose a device from its in-use set (a PodResources List while an
// allocation is in flight), and then hands to a second pod a device it lists a first pod holding:
// refused, never the same vGPU for two pods.
#pragma once

#include <string>
#include <vector>

#include "deviceplugin/model/state_store.h"

namespace kvgpu::deviceplugin {

enum class Holding {
  kFree,     // no live pod holds the device ID: its old vGPU is removed and made anew
  kHeld,     // a live pod holds it: that pod asks again (its next container, or kubelet
             // after a restart), it gets the same vGPU
  kUnknown,  // nobody can tell: refused, the old vGPU is kept untouched
};

// The one verdict type: Allocate's question (holders.h) and the lifecycle's (Judge) alike.
struct Verdict {
  Holding holding = Holding::kUnknown;
  std::string holder;        // "namespace/pod" when known, for messages and the record's owner
  std::string why;           // for logs
  std::string holder_uid{};  // the holder's UID, when the API server shows it
};

class HolderOracle {
 public:
  virtual ~HolderOracle() = default;
  virtual Verdict Check(const CreatedVgpu& vgpu) = 0;
  // One answer per record, from one look at the sources (one PodResources List for the lot).
  // Never called under the manager's lock: asking kubelet may take up to its deadline.
  // kubelet called Allocate and got vGPUs: it is admitting pods from its sources again.
  virtual void OnAllocated() {}
  // Whether a verdict may depend on when a vGPU was handed out (CreatedVgpu::created_unix_ms as
  // stamped when Allocate returns): the model then saves that stamp at once, so a restart keeps
  // it. An oracle that decides from its own records (the DRA front end's prepared claims, written
  // before the vGPU is made) spares the request path that write.
  virtual bool UsesHandoutTime() const { return true; }
  virtual std::vector<Verdict> CheckAll(const std::vector<CreatedVgpu>& vgpus) {
    std::vector<Verdict> out;
    out.reserve(vgpus.size());
    for (const CreatedVgpu& v : vgpus) out.push_back(Check(v));
    return out;
  }
};

// The default without pod tracking: never claims a device ID is free or held.
class UnknownHolders : public HolderOracle {
 public:
  Verdict Check(const CreatedVgpu&) override { return {}; }
};

}  // namespace kvgpu::deviceplugin
