#include "webhook/config.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "common/cross_program.h"
#include "common/duration.h"
#include "webhook/api_rules.h"
#include "webhook/config_check.h"
#include "webhook/container_builder.h"
#include "webhook/volume_builder.h"
#include "webhook/yaml_to_json.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

// The defaults, written as the YAML an admin would write, so docs/webhook.md can show the same
// text. $VGPU_RESOURCE_PREFIX, $LICENSING_DIR and $DRA_DRIVER_NAME stand for the values the other
// programs share (common/cross_program.h); DefaultYaml() puts them in.
constexpr std::string_view kDefaultYaml = R"(
runtimeClassNames: [kata, kata-vgpu, kata-vgpu-vf]
coldPlugRuntimeClassNames: [kata-vgpu-vf]
resourcePrefixes: ["$VGPU_RESOURCE_PREFIX"]
excludedNamespaces: [kube-system]
optOutAnnotation: kata-vgpu.io/inject
markerAnnotation: kata-vgpu.io/injected
nonKataPods: deny
runtimeClassToSet: kata-vgpu
sidecarMode: native
volumes:
  - name: kvgpu-driver
    hostPath: {path: /opt/kata-vgpu/driver, type: Directory}
  - name: kvgpu-dev
    hostPath: {path: /dev}
  # Published on every node by the device plugin from the kata-vgpu namespace (licence once per
  # cluster, docs/install.md): nothing to copy into tenant namespaces.
  - name: kvgpu-gridd-conf
    hostPath: {path: "$LICENSING_DIR/gridd.conf", type: File}
  - name: kvgpu-client-token
    hostPath: {path: "$LICENSING_DIR/ClientConfigToken", type: Directory}
