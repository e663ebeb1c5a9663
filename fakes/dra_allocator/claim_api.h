// Where the scheduler model reads and writes ResourceClaims and reads ResourceSlices: over HTTP
// from an API server (kube::ApiTransport, resource.k8s.io/v1 paths), or an in-memory store for
// tests of the scheduler model alone (MemoryClaimApi, with a test-side writer standing in for a
// driver's controller).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "kube/api_client.h"

namespace kvgpu::testing::dra {

class ClaimApi {
 public:
  virtual ~ClaimApi() = default;
  // POST; metadata.generateName honoured; the status is dropped (as the API server's create).
  virtual Result<nlohmann::json> Create(const nlohmann::json& claim) = 0;
  virtual Result<nlohmann::json> Get(const std::string& ns, const std::string& name) = 0;
  virtual Result<std::vector<nlohmann::json>> List() = 0;
  // Replaces status.allocation and status.reservedFor (null clears them) when the stored claim is
  // still at `resource_version` (empty: unconditionally); a newer claim is ErrorCode::kExists
  // (409 Conflict).
  virtual Result<nlohmann::json> WriteStatus(const std::string& ns, const std::string& name,
                                             const std::string& resource_version,
                                             const nlohmann::json& allocation,
                                             const nlohmann::json& reserved_for) = 0;
  virtual Status Delete(const std::string& ns, const std::string& name) = 0;
  virtual Result<std::vector<nlohmann::json>> ListSlices() = 0;
};

// resource.k8s.io/v1 over an API server. Status writes are JSON merge patches of .../status that
// carry metadata.resourceVersion as the precondition (kube-apiserver checks it on patches as on
// updates).
class HttpClaimApi : public ClaimApi {
 public:
  explicit HttpClaimApi(kube::ApiTransport& api) : api_(api) {}
  Result<nlohmann::json> Create(const nlohmann::json& claim) override;
  Result<nlohmann::json> Get(const std::string& ns, const std::string& name) override;
  Result<std::vector<nlohmann::json>> List() override;
  Result<nlohmann::json> WriteStatus(const std::string& ns, const std::string& name,
                                     const std::string& resource_version,
                                     const nlohmann::json& allocation,
                                     const nlohmann::json& reserved_for) override;
  Status Delete(const std::string& ns, const std::string& name) override;
  Result<std::vector<nlohmann::json>> ListSlices() override;

 private:
  kube::ApiTransport& api_;
};

// Claims in memory; slices from `slices`. Every change is handed to `on_change` (the claim, or
// null with namespace/name for a deletion), e.g. to mirror claims where a kubelet plugin reads
// them.
class MemoryClaimApi : public ClaimApi {
 public:
  using OnChange =
      std::function<void(const std::string& ns, const std::string& name, const nlohmann::json&)>;
  explicit MemoryClaimApi(std::function<std::vector<nlohmann::json>()> slices,
                          OnChange on_change = nullptr)
      : slices_(std::move(slices)), on_change_(std::move(on_change)) {}

  Result<nlohmann::json> Create(const nlohmann::json& claim) override;
  Result<nlohmann::json> Get(const std::string& ns, const std::string& name) override;
  Result<std::vector<nlohmann::json>> List() override;
  Result<nlohmann::json> WriteStatus(const std::string& ns, const std::string& name,
                                     const std::string& resource_version,
                                     const nlohmann::json& allocation,
                                     const nlohmann::json& reserved_for) override;
  Status Delete(const std::string& ns, const std::string& name) override;
  Result<std::vector<nlohmann::json>> ListSlices() override;

  // A driver's controller: sets condition `type` to `status` ("True"/"False") on the
  // status.devices entry of an allocated device (made if missing).
  Status SetDeviceCondition(const std::string& ns, const std::string& name,
                            const nlohmann::json& result, const std::string& type,
                            const std::string& status);

 private:
  Result<nlohmann::json> StoreLocked(nlohmann::json claim);  // mutex_ held; next version

  std::function<std::vector<nlohmann::json>()> slices_;
  OnChange on_change_;
  std::mutex mutex_;
  std::map<std::string, nlohmann::json> claims_;  // by namespace/name
  uint64_t version_ = 1;
  uint64_t names_ = 0;
};

}  // namespace kvgpu::testing::dra
