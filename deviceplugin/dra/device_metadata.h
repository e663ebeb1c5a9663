// DRA device metadata (KEP-5304, "DRA Device Attributes Downward API"): for each request of a
// prepared claim, a JSON file a container reads at a well-known path, bind-mounted read-only by a
// CDI spec whose device ID the prepare answer carries. Laid out and encoded as upstream's kubelet
// plugin helper does (k8s.io/dynamic-resource-allocation kubeletplugin/metadata.go and
// api/metadata, kubernetes-1.36.2; docs/dra-kubelet-plugin.md, "Device metadata"), so a workload
// reading upstream's paths (KubeVirt's virt-launcher) works unchanged:
//
//   host       <dir>/<namespace>_<claim>/<request>/metadata.json
//   CDI spec   <cdi dir>/<driver>_metadata_<claim UID>_<request>.json: kind <driver>/metadata,
//              device <claim UID>_<request>, one mount {hostPath, containerPath, [ro, bind]}
//   container  /var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/
//              <driver>-metadata.json, or .../resourceclaimtemplates/<pod claim name>/... for a
//              claim made from a template (its resource.kubernetes.io/pod-claim-name annotation)
//
// <request> is the base request ("gpu" of "gpu/small"). The file is a JSON stream: the same
// DeviceMetadata once per API version, newest first (v1beta1 for 1.37 readers, then v1alpha1 for
// 1.36 ones and KubeVirt). Unlike upstream, each file is replaced atomically, and a file that
// cannot be written fails the claim (upstream logs it and answers without the mount).
#pragma once

#include <array>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "deviceplugin/dra/resource_slices.h"

namespace kvgpu::deviceplugin::dra {

// k8s.io/dynamic-resource-allocation api/metadata/types.go (ContainerDir, ResourceClaimsSubDir,
// ResourceClaimTemplatesSubDir, MetadataFileSuffix) and kubeletplugin/metadata.go (metadataSubDir).
inline constexpr std::string_view kMetadataContainerDir =
    "/var/run/kubernetes.io/dra-device-attributes";
inline constexpr std::string_view kMetadataClaimsSubDir = "resourceclaims";
inline constexpr std::string_view kMetadataTemplatesSubDir = "resourceclaimtemplates";
inline constexpr std::string_view kMetadataHostSubDir = "dra-device-metadata";
// Newest first: a reader takes the first object whose apiVersion it knows.
inline constexpr std::array<std::string_view, 2> kMetadataApiVersions = {
    "metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1"};
// k8s.io/api resource/v1 PodResourceClaimAnnotation (v0.36.2): set by the ResourceClaim
// controller on claims it makes from a template, the pod's spec.resourceClaims[].name.
inline constexpr std::string_view kPodClaimNameAnnotation = "resource.kubernetes.io/pod-claim-name";
// The attribute KubeVirt reads for a mediated device (kubevirt/kubevirt pkg/dra/metadata/types.go,
// MDevUUIDAttribute, v1.9.0): unqualified, so in the driver's domain like the slices' own.
inline constexpr std::string_view kMdevUuidAttribute = "mdevUUID";

struct DeviceMetadataOptions {
  bool enabled = false;           // write metadata for new prepares (config dra.deviceMetadata)
  std::filesystem::path dir;      // host files; empty: no metadata at all, nothing removed either
  std::filesystem::path cdi_dir;  // where the bind-mount specs go (config cdi.dir)
  // Told of each claim's metadata write (its files and CDI specs together): whether it was
  // written, how long it took, and how many request files it wrote (the metrics KEP-5304 lists).
  std::function<void(bool ok, std::chrono::nanoseconds took, size_t files)> on_write;
};

struct MetadataClaim {
  std::string namespace_;
  std::string name;
  std::string uid;
  std::optional<std::string> pod_claim_name;  // claims made from a template
};

struct MetadataDevice {
  std::string request;  // the allocation result's request: "gpu", or "gpu/small"
  std::string pool;
  std::string device;
  nlohmann::json attributes = nlohmann::json::object();  // DeviceAttribute values by name
};

// The annotation's value, when the claim carries it as a string.
std::optional<std::string> PodClaimNameOf(const nlohmann::json& claim);
// "gpu" of "gpu/small"; the request itself when it has no subrequest.
std::string BaseRequest(const std::string& request);

// What a device's metadata says: the attributes its slice publishes (DeviceAttributes), and what
// the vGPU made for it is: `mdevUUID` for a mediated device; for a vendor-VFIO vGPU its VF, as
// `resource.kubernetes.io/pciBusID` (the slot's slice names the GPU, the VF is what the workload
// is given).
nlohmann::json MetadataAttributes(const DraDevice& device, const std::string& vgpu_id);
// The same when the device is not in the catalogue any more: the vGPU's identity alone (an mdev
// UUID or a VF's address, told apart by their form).
nlohmann::json VgpuIdentityAttributes(const std::string& vgpu_id);

// The metadata file's text for one (base) request of the claim: one DeviceMetadata per API
// version, newest first, each followed by a newline.
std::string DeviceMetadataStream(const std::string& driver, const MetadataClaim& claim,
                                 const std::string& request,
                                 const std::vector<MetadataDevice>& devices);

// The files of one driver's claims under one host directory and one CDI directory.
class DeviceMetadataFiles {
 public:
  DeviceMetadataFiles(std::string driver, std::filesystem::path dir, std::filesystem::path cdi_dir);

  // Whether every name the files would be made of is safe in a path and a CDI name (namespace a
  // DNS label, claim a DNS subdomain, UID letters, digits and '-', each request a DNS label or
  // "<label>/<label>", the pod claim name a DNS label, no file name over 255 bytes); the reason
  // when not. Checked before anything is made for the claim.
  Status Check(const MetadataClaim& claim, const std::vector<std::string>& requests) const;

  // Writes the metadata file and the CDI spec of each request of `devices` (atomically each);
  // returns base request -> the CDI device ID that mounts it. On a failure the claim's files are
  // removed again and nothing of them is left.
  Result<std::map<std::string, std::string>> Write(const MetadataClaim& claim,
                                                   const std::vector<MetadataDevice>& devices);
  // Whether the metadata file and the CDI spec of each base request exist.
  bool Present(const MetadataClaim& claim, const std::vector<std::string>& base_requests) const;
  // Removes the claim's CDI specs (by UID) and, unless `keep_dir` (another claim of the same
  // namespace and name is prepared), its host directory. Nothing there is success.
  Status Remove(const std::string& namespace_, const std::string& name, const std::string& uid,
                bool keep_dir) const;

  std::string CdiKind() const { return driver_ + "/metadata"; }
  std::string CdiDeviceId(const std::string& uid, const std::string& base_request) const;
  bool IsMetadataCdiId(const std::string& cdi_device_id) const;
  std::filesystem::path ClaimDir(const std::string& namespace_, const std::string& name) const;
  std::filesystem::path MetadataFile(const std::string& namespace_, const std::string& name,
                                     const std::string& base_request) const;
  std::filesystem::path CdiSpecFile(const std::string& uid, const std::string& base_request) const;
  // Where the container sees the file (upstream's ResourceClaimFilePath or
  // ResourceClaimTemplateFilePath).
  std::string ContainerPath(const MetadataClaim& claim, const std::string& base_request) const;
  // The CDI spec that mounts the request's file read-only at ContainerPath.
  std::string CdiSpecJson(const MetadataClaim& claim, const std::string& base_request) const;

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::string driver_;
  std::filesystem::path dir_;
  std::filesystem::path cdi_dir_;
};

}  // namespace kvgpu::deviceplugin::dra
