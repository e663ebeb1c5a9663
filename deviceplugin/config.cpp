#include "deviceplugin/config.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "common/config_keys.h"
#include "common/cross_program.h"

namespace kvgpu::deviceplugin {
namespace {

Result<std::string> Scalar(const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) return Status::Invalid("config key " + key + ": expected a single value");
  return node.as<std::string>();
}

Result<bool> Bool(const YAML::Node& node, const std::string& key) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return Status::Invalid("config key " + key + ": expected true or false");
  }
  return value;
}

Result<std::vector<std::string>> StringList(const YAML::Node& node, const std::string& key) {
  if (!node.IsSequence()) return Status::Invalid("config key " + key + ": expected a list");
  std::vector<std::string> out;
  for (size_t i = 0; i < node.size(); ++i) {
    Result<std::string> item = Scalar(node[i], key + "[" + std::to_string(i) + "]");
    if (!item.ok()) return item.status();
    out.push_back(*item);
  }
  return out;
}

Status CheckKeys(const YAML::Node& map, const std::string& where,
                 const std::set<std::string>& known) {
  std::vector<std::string> present;
  for (const auto& entry : map) present.push_back(entry.first.as<std::string>());
  std::string unknown = UnknownKeyMessage(present, known, where);
  return unknown.empty() ? Status::Ok() : Status::Invalid(unknown);
}

Result<PinRule> ParsePin(const YAML::Node& node, size_t index) {
  std::string where = "pinning[" + std::to_string(index) + "]";
  if (!node.IsMap()) return Status::Invalid("config key " + where + ": expected a map");
  Status keys = CheckKeys(node, where, {"pciAddress", "model", "all", "type"});
  if (!keys.ok()) return keys;
  PinRule rule;
  int selectors = 0;
  if (node["pciAddress"]) {
    Result<std::string> v = Scalar(node["pciAddress"], where + ".pciAddress");
    if (!v.ok()) return v.status();
    rule.pci_address = *v;
    ++selectors;
  }
  if (node["model"]) {
    Result<std::string> v = Scalar(node["model"], where + ".model");
    if (!v.ok()) return v.status();
    rule.model = *v;
    ++selectors;
  }
  if (node["all"]) {
    Result<bool> v = Bool(node["all"], where + ".all");
    if (!v.ok()) return v.status();
    rule.all = *v;
    if (rule.all) ++selectors;
  }
  if (selectors != 1) {
    return Status::Invalid("config key " + where +
                           ": give exactly one of pciAddress, model, all: true");
  }
  if (!node["type"]) return Status::Invalid("config key " + where + ".type is missing");
  Result<std::string> type = Scalar(node["type"], where + ".type");
  if (!type.ok()) return type.status();
  if (type->empty()) return Status::Invalid("config key " + where + ".type is empty");
  rule.type_id = *type;
  return rule;
}

Result<std::chrono::milliseconds> DurationKey(const YAML::Node& node, const std::string& key,
                                              std::chrono::milliseconds minimum) {
  Result<std::string> v = Scalar(node, key);
  if (!v.ok()) return v.status();
  Result<std::chrono::milliseconds> d = ParseDuration(*v);
  if (!d.ok()) return Status::Invalid("config key " + key + ": " + d.status().message());
  if (*d < minimum) {
    return Status::Invalid("config key " + key + ": must be at least " +
                           std::to_string(minimum.count()) + "ms");
  }
  return d;
}

// How a key's value is read, checked and stored. Each returns the error naming the key.
using Reader = std::function<Status(const YAML::Node&, const std::string& key, Config&)>;

template <typename Field>
Reader BoolInto(Field field) {
  return [field](const YAML::Node& node, const std::string& key, Config& config) {
    Result<bool> v = Bool(node, key);
    if (!v.ok()) return v.status();
    field(config) = *v;
    return Status::Ok();
  };
}

template <typename Field>
Reader DurationInto(Field field, std::chrono::milliseconds minimum) {
  return [field, minimum](const YAML::Node& node, const std::string& key, Config& config) {
    auto d = DurationKey(node, key, minimum);
    if (!d.ok()) return d.status();
    field(config) = *d;
    return Status::Ok();
  };
}

// A string the check accepts (it returns the reason it does not), stored by `store`.
template <typename Store>
Reader StringInto(Store store, std::function<Status(const std::string&)> check) {
  return [store, check](const YAML::Node& node, const std::string& key, Config& config) {
    Result<std::string> v = Scalar(node, key);
    if (!v.ok()) return v.status();
    if (Status valid = check(*v); !valid.ok()) {
      return Status::Invalid("config key " + key + ": " + valid.message());
    }
    return store(config, *v);
  };
}

