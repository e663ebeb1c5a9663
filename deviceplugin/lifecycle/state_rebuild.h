// When the state file is corrupt: which vGPUs are ours after all. kubelet's checkpoint keeps the
// answer this plugin gave every Allocate (AllocResp), and that answer names each device ID's vGPU
// in its environment (KVGPU_<RESOURCE>_DEVICE_IDS / _UUIDS). A vGPU the kernel still shows and an
// answer of ours names is ours again; every other vGPU stays of unknown origin and is never
// touched (invariant 3).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"
#include "deviceplugin/model/state_store.h"
#include "kube/kubelet/checkpoint.h"
#include "mdev/backend.h"
#include "mdev/model.h"

namespace kvgpu::deviceplugin {

struct Rebuilt {
  std::vector<CreatedVgpu> vgpus;
  std::vector<std::string> notes;  // what could not be matched, for the log
};

Rebuilt RebuildRecords(const kubelet::Checkpoint& checkpoint, const mdev::Inventory& inventory,
                       int64_t now_unix_ms);

// The daemon's start with a corrupt state file (`corrupt`: why it would not load): the file is
// kept beside for a post-mortem (<file>.corrupt-<unix seconds>), then the records are rebuilt from
// kubelet's checkpoint under `kubelet_dir` and what `backend` shows, and saved. An unusable
// checkpoint leaves every existing vGPU someone else's. Fails when the file cannot be moved aside,
// the backend cannot be read or the rebuilt records cannot be saved.
Status RebuildCorruptState(JsonFileStateStore& store, const Status& corrupt, mdev::Backend& backend,
                           const std::filesystem::path& kubelet_dir);

}  // namespace kvgpu::deviceplugin
