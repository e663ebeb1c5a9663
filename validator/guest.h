// What runs in the validator's Kata pod and how its log is read back. The validator has no exec
// into the pod (its RBAC allows pods create/get/delete and pods/log only), so the container runs
// a fixed script that prints each check between markers, and the validator follows the log:
//
//   kvgpu-validator: driver begin        nvidia-smi -q, once
//   kvgpu-validator: driver end rc=0
//   kvgpu-validator: licence begin       nvidia-smi -q again until "License Status : Licensed",
//   kvgpu-validator: licence end rc=0    at most `licence_tries` times, `licence_interval` apart
//   kvgpu-validator: licence done
//   kvgpu-validator: cuda begin          the CUDA sample
//   kvgpu-validator: cuda end rc=0
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kvgpu::validator {

struct GuestOptions {
  std::string nvidia_smi = "nvidia-smi";
  // The CUDA sample; the default is where NVIDIA's cuda-sample:vectoradd images keep it.
  std::string cuda_sample = "/cuda-samples/vectorAdd";
  int licence_tries = 12;
  std::chrono::milliseconds licence_interval{10000};
};

// The shell script (POSIX sh) the container runs.
std::string GuestScript(const GuestOptions& options);

// One check's output; `rc` is set once its end marker was printed.
struct GuestSection {
  std::string output;
  std::optional<int> rc;
};

struct GuestLog {
  std::optional<GuestSection> driver;
  std::vector<GuestSection> licence;  // each attempt, in order
  bool licence_done = false;
  std::optional<GuestSection> cuda;
};

// Reads as much as the log holds so far; a section still running has no rc.
GuestLog ParseGuestLog(const std::string& log);

struct PodSpec {
  std::string namespace_name;
  std::string name;
  std::string node;
  std::string resource;       // "tencent.com/vgpu-230": one of it is asked for
  std::string runtime_class;  // "kata-vgpu" or "kata-vgpu-vf"
  std::string image;
  std::string service_account;  // empty: the namespace's default
  GuestOptions guest;
};

// The core/v1 Pod: pinned to the node with nodeName (no scheduler), never restarted, the script
// as its one container's command.
nlohmann::json BuildPod(const PodSpec& spec);

}  // namespace kvgpu::validator