driverInit:
  name: kvgpu-driver-init
  image: kata-vgpu/guest-tools:0.1.0
  imagePullPolicy: IfNotPresent
  command: ["/bin/sh", "-c"]
  args:
    - >-
      set -e;
      export PATH=/usr/local/nvidia/bin:$PATH;
      modprobe -d /usr/local/nvidia nvidia;
      nvidia-modprobe -u -c=0
  hotPlugArgs:
    - >-
      trap 'exit 0' TERM;
      export PATH=/usr/local/nvidia/bin:$PATH;
      echo 'waiting for the vGPU (PCI vendor 0x10de) to be hot-plugged';
      until grep -qsx 0x10de /sys/bus/pci/devices/*/vendor; do sleep 1; done;
      modprobe -d /usr/local/nvidia nvidia && nvidia-modprobe -u -c=0 || exit 1;
      echo 'NVIDIA driver loaded';
      while :; do sleep 3600 & wait $!; done
  privileged: true
  resources:
    requests: {cpu: 10m, memory: 32Mi}
    limits: {memory: 128Mi}
  volumeMounts:
    - {name: kvgpu-driver, mountPath: /usr/local/nvidia, readOnly: true}
    - {name: kvgpu-dev, mountPath: /dev}
gridd:
  name: nvidia-gridd
  image: kata-vgpu/guest-tools:0.1.0
  imagePullPolicy: IfNotPresent
  command: ["/bin/sh", "-c"]
  args:
    - >-
      trap 'exit 0' TERM;
      export PATH=/usr/local/nvidia/bin:$PATH;
      export LD_LIBRARY_PATH=/usr/local/nvidia/lib64;
      until [ -c /dev/nvidiactl ]; do sleep 1; done;
      nvidia-gridd || exit 1;
      while pidof nvidia-gridd >/dev/null; do sleep 10 & wait $!; done;
      echo 'nvidia-gridd stopped'; exit 1
  privileged: true
  resources:
    requests: {cpu: 10m, memory: 32Mi}
    limits: {memory: 128Mi}
  volumeMounts:
    - {name: kvgpu-driver, mountPath: /usr/local/nvidia, readOnly: true}
    - {name: kvgpu-dev, mountPath: /dev}
    - {name: kvgpu-gridd-conf, mountPath: /etc/nvidia/gridd.conf, readOnly: true}
    - {name: kvgpu-client-token, mountPath: /etc/nvidia/ClientConfigToken, readOnly: true}
  startupProbe:
    command:
      - /bin/sh
      - -c
      - "/usr/local/nvidia/bin/nvidia-smi -q | grep -Eq 'License Status +: +Licensed'"
    periodSeconds: 5
    timeoutSeconds: 10
    failureThreshold: 120
  readinessProbe:
    command:
      - /bin/sh
      - -c
      - "/usr/local/nvidia/bin/nvidia-smi -q | grep -Eq 'License Status +: +Licensed'"
    periodSeconds: 10
    timeoutSeconds: 10
    failureThreshold: 3
workload:
  # At /usr/local/nvidia, where NVIDIA's CUDA images already have bin/ on PATH and lib64/ on
  # LD_LIBRARY_PATH. No environment by default: a PATH or LD_LIBRARY_PATH in the pod spec
  # replaces the image's own (/opt/conda/bin, /usr/local/cuda/bin would vanish).
  volumeMounts:
    - {name: kvgpu-driver, mountPath: /usr/local/nvidia, readOnly: true}
  env: []
resourceClaims:
  # A DeviceClass is kata-vgpu's when its name is this or ends in ".<this>".
  deviceClassDomain: $DRA_DRIVER_NAME
  lookupTimeout: 2s
  cacheEntries: 1024
  cacheBytes: 1048576
  cacheTTL: 30s
  onLookupFailure: deny
)";

const std::string& DefaultYaml() {
  static const std::string text = [] {
    std::string out(kDefaultYaml);
    const std::pair<std::string_view, std::string_view> values[] = {
        {"$VGPU_RESOURCE_PREFIX", kVgpuResourcePrefix},
        {"$LICENSING_DIR", kLicensingDir},
        {"$DRA_DRIVER_NAME", kDraDriverName}};
    for (const auto& [name, value] : values) {
      for (size_t at = out.find(name); at != std::string::npos; at = out.find(name, at)) {
        out.replace(at, name.size(), value);
        at += value.size();
      }
    }
    return out;
  }();
  return text;
}

// How one top-level key is read and checked alone, into the config.
using KeyReader = std::function<bool(Checker&, const json& in, const char* key, Config&)>;

KeyReader StringListKey(std::vector<std::string> Config::*field, bool allow_empty) {
  return [field, allow_empty](Checker& check, const json& in, const char* key, Config& config) {
    return check.StringList(in.value(key, json()), key, config.*field, allow_empty);
  };
}

KeyReader StringKey(std::string Config::*field) {
  return [field](Checker& check, const json& in, const char* key, Config& config) {
    return check.String(in, key, "the config", config.*field);
  };
}

template <typename Value>
KeyReader ChoiceKey(Value Config::*field, std::vector<std::pair<const char*, Value>> choices) {
  return [field, choices](Checker& check, const json& in, const char* key, Config& config) {
    return check.Choice(in, key, "the config", choices, config.*field);
  };
}

// A whole number within [low, high] at `key` of `object`.
bool Count(Checker& check, const json& object, const char* key, size_t low, size_t high,
           size_t& out) {
  const json* value = object.contains(key) ? &object[key] : nullptr;
  if (value == nullptr || !value->is_number_integer() || value->get<int64_t>() < 0 ||
      value->get<uint64_t>() < low || value->get<uint64_t>() > high)
    return check.Fail(std::string("resourceClaims.") + key + " must be a whole number from " +
                      std::to_string(low) + " to " + std::to_string(high));
  out = value->get<size_t>();
  return true;
}

bool Duration(Checker& check, const json& object, const char* key, std::chrono::milliseconds low,
              std::chrono::milliseconds high, std::chrono::milliseconds& out) {
  std::string text;
  if (!check.String(object, key, "resourceClaims", text)) return false;
  auto parsed = ParseDuration(text);
  if (!parsed.ok() || *parsed < low || *parsed > high)
    return check.Fail(std::string("resourceClaims.") + key +
                      " must be a duration (500ms, 2s) from " + std::to_string(low.count()) +
                      "ms to " + std::to_string(high.count()) + "ms, not '" + text + "'");
  out = *parsed;
  return true;
}

bool ReadFailurePolicy(Checker& check, const json& object, ClaimLookupFailure& out) {
  std::string word;
  if (!check.String(object, "onLookupFailure", "resourceClaims", word)) return false;
  if (word == "deny" || word == "allow") {
    out = word == "deny" ? ClaimLookupFailure::kDeny : ClaimLookupFailure::kAllow;
    return true;
  }
  return check.Fail("resourceClaims.onLookupFailure must be deny or allow, not '" + word + "'");
}

// resourceClaims: the lookups that happen inside an admission call, so each bound is one the API
// server's webhook timeout (5 s in deploy/, at most 30 s) and the Deployment's memory allow.
bool ReadClaimSettings(Checker& check, const json& in, const char* key, Config& config) {
  const json& object = in.contains(key) ? in[key] : json();
  if (!check.KnownKeys(object, key,
                       {"deviceClassDomain", "lookupTimeout", "cacheEntries", "cacheBytes",
                        "cacheTTL", "onLookupFailure"}))
    return false;
  ClaimSettings& claims = config.claims;
  if (!check.String(object, "deviceClassDomain", key, claims.device_class_domain)) return false;
  if (!IsDnsSubdomain(claims.device_class_domain))
    return check.Fail("resourceClaims.deviceClassDomain '" + claims.device_class_domain +
                      "' is not a DNS subdomain (DeviceClass names are)");
  using std::chrono::milliseconds;
  return Duration(check, object, "lookupTimeout", milliseconds(10), milliseconds(10000),
                  claims.lookup_timeout) &&
         Count(check, object, "cacheEntries", 0, 1 << 20, claims.cache_entries) &&
         Count(check, object, "cacheBytes", 0, 64 << 20, claims.cache_bytes) &&
         Duration(check, object, "cacheTTL", milliseconds(0), milliseconds(3600 * 1000),
                  claims.cache_ttl) &&
         ReadFailurePolicy(check, object, claims.on_failure);
}

// Every top-level key of the config, once, in the order it is read. The last four are read
// together by ReadInjections (the containers and the workload name the volumes): no reader here.
struct TopKey {
  const char* name;
  KeyReader read;
};

const std::vector<TopKey>& TopKeys() {
  static const std::vector<TopKey> kKeys = {
      {"runtimeClassNames", StringListKey(&Config::runtime_class_names, false)},
      {"coldPlugRuntimeClassNames", StringListKey(&Config::cold_plug_runtime_class_names, true)},
      {"resourcePrefixes", StringListKey(&Config::resource_prefixes, false)},
      {"excludedNamespaces", StringListKey(&Config::excluded_namespaces, true)},
      {"optOutAnnotation", StringKey(&Config::opt_out_annotation)},
      {"markerAnnotation", StringKey(&Config::marker_annotation)},
      {"runtimeClassToSet", StringKey(&Config::runtime_class_to_set)},
      {"nonKataPods",
       ChoiceKey<NonKataPolicy>(
           &Config::non_kata_policy,
           {{"deny", NonKataPolicy::kDeny}, {"setRuntimeClass", NonKataPolicy::kSetRuntimeClass}})},
      {"sidecarMode",
       ChoiceKey<SidecarMode>(&Config::sidecar_mode, {{"native", SidecarMode::kNative},
                                                      {"classic", SidecarMode::kClassic}})},
      {"volumes", {}},
      {"driverInit", {}},
      {"gridd", {}},
      {"workload", {}},
      {"resourceClaims", ReadClaimSettings},
  };
  return kKeys;
}

// The class names, prefixes, namespaces, annotations and policies: each alone (the table), then
// against each other.
bool ReadPolicy(Checker& check, const json& in, Config* config) {
  for (const TopKey& key : TopKeys()) {
    if (key.read && !key.read(check, in, key.name, *config)) return false;
  }
  // Both go into every mutated pod's metadata: a key the API server refuses would make every
  // vGPU pod fail to create.
  for (const auto& [key, value] : {std::pair{"optOutAnnotation", &config->opt_out_annotation},
                                   std::pair{"markerAnnotation", &config->marker_annotation}}) {
    if (!IsQualifiedName(*value)) {
      check.Fail(std::string(key) + " '" + *value +
                 "' is not a valid annotation key ([prefix/]name: prefix a DNS subdomain, name "
                 "up to 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric)");
      return false;
    }
  }
  if (config->opt_out_annotation == config->marker_annotation) {
    check.Fail("optOutAnnotation and markerAnnotation must differ");
    return false;
  }

  const auto& classes = config->runtime_class_names;
  if (std::find(classes.begin(), classes.end(), config->runtime_class_to_set) == classes.end()) {
    check.Fail("runtimeClassToSet '" + config->runtime_class_to_set +
               "' must be one of runtimeClassNames (a config that sets runtimeClassNames "
               "without the built-in class kata-vgpu sets runtimeClassToSet too)");
    return false;
  }
  // A misspelt class here would silently make a cold-plug class hot-plug.
  for (const auto& name : config->cold_plug_runtime_class_names) {
    if (std::find(classes.begin(), classes.end(), name) == classes.end()) {
      check.Fail("coldPlugRuntimeClassNames entry '" + name +
                 "' must be one of runtimeClassNames (a config that sets runtimeClassNames "
                 "sets coldPlugRuntimeClassNames too, [] when no class cold-plugs)");
      return false;
    }
  }

  return true;
}

// The volumes, the two injected containers and the workload's mounts, which name the volumes.
bool ReadInjections(Checker& check, const json& in, Config* config, ContainerSpec& driver,
                    ContainerSpec& gridd) {
  std::set<std::string> volume_names;
  if (!BuildVolumes(check, in.value("volumes", json()), config->volumes, volume_names)) {
    return false;
  }
  const auto& prefixes = config->resource_prefixes;
  if (!BuildContainer(check, in.value("driverInit", json()), "driverInit", volume_names, prefixes,
                      {"hotPlugArgs"}, driver) ||
      !BuildContainer(check, in.value("gridd", json()), "gridd", volume_names, prefixes,
                      {"startupProbe", "readinessProbe"}, gridd))
    return false;
  if (driver.base.name == gridd.base.name) {
    check.Fail("driverInit.name and gridd.name must differ");
    return false;
  }

  if (!BuildWorkload(check, in.value("workload", json::object()), volume_names,
                     config->workload_mounts, config->workload_env)) {
    return false;
  }

  return true;
}

Result<std::shared_ptr<const Config>> Build(const json& in) {
  Checker check;
  auto config = std::make_shared<Config>();
  auto fail = [&]() -> Result<std::shared_ptr<const Config>> {
    return Status::Error(ErrorCode::kConfig, "invalid webhook config: " + check.failure);
  };
  std::set<std::string> known;
  for (const TopKey& key : TopKeys()) known.insert(key.name);
  if (!check.KnownKeys(in, "the config", known)) return fail();
  if (!ReadPolicy(check, in, config.get())) return fail();
  ContainerSpec driver, gridd;
  if (!ReadInjections(check, in, config.get(), driver, gridd)) return fail();
  ComposeInjections(driver, gridd, config->sidecar_mode, config->hot_plug, config->cold_plug);
  return std::shared_ptr<const Config>(std::move(config));
}

}  // namespace

AttachMode Config::AttachModeOf(std::string_view runtime_class) const {
  const auto& cold = cold_plug_runtime_class_names;
  return std::find(cold.begin(), cold.end(), runtime_class) != cold.end() ? AttachMode::kColdPlug
                                                                          : AttachMode::kHotPlug;
}

std::shared_ptr<const Config> DefaultConfig() {
  static const std::shared_ptr<const Config> config = [] {
    auto parsed = ParseConfig("");
    if (!parsed.ok()) {  // the built-in defaults are tested; this cannot happen
      std::fprintf(stderr, "built-in config broken: %s\n", parsed.status().message().c_str());
      std::abort();
    }
    return parsed.value();
  }();
  return config;
}

Result<std::shared_ptr<const Config>> ParseConfig(std::string_view yaml_text) {
  auto defaults = ParseYamlMapping(DefaultYaml(), "the built-in default config");
  if (!defaults.ok()) return defaults.status();
  auto user = ParseYamlMapping(yaml_text, "the webhook config");
  if (!user.ok()) return user.status();
  json merged = std::move(defaults.value());
  MergeOver(merged, user.value());
  return Build(merged);
}

Result<std::shared_ptr<const Config>> LoadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(ErrorCode::kConfig, "cannot read webhook config " + path);
  std::ostringstream text;
  text << in.rdbuf();
  auto config = ParseConfig(text.str());
  if (!config.ok())
    return Status::Error(ErrorCode::kConfig, path + ": " + config.status().message());
  return config;
}

}  // namespace kvgpu::webhook
