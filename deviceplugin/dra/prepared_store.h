// What the DRA front end prepared, by claim UID: the checkpoint that makes NodePrepareResources
// and NodeUnprepareResources idempotent across kubelet and daemon restarts.
//
// Claim first: a claim's devices are written here (not yet prepared) before any vGPU is created
// for it, and marked prepared once all exist, so after a crash at any step the vGPUs the model's
// record holds for a device ID are always claimed by a claim here: a re-sent prepare finishes the
// job with the same vGPUs, an unprepare removes them (docs/dra-kubelet-plugin.md).
//
// One JSON file, replaced atomically (state_store.h WriteFileAtomically). Thread-safe.
#pragma once

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgpu::deviceplugin::dra {

struct PreparedDevice {
  std::vector<std::string> request_names;  // from the allocation result's `request`
  std::string pool;
  std::string device;     // the DRA device name (device_name.h)
  std::string resource;   // the model's resource of the device
  std::string device_id;  // the model's device ID (device_id.h)
  std::string vgpu_id;    // empty until created
  std::vector<std::string> cdi_device_ids;

  bool operator==(const PreparedDevice&) const = default;
};

struct PreparedClaim {
  std::string uid;
  std::string namespace_;
  std::string name;
  bool prepared = false;  // false: recorded, vGPUs maybe not all created yet
  std::vector<PreparedDevice> devices;

  bool operator==(const PreparedClaim&) const = default;
};

// More claims than this on one node is no real state; a file claiming more is refused as corrupt.
inline constexpr size_t kMaxPreparedClaims = 4096;

std::string EncodePreparedClaims(const std::map<std::string, PreparedClaim>& claims);
Result<std::map<std::string, PreparedClaim>> DecodePreparedClaims(const std::string& text);

class PreparedStore {
 public:
  // <dir>/dra-prepared-claims.json
  explicit PreparedStore(std::filesystem::path dir);

  // An absent file is an empty record; a corrupt one an error (nothing could be told apart).
  Status Load();
  std::optional<PreparedClaim> Find(const std::string& uid) const;
  std::vector<PreparedClaim> All() const;
  size_t Count() const;
  // The claim that names `device_id`, if any.
  std::optional<PreparedClaim> ClaimOfDevice(const std::string& device_id) const;
  // Replaces the claim's entry and saves; on a failed save the entry stays as it was.
  Status Put(const PreparedClaim& claim);
  // Forgets the claim and saves; on a failed save it stays.
  Status Erase(const std::string& uid);

  std::filesystem::path file() const { return dir_ / "dra-prepared-claims.json"; }

 private:
  Status SaveLocked(const std::map<std::string, PreparedClaim>& claims);

  std::filesystem::path dir_;
  mutable std::mutex mutex_;
  std::map<std::string, PreparedClaim> claims_;
};

}  // namespace kvgpu::deviceplugin::dra
