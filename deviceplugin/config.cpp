#include "deviceplugin/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "common/config_keys.h"

namespace kvgpu::deviceplugin {
namespace {

Status Invalid(const std::string& message) {
  return Status::Error(ErrorCode::kInvalid, message);
}

Result<std::string> Scalar(const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) return Invalid("config key " + key + ": expected a single value");
  return node.as<std::string>();
}

Result<bool> Bool(const YAML::Node& node, const std::string& key) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return Invalid("config key " + key + ": expected true or false");
  }
  return value;
}

Result<std::vector<std::string>> StringList(const YAML::Node& node, const std::string& key) {
  if (!node.IsSequence()) return Invalid("config key " + key + ": expected a list");
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
  return unknown.empty() ? Status::Ok() : Invalid(unknown);
}

Result<PinRule> ParsePin(const YAML::Node& node, size_t index) {
  std::string where = "pinning[" + std::to_string(index) + "]";
  if (!node.IsMap()) return Invalid("config key " + where + ": expected a map");
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
    return Invalid("config key " + where + ": give exactly one of pciAddress, model, all: true");
  }
  if (!node["type"]) return Invalid("config key " + where + ".type is missing");
  Result<std::string> type = Scalar(node["type"], where + ".type");
  if (!type.ok()) return type.status();
  if (type->empty()) return Invalid("config key " + where + ".type is empty");
  rule.type_id = *type;
  return rule;
}

Result<std::chrono::milliseconds> DurationKey(const YAML::Node& node, const std::string& key,
                                              std::chrono::milliseconds minimum) {
  Result<std::string> v = Scalar(node, key);
  if (!v.ok()) return v.status();
  Result<std::chrono::milliseconds> d = ParseDuration(*v);
  if (!d.ok()) return Invalid("config key " + key + ": " + d.status().message());
  if (*d < minimum) {
    return Invalid("config key " + key + ": must be at least " + std::to_string(minimum.count()) +
                   "ms");
  }
  return d;
}

Status ApplyLifecycle(const YAML::Node& node, LifecycleConfig& lifecycle) {
  if (!node.IsMap()) return Invalid("config key lifecycle: expected a map");
  Status keys = CheckKeys(node, "lifecycle",
                          {"gracePeriod", "pollInterval", "retryMax", "watchPods", "events"});
  if (!keys.ok()) return keys;
  struct DurationField {
    const char* key;
    std::chrono::milliseconds* value;
    std::chrono::milliseconds minimum;
  };
  for (const DurationField& field :
       {DurationField{"gracePeriod", &lifecycle.grace_period, std::chrono::milliseconds(0)},
        DurationField{"pollInterval", &lifecycle.poll_interval, std::chrono::milliseconds(100)},
        DurationField{"retryMax", &lifecycle.retry_max, std::chrono::milliseconds(100)}}) {
    if (!node[field.key]) continue;
    auto d = DurationKey(node[field.key], std::string("lifecycle.") + field.key, field.minimum);
    if (!d.ok()) return d.status();
    *field.value = *d;
  }
  for (auto [key, value] :
       {std::pair{"watchPods", &lifecycle.watch_pods}, std::pair{"events", &lifecycle.events}}) {
    if (!node[key]) continue;
    Result<bool> v = Bool(node[key], std::string("lifecycle.") + key);
    if (!v.ok()) return v.status();
    *value = *v;
  }
  return Status::Ok();
}

Status ApplySchedulerState(const YAML::Node& node, SchedulerStateConfig& state) {
  if (!node.IsMap()) return Invalid("config key schedulerState: expected a map");
  Status keys = CheckKeys(node, "schedulerState", {"publish", "minInterval", "heartbeat"});
  if (!keys.ok()) return keys;
  if (node["publish"]) {
    Result<bool> v = Bool(node["publish"], "schedulerState.publish");
    if (!v.ok()) return v.status();
    state.publish = *v;
  }
  for (auto [key, value, minimum] :
       {std::tuple{"minInterval", &state.min_interval, std::chrono::milliseconds(100)},
        std::tuple{"heartbeat", &state.heartbeat, std::chrono::milliseconds(1000)}}) {
    if (!node[key]) continue;
    auto d = DurationKey(node[key], std::string("schedulerState.") + key, minimum);
    if (!d.ok()) return d.status();
    *value = *d;
  }
  if (state.heartbeat < state.min_interval) {
    return Invalid("config key schedulerState.heartbeat: must be at least minInterval");
  }
  return Status::Ok();
}

