// Named points where a test can make the plugin die as kill -9 would, to prove that a crash at
// any step of allocation or removal leaves the node recoverable (invariants 1-4).
//
// KVGPU_FAILPOINTS="allocate.after-create,remove.before-write" in the environment arms the named
// points; the process then raises SIGKILL when it reaches one. Unset (always, in production),
// each point costs one load of a flag.
#pragma once

#include <string_view>

namespace kvgpu::deviceplugin {

// Points: allocate.after-record, allocate.after-create, allocate.before-reply,
// remove.before-write, remove.after-write; DRA's dra.prepare.after-checkpoint,
// dra.prepare.after-resource (after each resource's vGPUs of a claim), dra.prepare.after-create,
// dra.unprepare.after-remove.
void Failpoint(std::string_view name);

}  // namespace kvgpu::deviceplugin