Status ReadPinning(const YAML::Node& node, const std::string& key, Config& config) {
  if (!node.IsSequence()) return Status::Invalid("config key " + key + ": expected a list");
  for (size_t i = 0; i < node.size(); ++i) {
    Result<PinRule> rule = ParsePin(node[i], i);
    if (!rule.ok()) return rule.status();
    config.pinning.push_back(*rule);
  }
  return Status::Ok();
}

Status AbsolutePath(const std::string& value) {
  if (value.empty() || value[0] != '/') return Status::Invalid("must be absolute");
  return Status::Ok();
}

Status LibvirtUri(const std::string& value) {
  if (value.find(":/") != std::string::npos) return Status::Ok();
  return Status::Invalid("\"" + value + "\" is not a libvirt URI (like qemu:///system)");
}

// "0000:3b:00.0": domain, bus, device, function in lower-case hex, as sysfs names PCI devices.
Status PciAddress(const std::string& value) {
  static const std::regex kPci("^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]$");
  if (std::regex_match(value, kPci)) return Status::Ok();
  return Status::Invalid("\"" + value + "\" is not a PCI address like 0000:3b:00.0");
}

// A DRA driver name is a DNS subdomain of at most 63 characters (resource.k8s.io/v1
// ResourceSlice spec.driver).
Status DraDriverName(const std::string& value) {
  if (value.size() > 63) return Status::Invalid("\"" + value + "\" is longer than 63 characters");
  return ValidateDomain(value);
}

Status LogLevel(const std::string& value) {
  static const std::set<std::string> kLevels = {"trace", "debug",    "info", "warn",
                                                "error", "critical", "off"};
  if (kLevels.contains(value)) return Status::Ok();
  return Status::Invalid("\"" + value +
                         "\" is not one of trace, debug, info, warn, error, critical, off");
}

// Every key of the config file, once: where it is (dotted path; a row without a reader is a
// map of the rows below it), how it is read and checked, and what --help shows for it (the
// example value, then the help lines; docs/configuration.md is checked against that text).
struct KeyRow {
  std::string path;
  std::string example;
  std::vector<std::string> help;
  Reader read;  // empty: a section
};

