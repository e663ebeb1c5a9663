// Writes kubelet's device-manager checkpoint the way kubelet does (temp file in the same
// directory, then rename), in either format, plus the damage a crash or a bad disk leaves.
// Differs from the real kubelet (writeCheckpoint in devicemanager/manager.go, 1.36 and 1.37; a busy
// CI run read a file without a pod PodResources listed): kubelet copies its books under its lock
// and writes after releasing it, so its concurrent writes can land out of order and the file
// lack a running pod until its next write. Whoever drives this writer chooses what each file
// holds, a stale one included; the fakes composed with it write in order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace kvgpu::testing {

struct CheckpointRecord {
  std::string pod_uid;
  std::string container_name;
  std::string resource_name;
  std::vector<std::string> device_ids;
  std::int64_t numa_node = -1;  // the map format's key; -1 is "no topology"
  std::string alloc_resp{};     // the plugin's ContainerAllocateResponse, serialized
};

class CheckpointWriter {
 public:
  enum class Format { kList /* before 1.20 */, kNumaMap /* 1.20 on */ };

  // `kubelet_dir` as kubelet's root; the file goes to device-plugins/kubelet_internal_checkpoint.
  explicit CheckpointWriter(std::filesystem::path kubelet_dir, Format format = Format::kNumaMap);

  // The JSON kubelet would write for these entries and registered devices.
  std::string Render(const std::vector<CheckpointRecord>& records,
                     const std::map<std::string, std::vector<std::string>>& registered) const;
  // Temp file + rename, as kubelet's checkpoint manager does.
  void Write(const std::vector<CheckpointRecord>& records,
             const std::map<std::string, std::vector<std::string>>& registered = {}) const;
  // Raw bytes, replacing the file by rename (garbage, a truncated copy, ...).
  void WriteRaw(const std::string& bytes) const;
  // Cuts the current file to `size` bytes in place, as a crash mid-write on a filesystem
  // without rename would.
  void TruncateInPlace(std::uintmax_t size) const;
  void Remove() const;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  Format format_;
};

}  // namespace kvgpu::testing
