// The optional YAML config file (--config). Every key is documented in ConfigKeysHelp(), which
// --help prints.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/cross_program.h"
#include "common/duration.h"
#include "common/status.h"
#include "deviceplugin/model/model_options.h"
#include "mdev/make_backend.h"
#include "scheduling/node_vgpu_state.h"

namespace kvgpu::deviceplugin {

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
  // The document version written (scheduling/node_vgpu_state.h, the upgrade rule): 2 only once
  // every extender reads it.
  int version = scheduling::kNodeStateWriteDefault;

  bool operator==(const SchedulerStateConfig&) const = default;
};

// The DRA kubelet plugin front end (docs/dra-kubelet-plugin.md): which GPUs it serves instead of
// the device plugin (one mode per GPU), and the driver name it registers and publishes under.
struct DraConfig {
  std::vector<std::string> gpus;  // PCI addresses (the PF for SR-IOV GPUs)
  bool all_gpus = false;
  std::string driver_name{kDraDriverName};
  // Devices carry binding conditions and the daemon confirms each allocation (KEP-5007;
  // dra/occupancy_confirmer.h).
  bool binding_conditions = true;
  // Devices declare their GPU's lock as a compatibility group where the API server keeps the
  // field (KEP-5963; dra/slice_publisher.h).
  bool compatibility_groups = true;
  // DRA device metadata (KEP-5304; dra/device_metadata.h): per prepared request a JSON file with
  // the device's attributes and its vGPU, mounted read-only into the containers through CDI.
  bool device_metadata = true;
  // Where those files are kept on the host; empty: <kubelet-dir>/plugins/<driverName>/
  // dra-device-metadata (upstream's place).
  std::string device_metadata_dir;

  bool enabled() const { return all_gpus || !gpus.empty(); }
  bool operator==(const DraConfig&) const = default;
};

// The process's options: the model's own (model_options.h, handed to it by slicing: it never sees
// the rest) and what the daemon's loops and publishers need.
struct Config : ModelOptions {
  mdev::BackendChoice backend;  // sysfs, or libvirt at a URI
  std::chrono::milliseconds rescan_interval{5000};
  bool udev_events = true;
  std::string log_level = "info";
  LifecycleConfig lifecycle;
  SchedulerStateConfig scheduler_state;
  DraConfig dra;
  // Where MIG and mixed-size modes are read (gpu_mode_probe.h); none: the kernel's counts.
  GpuModeProbeChoice gpu_mode_probe = GpuModeProbeChoice::kNone;
};

// Parses YAML text. Unknown keys, wrong types and contradictions are errors naming the key; the
// caller keeps its defaults then (bad input changes nothing).
Result<Config> ParseConfig(std::string_view yaml_text);
Result<Config> LoadConfigFile(const std::filesystem::path& path);

// The model's options from the config: the plugin places vGPUs where the extender will assume
// them, so while the published state is below version 3 (or 2) it keeps to what that version
// speaks of (ForStateVersion), with the configured GPU mode probe.
ModelOptions PlacementAsPublished(const Config& config, const std::filesystem::path& sysfs_root);

// The text --help shows for the config file.
const char* ConfigKeysHelp();

}  // namespace kvgpu::deviceplugin
