#include "deviceplugin/model/state_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvgpu::deviceplugin {
namespace {

using nlohmann::json;

constexpr int kStateVersion = 1;

Status ErrnoStatus(const std::string& what) {
  int err = errno;
  return Status::FromErrno(err, what + ": " + std::strerror(err));
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write " + path);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status FsyncDir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + dir.string());
  int rc = ::fsync(fd);
  Status status = rc == 0 ? Status::Ok() : ErrnoStatus("fsync " + dir.string());
  ::close(fd);
  return status;
}

}  // namespace

Status WriteFileAtomically(const std::filesystem::path& path, const std::string& data,
                           ::mode_t mode) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus("create " + tmp.string());
  Status status = ::fchmod(fd, mode) == 0 ? Status::Ok() : ErrnoStatus("chmod " + tmp.string());
  if (status.ok()) status = WriteAll(fd, data, tmp.string());
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus("fsync " + tmp.string());
  ::close(fd);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus("rename " + tmp.string() + " to " + path.string());
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return FsyncDir(path.parent_path().empty() ? "." : path.parent_path());
}

std::string EncodeState(const std::vector<CreatedVgpu>& vgpus) {
  json list = json::array();
  for (const CreatedVgpu& v : vgpus) {
    json entry = {{"deviceID", v.device_id},
                  {"resource", v.resource},
                  {"vgpu", v.vgpu_id},
                  {"parent", v.parent},
                  {"gpu", v.physical_gpu},
                  {"type", v.type_id},
                  {"slot", v.slot},
                  {"created", v.created_unix_ms / 1000},
                  {"createdMs", v.created_unix_ms}};
    if (v.owner_pod) entry["ownerPod"] = *v.owner_pod;
    if (v.owner_uid) entry["ownerUid"] = *v.owner_uid;
    list.push_back(std::move(entry));
  }
  return json{{"version", kStateVersion}, {"vgpus", std::move(list)}}.dump(2) + "\n";
}

Result<std::vector<CreatedVgpu>> DecodeState(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::Error(ErrorCode::kInvalid, "state is not a JSON object");
  }
  if (!doc.contains("version") || doc["version"] != kStateVersion) {
    return Status::Error(ErrorCode::kInvalid,
                         "state has no version or a version this build does not know (want 1)");
  }
  if (!doc.contains("vgpus") || !doc["vgpus"].is_array()) {
    return Status::Error(ErrorCode::kInvalid, "state has no \"vgpus\" list");
  }
  std::vector<CreatedVgpu> out;
  size_t index = 0;
  for (const json& e : doc["vgpus"]) {
    try {
      CreatedVgpu v;
      v.device_id = e.at("deviceID").get<std::string>();
      v.resource = e.at("resource").get<std::string>();
      v.vgpu_id = e.at("vgpu").get<std::string>();
      v.parent = e.at("parent").get<std::string>();
      v.physical_gpu = e.at("gpu").get<std::string>();
      v.type_id = e.at("type").get<std::string>();
      v.slot = e.at("slot").get<uint32_t>();
      v.created_unix_ms = e.contains("createdMs") ? e["createdMs"].get<int64_t>()
                                                  : e.at("created").get<int64_t>() * 1000;
      if (e.contains("ownerPod")) v.owner_pod = e["ownerPod"].get<std::string>();
      if (e.contains("ownerUid")) v.owner_uid = e["ownerUid"].get<std::string>();
      out.push_back(std::move(v));
    } catch (const json::exception& ex) {
      return Status::Error(ErrorCode::kInvalid,
                           "state entry " + std::to_string(index) + " is malformed: " + ex.what());
    }
    ++index;
  }
  return out;
}

Status MemoryStateStore::Save(const std::vector<CreatedVgpu>& vgpus) {
  if (fail_saves) return Status::Error(ErrorCode::kIo, "state store refuses writes (test)", ENOSPC);
  vgpus_ = vgpus;
  return Status::Ok();
}

JsonFileStateStore::JsonFileStateStore(std::filesystem::path dir) : dir_(std::move(dir)) {}

Result<std::vector<CreatedVgpu>> JsonFileStateStore::Load() {
  std::ifstream in(file());
  if (!in) {
    if (!std::filesystem::exists(file())) return std::vector<CreatedVgpu>{};
    return Status::Error(ErrorCode::kIo, "cannot read " + file().string());
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  Result<std::vector<CreatedVgpu>> state = DecodeState(buffer.str());
  if (!state.ok()) {
    return Status::Error(state.status().code(), file().string() + ": " + state.status().message());
  }
  return state;
}

Status JsonFileStateStore::Save(const std::vector<CreatedVgpu>& vgpus) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Status::Error(ErrorCode::kIo, "create " + dir_.string() + ": " + ec.message());
  return WriteFileAtomically(file(), EncodeState(vgpus));
}

}  // namespace kvgpu::deviceplugin