const std::vector<KeyRow>& KeyTable() {
  using std::chrono::milliseconds;
  static const std::vector<KeyRow> kRows = {
      {"backend",
       "sysfs",
       {"where vGPUs are made: sysfs (the kernel's files, directly) or",
        "libvirt (its node-device API, for hosts where libvirt owns mdevs)"},
       StringInto([](Config& c, const std::string& v) { return c.backend.name = v, Status::Ok(); },
                  mdev::ValidateBackendName)},
      {"libvirtURI",
       "qemu:///system",
       {"the libvirt connection for backend: libvirt"},
       StringInto(
           [](Config& c, const std::string& v) { return c.backend.libvirt_uri = v, Status::Ok(); },
           LibvirtUri)},
      {"resourceDomain",
       std::string(kVgpuResourceDomain),
       {"domain of the resource names (a DNS subdomain, not kubernetes.io)"},
       StringInto([](Config& c, const std::string& v) { return c.naming.domain = v, Status::Ok(); },
                  [](const std::string& v) { return ValidateDomain(v); })},
      {"namingStyle",
       "type",
       {"type:    <domain>/vgpu-<N> for nvidia-<N> and vendor-VFIO id <N>,",
        "         <domain>/vgpu-<type-id> for other drivers (vgpu-mtty-2)",
        "profile: <domain>/vgpu-<profile> for NVIDIA types (vgpu-t4-1q),",
        "         the type style for others"},
       StringInto(
           [](Config& c, const std::string& v) {
             c.naming.style = *ParseNamingStyle(v);
             return Status::Ok();
           },
           [](const std::string& v) { return ParseNamingStyle(v).status(); })},
      {"allowedTypes",
       "[nvidia-222]",
       {"offer only these type ids (default: all the node shows)"},
       [](const YAML::Node& node, const std::string& key, Config& config) {
         Result<std::vector<std::string>> v = StringList(node, key);
         if (!v.ok()) return v.status();
         config.allowed_types = *v;
         return Status::Ok();
       }},
      {"pinning",
       "",
       {"static mode: a matching GPU offers only the given type",
        "\v    - pciAddress: 0000:3b:00.0  the GPU's PCI address (the PF for SR-IOV GPUs)",
        "\v      type: nvidia-222",
        "\v    - model: T4                 GPU name from the type names (T4, A100D) or PCI device "
        "id "
        "(0x1eb8)",
        "\v      type: nvidia-223", "\v    - all: true                 every other GPU",
        "\v      type: nvidia-224"},
       ReadPinning},
      {"spreadAcrossGPUs",
       "false",
       {"preferred allocation puts a multi-vGPU request on distinct GPUs"},
       BoolInto([](Config& c) -> bool& { return c.spread_across_gpus; })},
      {"gpuModeProbe",
       "none",
       {"where MIG and mixed-size modes, placements and GPU instances",
        "come from, none (the kernel's counts), nvml (libnvidia-ml.so.1,",
        "loaded at run time) or sim (the simulator's sim-gpu-modes.json),",
        "used only while the published state is version 3 or unpublished"},
       StringInto(
           [](Config& c, const std::string& v) {
             c.gpu_mode_probe = *ParseGpuModeProbeChoice(v);
             return Status::Ok();
           },
           [](const std::string& v) {
             return ParseGpuModeProbeChoice(v)
                        ? Status::Ok()
                        : Status::Invalid("\"" + v + "\" is not one of none, nvml, sim");
           })},
      {"occupancyMode",
       "auto",
       {"how vGPUs share an NVIDIA GPU: auto (told from the kernel's",
        "counts), strict (one type per GPU) or equal-size (one",
        "framebuffer size per GPU); MIG-backed and mixed-size GPUs are",
        "told apart in every mode"},
       StringInto(
           [](Config& c, const std::string& v) {
             c.occupancy = *ParseOccupancySetting(v);
             return Status::Ok();
           },
           [](const std::string& v) {
             return ParseOccupancySetting(v) ? Status::Ok()
                                             : Status::Invalid("\"" + v +
                                                               "\" is not one of auto, strict, "
                                                               "equal-size");
           })},
      {"cdi", "", {}, {}},
      {"cdi.enabled",
       "false",
       {"also answer CDI device names <resource>=<deviceID> and write", "their specs"},
       BoolInto([](Config& c) -> bool& { return c.cdi_enabled; })},
      {"cdi.dir",
       "/var/run/cdi",
       {"where CDI specs are written"},
       StringInto([](Config& c, const std::string& v) { return c.cdi_dir = v, Status::Ok(); },
                  AbsolutePath)},
      {"rescanInterval",
       "5s",
       {"rescan period of the backend (sysfs or libvirt) (ms, s, m)"},
       DurationInto([](Config& c) -> milliseconds& { return c.rescan_interval; },
                    milliseconds(10))},
      {"udevEvents",
       "true",
       {"rescan at once on device events (udev's; libvirt's with", "backend: libvirt)"},
       BoolInto([](Config& c) -> bool& { return c.udev_events; })},
      {"logLevel",
       "info",
       {"trace, debug, info, warn, error, critical, off"},
       StringInto([](Config& c, const std::string& v) { return c.log_level = v, Status::Ok(); },
                  LogLevel)},
      {"lifecycle", "", {"removing vGPUs whose pod is gone"}, {}},
      {"lifecycle.gracePeriod",
       "30s",
       {"how long a vGPU stays after no live pod holds it (0s allowed)"},
       DurationInto([](Config& c) -> milliseconds& { return c.lifecycle.grace_period; },
                    milliseconds(0))},
      {"lifecycle.pollInterval",
       "10s",
       {"how often kubelet's PodResources API is asked (min 100ms)"},
       DurationInto([](Config& c) -> milliseconds& { return c.lifecycle.poll_interval; },
                    milliseconds(100))},
      {"lifecycle.retryMax",
       "60s",
       {"longest wait between retries of a removal the kernel refused"},
       DurationInto([](Config& c) -> milliseconds& { return c.lifecycle.retry_max; },
                    milliseconds(100))},
      {"lifecycle.watchPods",
       "true",
       {"follow this node's pods at the API server (--kubeconfig or",
        "in-cluster); false: kubelet's word alone"},
       BoolInto([](Config& c) -> bool& { return c.lifecycle.watch_pods; })},
      {"lifecycle.events",
       "true",
       {"post Events (VgpuCreated, VgpuRemoved, VgpuRemoveFailed) on pods"},
       BoolInto([](Config& c) -> bool& { return c.lifecycle.events; })},
      {"schedulerState", "", {"the node's vGPU state on its Node, for the scheduler extender"}, {}},
      {"schedulerState.publish",
       "true",
       {"needs the API server and --node-name"},
       BoolInto([](Config& c) -> bool& { return c.scheduler_state.publish; })},
      {"schedulerState.minInterval",
       "1s",
       {"looks for changes this often; at most one write per interval"},
       DurationInto([](Config& c) -> milliseconds& { return c.scheduler_state.min_interval; },
                    milliseconds(100))},
      {"schedulerState.heartbeat",
       "2m",
       {"written at least this often, so readers can tell it is live"},
       DurationInto([](Config& c) -> milliseconds& { return c.scheduler_state.heartbeat; },
                    milliseconds(1000))},
      {"schedulerState.version",
       "1",
       {"the state's format: 2 (with equal-size locks) or 3 (with mixed-size and MIG facts) only",
        "once every scheduler extender reads it; see the upgrade rule"},
       StringInto(
           [](Config& c, const std::string& v) {
             c.scheduler_state.version = v == "3" ? 3 : v == "2" ? 2 : 1;
             return Status::Ok();
           },
           [](const std::string& v) {
             return v == "1" || v == "2" || v == "3"
                        ? Status::Ok()
                        : Status::Invalid("\"" + v + "\" is not 1, 2 or 3");
           })},
      // DRA front end (docs/dra-kubelet-plugin.md).
      {"dra", "", {"the DRA kubelet plugin: GPUs served through DRA instead"}, {}},
      {"dra.gpus",
       "[0000:3b:00.0]",
       {"these GPUs (PCI address; the PF for SR-IOV) are served through",
        "DRA; the device plugin never offers them"},
       [](const YAML::Node& node, const std::string& key, Config& config) {
         Result<std::vector<std::string>> v = StringList(node, key);
         if (!v.ok()) return v.status();
         for (const std::string& gpu : *v) {
           if (Status ok = PciAddress(gpu); !ok.ok()) {
             return Status::Invalid("config key " + key + ": " + ok.message());
           }
         }
         config.dra.gpus = *v;
         return Status::Ok();
       }},
      {"dra.allGPUs",
       "false",
       {"every GPU through DRA (the device plugin offers none)"},
       BoolInto([](Config& c) -> bool& { return c.dra.all_gpus; })},
      {"dra.driverName",
       std::string(kDraDriverName),
       {"the DRA driver name (kubelet registration, ResourceSlices)"},
       StringInto(
           [](Config& c, const std::string& v) { return c.dra.driver_name = v, Status::Ok(); },
           DraDriverName)},
      {"dra.bindingConditions",
       "true",
       {"devices wait for the daemon's OccupancyConfirmed before a pod binds",
        "(binding conditions, Kubernetes 1.36+)"},
       BoolInto([](Config& c) -> bool& { return c.dra.binding_conditions; })},
      {"dra.compatibilityGroups",
       "true",
       {"devices declare their GPU's type or size lock as a compatibility group",
        "where the API server keeps the field (probed; KEP-5963, 1.37+ alpha)"},
       BoolInto([](Config& c) -> bool& { return c.dra.compatibility_groups; })},
      {"dra.deviceMetadata",
       "true",
       {"each prepared request's device metadata (attributes, mdev UUID) in a",
        "JSON file mounted into its containers (KEP-5304)"},
       BoolInto([](Config& c) -> bool& { return c.dra.device_metadata; })},
      {"dra.deviceMetadataDir",
       "",
       {"where those files are kept on the host (absolute; default: the",
        "DRA plugin's directory under --kubelet-dir, dra-device-metadata)"},
       StringInto([](Config& c,
                     const std::string& v) { return c.dra.device_metadata_dir = v, Status::Ok(); },
                  AbsolutePath)},
  };
  return kRows;
}