Status Apply(const YAML::Node& root, Config& config) {
  Status keys = CheckKeys(root, "the config",
                          {"backend", "libvirtURI", "resourceDomain", "namingStyle", "allowedTypes",
                           "pinning", "spreadAcrossGPUs", "cdi", "rescanInterval", "udevEvents",
                           "logLevel", "lifecycle", "schedulerState"});
  if (!keys.ok()) return keys;
  if (root["backend"]) {
    Result<std::string> v = Scalar(root["backend"], "backend");
    if (!v.ok()) return v.status();
    Status valid = mdev::ValidateBackendName(*v);
    if (!valid.ok()) return Invalid("config key backend: " + valid.message());
    config.backend.name = *v;
  }
  if (root["libvirtURI"]) {
    Result<std::string> v = Scalar(root["libvirtURI"], "libvirtURI");
    if (!v.ok()) return v.status();
    if (v->find(":/") == std::string::npos) {
      return Invalid("config key libvirtURI: \"" + *v +
                     "\" is not a libvirt URI (like qemu:///system)");
    }
    config.backend.libvirt_uri = *v;
  }
  if (root["resourceDomain"]) {
    Result<std::string> v = Scalar(root["resourceDomain"], "resourceDomain");
    if (!v.ok()) return v.status();
    Status valid = ValidateDomain(*v);
    if (!valid.ok()) return Invalid("config key resourceDomain: " + valid.message());
    config.naming.domain = *v;
  }
  if (root["namingStyle"]) {
    Result<std::string> v = Scalar(root["namingStyle"], "namingStyle");
    if (!v.ok()) return v.status();
    Result<NamingStyle> style = ParseNamingStyle(*v);
    if (!style.ok()) return Invalid("config key namingStyle: " + style.status().message());
    config.naming.style = *style;
  }
  if (root["allowedTypes"]) {
    Result<std::vector<std::string>> v = StringList(root["allowedTypes"], "allowedTypes");
    if (!v.ok()) return v.status();
    config.allowed_types = *v;
  }
  if (root["pinning"]) {
    if (!root["pinning"].IsSequence()) return Invalid("config key pinning: expected a list");
    for (size_t i = 0; i < root["pinning"].size(); ++i) {
      Result<PinRule> rule = ParsePin(root["pinning"][i], i);
      if (!rule.ok()) return rule.status();
      config.pinning.push_back(*rule);
    }
  }
  if (root["spreadAcrossGPUs"]) {
    Result<bool> v = Bool(root["spreadAcrossGPUs"], "spreadAcrossGPUs");
    if (!v.ok()) return v.status();
    config.spread_across_gpus = *v;
  }
  if (root["cdi"]) {
    const YAML::Node& cdi = root["cdi"];
    if (!cdi.IsMap()) return Invalid("config key cdi: expected a map");
    Status cdi_keys = CheckKeys(cdi, "cdi", {"enabled", "dir"});
    if (!cdi_keys.ok()) return cdi_keys;
    if (cdi["enabled"]) {
      Result<bool> v = Bool(cdi["enabled"], "cdi.enabled");
      if (!v.ok()) return v.status();
      config.cdi_enabled = *v;
    }
    if (cdi["dir"]) {
      Result<std::string> v = Scalar(cdi["dir"], "cdi.dir");
      if (!v.ok()) return v.status();
      if (v->empty() || (*v)[0] != '/') return Invalid("config key cdi.dir: must be absolute");
      config.cdi_dir = *v;
    }
  }
  if (root["rescanInterval"]) {
    auto d = DurationKey(root["rescanInterval"], "rescanInterval", std::chrono::milliseconds(10));
    if (!d.ok()) return d.status();
    config.rescan_interval = *d;
  }
  if (root["lifecycle"]) {
    Status lifecycle = ApplyLifecycle(root["lifecycle"], config.lifecycle);
    if (!lifecycle.ok()) return lifecycle;
  }
  if (root["schedulerState"]) {
    Status state = ApplySchedulerState(root["schedulerState"], config.scheduler_state);
    if (!state.ok()) return state;
  }
  if (root["udevEvents"]) {
    Result<bool> v = Bool(root["udevEvents"], "udevEvents");
    if (!v.ok()) return v.status();
    config.udev_events = *v;
  }
  if (root["logLevel"]) {
    Result<std::string> v = Scalar(root["logLevel"], "logLevel");
    if (!v.ok()) return v.status();
    static const std::set<std::string> kLevels = {"trace", "debug",    "info", "warn",
                                                  "error", "critical", "off"};
    if (!kLevels.contains(*v)) {
      return Invalid("config key logLevel: \"" + *v +
                     "\" is not one of trace, debug, info, warn, error, critical, off");
    }
    config.log_level = *v;
  }
  // A pinned type that the allow-list hides could never be offered: say so now.
  if (!config.allowed_types.empty()) {
    for (const PinRule& rule : config.pinning) {
      if (std::find(config.allowed_types.begin(), config.allowed_types.end(), rule.type_id) ==
          config.allowed_types.end()) {
        return Invalid("config: pinned type " + rule.type_id + " is not in allowedTypes");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Config> ParseConfig(std::string_view yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Invalid(std::string("config is not valid YAML: ") + e.what());
  }
  Config config;
  if (root.IsNull()) return config;  // an empty file means all defaults
  if (!root.IsMap()) return Invalid("config must be a YAML map of keys");
  try {
    Status status = Apply(root, config);
    if (!status.ok()) return status;
  } catch (const YAML::Exception& e) {
    return Invalid(std::string("config: ") + e.what());
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

const char* ConfigKeysHelp() {
  return R"(Config file (--config, YAML; every key optional):
  backend: sysfs                where vGPUs are made: sysfs (the kernel's files, directly) or
                                libvirt (its node-device API, for hosts where libvirt owns mdevs)
  libvirtURI: qemu:///system    the libvirt connection for backend: libvirt
  resourceDomain: tencent.com   domain of the resource names (a DNS subdomain, not kubernetes.io)
  namingStyle: type             type:    <domain>/vgpu-<N> for nvidia-<N> and vendor-VFIO id <N>,
                                         <domain>/vgpu-<type-id> for other drivers (vgpu-mtty-2)
                                profile: <domain>/vgpu-<profile> for NVIDIA types (vgpu-t4-1q),
                                         the type style for others
  allowedTypes: [nvidia-222]    offer only these type ids (default: all the node shows)
  pinning:                      static mode: a matching GPU offers only the given type
    - pciAddress: 0000:3b:00.0  the GPU's PCI address (the PF for SR-IOV GPUs)
      type: nvidia-222
    - model: T4                 GPU name from the type names (T4, A100D) or PCI device id (0x1eb8)
      type: nvidia-223
    - all: true                 every other GPU
      type: nvidia-224
  spreadAcrossGPUs: false       preferred allocation puts a multi-vGPU request on distinct GPUs
  cdi:
    enabled: false              also answer CDI device names <resource>=<deviceID> and write
                                their specs
    dir: /var/run/cdi           where CDI specs are written
  rescanInterval: 5s            rescan period of the backend (sysfs or libvirt) (ms, s, m)
  udevEvents: true              rescan at once on device events (udev's; libvirt's with
                                backend: libvirt)
  logLevel: info                trace, debug, info, warn, error, critical, off
  lifecycle:                    removing vGPUs whose pod is gone
    gracePeriod: 30s            how long a vGPU stays after no live pod holds it (0s allowed)
    pollInterval: 10s           how often kubelet's PodResources API is asked (min 100ms)
    retryMax: 60s               longest wait between retries of a removal the kernel refused
    watchPods: true             follow this node's pods at the API server (--kubeconfig or
                                in-cluster); false: kubelet's word alone
    events: true                post Events (VgpuCreated, VgpuRemoved, VgpuRemoveFailed) on pods
  schedulerState:               the node's vGPU state on its Node, for the scheduler extender
    publish: true               needs the API server and --node-name
    minInterval: 1s             looks for changes this often; at most one write per interval
    heartbeat: 2m               written at least this often, so readers can tell it is live
)";
}

}  // namespace kvgpu::deviceplugin
