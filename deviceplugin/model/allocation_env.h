// The environment an Allocate answer gives each container, the one definition of that contract:
// per resource (kubelet merges the env maps of all resources a container asks for),
// KVGPU_<RESOURCE>_DEVICE_IDS, _UUIDS and _TYPES, comma-separated and in the same order. The
// resource manager renders it; state recovery reads it back out of kubelet's checkpoint.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kvgpu::deviceplugin {

// "tencent.com/vgpu-t4-1q" -> "KVGPU_VGPU_T4_1Q_".
std::string EnvPrefix(const std::string& resource);

struct EnvVgpus {
  std::vector<std::string> device_ids;
  std::vector<std::string> vgpu_ids;  // the same order
  std::vector<std::string> types;
};

void RenderAllocationEnv(const std::string& resource, const EnvVgpus& vgpus,
                         std::map<std::string, std::string>& envs);

struct ParsedEnv {
  std::string prefix;  // "KVGPU_VGPU_222_"
  EnvVgpus vgpus;
};

// Every resource's device IDs and vGPUs found in `envs`; `notes` says what was skipped and why.
std::vector<ParsedEnv> ParseAllocationEnv(const std::map<std::string, std::string>& envs,
                                          std::vector<std::string>& notes);

}  // namespace kvgpu::deviceplugin
