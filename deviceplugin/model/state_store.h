// What this plugin created: the only record that lets it tell its own vGPUs from anyone else's
// (invariant 3) and keep a device ID's meaning across restarts (invariant 4).
//
// Kept behind a small interface so the lifecycle work can add owners and make writes durable
// without touching the resource manager.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgpu::deviceplugin {

struct CreatedVgpu {
  std::string device_id;     // "0000:3b:00.0-nvidia-222-0"
  std::string resource;      // "tencent.com/vgpu-222"
  std::string vgpu_id;       // mdev UUID, or the VF address for vendor VFIO
  std::string parent;        // where it was created
  std::string physical_gpu;  // the PF for a VF, else the parent
  std::string type_id;       // "nvidia-222"
  uint32_t slot = 0;
  int64_t created_unix_ms = 0;  // milliseconds since the epoch
  // Set by the lifecycle tracker once it knows which pod holds the device ID: "namespace/name",
  // and that pod's UID when the API server was followed then (a later pod of the same name is
  // another pod).
  std::optional<std::string> owner_pod;
  std::optional<std::string> owner_uid{};

  bool operator==(const CreatedVgpu&) const = default;
};

// A device ID's pod as the lifecycle learned it; `uid` empty when the API server did not say.
struct PodOwner {
  std::string pod;  // "namespace/name"
  std::string uid;

  bool operator==(const PodOwner&) const = default;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Everything recorded; an absent store is an empty list, a corrupt one an error.
  virtual Result<std::vector<CreatedVgpu>> Load() = 0;
  // Replaces the whole record. On failure the previous record stays readable.
  virtual Status Save(const std::vector<CreatedVgpu>& vgpus) = 0;
};

// For tests and benchmarks: nothing touches disk. `fail_saves` makes Save fail (disk full).
class MemoryStateStore : public StateStore {
 public:
  Result<std::vector<CreatedVgpu>> Load() override { return vgpus_; }
  Status Save(const std::vector<CreatedVgpu>& vgpus) override;

  std::vector<CreatedVgpu> vgpus_;
  bool fail_saves = false;
};

// <state-dir>/device-plugin-state.json, replaced atomically (temp file, fsync, rename, fsync of
// the directory), so a crash leaves either the old or the new record.
class JsonFileStateStore : public StateStore {
 public:
  explicit JsonFileStateStore(std::filesystem::path dir);

  Result<std::vector<CreatedVgpu>> Load() override;
  Status Save(const std::vector<CreatedVgpu>& vgpus) override;

  std::filesystem::path file() const { return dir_ / "device-plugin-state.json"; }

 private:
  std::filesystem::path dir_;
};

// JSON form, shared by the file store and tests: {"version":1,"vgpus":[{...}]}.
std::string EncodeState(const std::vector<CreatedVgpu>& vgpus);
Result<std::vector<CreatedVgpu>> DecodeState(const std::string& text);

// Writes `data` to `path` through a temp file in the same directory: fsync, rename, fsync of the
// directory. The file gets exactly `mode` (whatever the umask). Shared with the CDI spec writer and
// the licensing publisher.
Status WriteFileAtomically(const std::filesystem::path& path, const std::string& data,
                           ::mode_t mode = 0644);

}  // namespace kvgpu::deviceplugin