// The rows one level below `section` ("" for the top), by their last name.
std::vector<std::pair<std::string, const KeyRow*>> RowsIn(const std::string& section) {
  std::vector<std::pair<std::string, const KeyRow*>> rows;
  const std::string prefix = section.empty() ? "" : section + ".";
  for (const KeyRow& row : KeyTable()) {
    if (!row.path.starts_with(prefix)) continue;
    std::string rest = row.path.substr(prefix.size());
    if (rest.find('.') == std::string::npos) rows.emplace_back(rest, &row);
  }
  return rows;
}

Status ApplySection(const YAML::Node& map, const std::string& section, Config& config) {
  std::set<std::string> known;
  for (const auto& [name, row] : RowsIn(section)) known.insert(name);
  Status keys = CheckKeys(map, section.empty() ? "the config" : section, known);
  if (!keys.ok()) return keys;
  for (const auto& [name, row] : RowsIn(section)) {
    const YAML::Node value = map[name];
    if (!value) continue;
    if (row->read) {
      if (Status read = row->read(value, row->path, config); !read.ok()) return read;
      continue;
    }
    if (!value.IsMap()) return Status::Invalid("config key " + row->path + ": expected a map");
    if (Status inner = ApplySection(value, row->path, config); !inner.ok()) return inner;
  }
  return Status::Ok();
}

