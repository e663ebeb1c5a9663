// When the state file is corrupt: which vGPUs are ours after all. kubelet's checkpoint keeps the
// answer this plugin gave every Allocate (AllocResp), and that answer names each device ID's vGPU
// in its environment (KVGPU_<RESOURCE>_DEVICE_IDS / _UUIDS). A vGPU the kernel still shows and an
// answer of ours names is ours again; every other vGPU stays of unknown origin and is never
// touched (invariant 3).
#pragma once

#include <string>
#include <vector>

#include "deviceplugin/model/state_store.h"
#include "kube/kubelet/checkpoint.h"
#include "mdev/model.h"

namespace kvgpu::deviceplugin {

struct Rebuilt {
  std::vector<CreatedVgpu> vgpus;
  std::vector<std::string> notes;  // what could not be matched, for the log
};

Rebuilt RebuildRecords(const kubelet::Checkpoint& checkpoint, const mdev::Inventory& inventory,
                       int64_t now_unix_ms);

}  // namespace kvgpu::deviceplugin
