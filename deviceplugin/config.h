// The optional YAML config file (--config). Every key is documented in ConfigKeysHelp(), which
// --help prints.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/duration.h"
#include "common/status.h"
#include "deviceplugin/resource_naming.h"
#include "mdev/make_backend.h"

namespace kvgpu::deviceplugin {

// Static mode: a GPU matching the rule offers only `type`.
struct PinRule {
  std::optional<std::string> pci_address;  // the GPU (or its PF for SR-IOV): "0000:3b:00.0"
  std::optional<std::string> model;        // "T4" (from the type names) or a PCI device id "0x1eb8"
  bool all = false;
  std::string type_id;  // "nvidia-222"

  bool operator==(const PinRule&) const = default;
};

// When vGPUs go (lifecycle.h).
struct LifecycleConfig {
  std::chrono::milliseconds grace_period{std::chrono::seconds(30)};
  std::chrono::milliseconds poll_interval{std::chrono::seconds(10)};
  std::chrono::milliseconds retry_max{std::chrono::seconds(60)};
  bool watch_pods = true;  // follow the API server's pods on this node
  bool events = true;      // post Events on the pods

  bool operator==(const LifecycleConfig&) const = default;
};

// The node's vGPU state for the scheduler extender (state_publisher.h).
struct SchedulerStateConfig {
  bool publish = true;  // needs the API server and --node-name
  std::chrono::milliseconds min_interval{1000};
  std::chrono::milliseconds heartbeat{std::chrono::minutes(2)};

  bool operator==(const SchedulerStateConfig&) const = default;
};

struct Config {
  mdev::BackendChoice backend;  // sysfs, or libvirt at a URI
  NamingOptions naming;
  std::vector<std::string> allowed_types;  // empty: every type the node shows
  std::vector<PinRule> pinning;            // first match wins, by address, then model, then all
  bool spread_across_gpus = false;         // multi-vGPU requests: distinct physical GPUs first
  bool cdi_enabled = false;
  std::filesystem::path cdi_dir = "/var/run/cdi";
  std::chrono::milliseconds rescan_interval{5000};
  bool udev_events = true;
  std::string log_level = "info";
  LifecycleConfig lifecycle;
  SchedulerStateConfig scheduler_state;
};

// Parses YAML text. Unknown keys, wrong types and contradictions are errors naming the key; the
// caller keeps its defaults then (bad input changes nothing).
Result<Config> ParseConfig(std::string_view yaml_text);
Result<Config> LoadConfigFile(const std::filesystem::path& path);

// The text --help shows for the config file.
const char* ConfigKeysHelp();

// The rule that applies to a GPU, if any.
const PinRule* FindPin(const Config& config, const std::string& physical_gpu,
                       const std::vector<std::string>& models);

}  // namespace kvgpu::deviceplugin
