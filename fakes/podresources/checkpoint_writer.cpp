#include "fakes/podresources/checkpoint_writer.h"

#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/base64.h"

namespace kvgpu::testing {

CheckpointWriter::CheckpointWriter(std::filesystem::path kubelet_dir, Format format)
    : path_(kubelet_dir / "device-plugins" / "kubelet_internal_checkpoint"), format_(format) {
  std::filesystem::create_directories(path_.parent_path());
}

std::string CheckpointWriter::Render(
    const std::vector<CheckpointRecord>& records,
    const std::map<std::string, std::vector<std::string>>& registered) const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& r : records) {
    nlohmann::json ids;
    if (format_ == Format::kList) {
      ids = r.device_ids;
    } else {
      ids = {{std::to_string(r.numa_node), r.device_ids}};
    }
    // AllocResp is a serialized ContainerAllocateResponse, base64 as Go encodes []byte; an
    // empty one encodes to nothing.
    entries.push_back({{"PodUID", r.pod_uid},
                       {"ContainerName", r.container_name},
                       {"ResourceName", r.resource_name},
                       {"DeviceIDs", ids},
                       {"AllocResp", Base64Encode(r.alloc_resp)}});
  }
  nlohmann::json devices = nlohmann::json::object();
  for (const auto& [resource, ids] : registered) devices[resource] = ids;
  // kubelet's checksum hashes Go's in-memory form; readers do not check it, any number will do.
  return nlohmann::json{{"Data", {{"PodDeviceEntries", entries}, {"RegisteredDevices", devices}}},
                        {"Checksum", 1234567890u}}
      .dump();
}

void CheckpointWriter::Write(
    const std::vector<CheckpointRecord>& records,
    const std::map<std::string, std::vector<std::string>>& registered) const {
  WriteRaw(Render(records, registered));
}

void CheckpointWriter::WriteRaw(const std::string& bytes) const {
  const auto temp = path_.parent_path() / (".tmp-" + path_.filename().string());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  std::filesystem::rename(temp, path_);
}

void CheckpointWriter::TruncateInPlace(std::uintmax_t size) const {
  std::filesystem::resize_file(path_, size);
  // resize_file is a truncate(2): it sends IN_MODIFY only; a writer's close follows.
  std::ofstream(path_, std::ios::binary | std::ios::app).close();
}

void CheckpointWriter::Remove() const {
  std::filesystem::remove(path_);
}

}  // namespace kvgpu::testing