// What no single key can check: the keys against each other.
Status CheckTogether(const Config& config) {
  if (config.scheduler_state.heartbeat < config.scheduler_state.min_interval) {
    return Status::Invalid("config key schedulerState.heartbeat: must be at least minInterval");
  }
  if (config.dra.all_gpus && !config.dra.gpus.empty()) {
    return Status::Invalid("config: dra.allGPUs and dra.gpus exclude each other");
  }
  // A pinned type that the allow-list hides could never be offered: say so now.
  if (!config.allowed_types.empty()) {
    for (const PinRule& rule : config.pinning) {
      if (std::find(config.allowed_types.begin(), config.allowed_types.end(), rule.type_id) ==
          config.allowed_types.end()) {
        return Status::Invalid("config: pinned type " + rule.type_id + " is not in allowedTypes");
      }
    }
  }
  return Status::Ok();
}

Status Apply(const YAML::Node& root, Config& config) {
  if (Status keys = ApplySection(root, "", config); !keys.ok()) return keys;
  return CheckTogether(config);
}

// --help's text for the config file, from the table: "key: example" in a 32-column left
// column indented by depth, the help lines beside it; a line starting "\v" stands in the left
// column as it is (the pinning example).
std::string KeysHelpText() {
  std::string out = "Config file (--config, YAML; every key optional):\n";
  for (const KeyRow& row : KeyTable()) {
    const size_t depth = static_cast<size_t>(std::count(row.path.begin(), row.path.end(), '.'));
    const std::string name =
        row.path.substr(row.path.rfind('.') == std::string::npos ? 0 : row.path.rfind('.') + 1);
    std::string left = std::string(2 + 2 * depth, ' ') + name + ":";
    if (!row.example.empty()) left += " " + row.example;
    bool first = true;
    for (const std::string& line : row.help) {
      if (line.starts_with('\v')) {
        out += line.substr(1) + "\n";
        continue;
      }
      std::string lead = first ? left : "";
      lead.resize(std::max<size_t>(lead.size() + 1, 32), ' ');
      out += lead + line + "\n";
      first = false;
    }
    if (row.help.empty()) out += left + "\n";
  }
  return out;
}

}  // namespace

Result<Config> ParseConfig(std::string_view yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Status::Invalid(std::string("config is not valid YAML: ") + e.what());
  }
  Config config;
  if (root.IsNull()) return config;  // an empty file means all defaults
  if (!root.IsMap()) return Status::Invalid("config must be a YAML map of keys");
  try {
    Status status = Apply(root, config);
    if (!status.ok()) return status;
  } catch (const YAML::Exception& e) {
    return Status::Invalid(std::string("config: ") + e.what());
  }
  return config;
}

Result<Config> LoadConfigFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Status::Error(ErrorCode::kGone, "cannot read config file " + path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  Result<Config> config = ParseConfig(buffer.str());
  if (!config.ok()) {
    return Status::Error(config.status().code(), path.string() + ": " + config.status().message());
  }
  return config;
}

// The plugin places vGPUs where the extender will assume them: version 1 of the published state
// speaks of the per-type lock alone, so while it is written the plugin keeps to that lock even on
// GPUs that would take other types of one size (an extender reading version 1 would otherwise
// count room the plugin has given away).
ModelOptions PlacementAsPublished(const Config& config, const std::filesystem::path& sysfs_root) {
  const bool publish = config.scheduler_state.publish;
  const int version = config.scheduler_state.version;
  ModelOptions model = ForStateVersion(config, publish, version,
                                       MakeGpuModeProbe(config.gpu_mode_probe, sysfs_root));
  if (publish && version < 3 && config.gpu_mode_probe != GpuModeProbeChoice::kNone) {
    spdlog::info(
        "gpuModeProbe gives only each type's max instances while the published state is below "
        "version 3");
  }
  if (publish && version < 2 && config.occupancy != OccupancySetting::kStrict) {
    spdlog::info(
        "vGPUs are placed by the per-type lock while the published state is version 1 "
        "(schedulerState.version: 2 lets types of one size share a GPU)");
  }
  return model;
}

const char* ConfigKeysHelp() {
  static const std::string kText = KeysHelpText();
  return kText.c_str();
}

}  // namespace kvgpu::deviceplugin
