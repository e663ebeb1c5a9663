#include "webhook/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "common/config_keys.h"

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

// The defaults, written as the YAML an admin would write, so docs/webhook.md can show the same
// text.
constexpr std::string_view kDefaultYaml = R"(
runtimeClassNames: [kata, kata-vgpu, kata-vgpu-vf]
coldPlugRuntimeClassNames: [kata-vgpu-vf]
resourcePrefixes: ["tencent.com/vgpu-"]
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
    hostPath: {path: /var/lib/kata-vgpu/licensing/gridd.conf, type: File}
  - name: kvgpu-client-token
    hostPath: {path: /var/lib/kata-vgpu/licensing/ClientConfigToken, type: Directory}
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
)";

// std::regex is avoided here: GCC 12 warns inside it under -fsanitize=address (a false positive
// that -Werror turns into a broken sanitizer build).
bool IsDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string_view WithoutSign(std::string_view text) {
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) text.remove_prefix(1);
  return text;
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsFloat(std::string_view text) {
  text = WithoutSign(text);
  auto exponent = text.find_first_of("eE");
  if (exponent != std::string_view::npos) {
    if (!IsDigits(WithoutSign(text.substr(exponent + 1)))) return false;
    text = text.substr(0, exponent);
  }
  auto dot = text.find('.');
  if (dot == std::string_view::npos) return IsDigits(text);
  std::string_view whole = text.substr(0, dot), fraction = text.substr(dot + 1);
  if (whole.empty()) return IsDigits(fraction);
  return IsDigits(whole) && (fraction.empty() || IsDigits(fraction));
}

// YAML 1.2 core-schema typing for plain scalars; quoted scalars stay strings.
json ScalarToJson(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  if (IsDigits(WithoutSign(text))) {
    try {
      return std::stoll(text);
    } catch (const std::out_of_range&) {
      return text;
    }
  }
  if (IsFloat(text)) return std::stod(text);
  return text;
}

json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return ScalarToJson(node);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) out[entry.first.as<std::string>()] = YamlToJson(entry.second);
      return out;
    }
  }
  return nullptr;
}

// Objects merge key by key (so `driverInit: {image: x}` keeps the default command); anything
// else replaces the default whole.
void Merge(json& base, const json& overlay) {
  if (!base.is_object() || !overlay.is_object()) {
    base = overlay;
    return;
  }
  for (const auto& [key, value] : overlay.items()) Merge(base[key], value);
}

class Checker {
 public:
  std::string failure;

  bool Fail(const std::string& message) {
    if (failure.empty()) failure = message;
    return false;
  }
  bool KnownKeys(const json& object, const std::string& where, std::set<std::string> keys) {
    if (!object.is_object()) return Fail(where + " must be a mapping");
    std::vector<std::string> present;
    for (const auto& [key, value] : object.items()) present.push_back(key);
    std::string unknown = UnknownKeyMessage(present, keys, where);
    return unknown.empty() || Fail(unknown);
  }
  bool String(const json& object, const char* key, const std::string& where, std::string& out) {
    const json* value = object.contains(key) ? &object[key] : nullptr;
    if (value == nullptr || !value->is_string() || value->get_ref<const std::string&>().empty())
      return Fail(where + "." + key + " must be a non-empty string");
    out = value->get<std::string>();
    return true;
  }
  bool StringList(const json& value, const std::string& where, std::vector<std::string>& out,
                  bool allow_empty_list) {
    if (!value.is_array()) return Fail(where + " must be a list of strings");
    out.clear();
    for (const auto& item : value) {
      if (!item.is_string() || item.get_ref<const std::string&>().empty())
        return Fail(where + " must hold only non-empty strings");
      out.push_back(item.get<std::string>());
    }
    if (out.empty() && !allow_empty_list) return Fail(where + " must not be empty");
    return true;
  }
};

bool IsAbsolutePath(const json& value) {
  return value.is_string() && !value.get_ref<const std::string&>().empty() &&
         value.get_ref<const std::string&>()[0] == '/';
}

// The API server's resource.Quantity grammar: [+-]?(digits|digits.|digits.digits|.digits) then
// nothing, a binary suffix (Ki..Ei), a decimal one (m, k, M..E) or an exponent (e/E, signed
// digits). The value, for comparing a request with its limit; nullopt if not a quantity.
std::optional<long double> QuantityValue(const json& quantity) {
  if (quantity.is_number()) {
    long double value = quantity.get<long double>();
    return std::isfinite(value) ? std::optional(value) : std::nullopt;
  }
  if (!quantity.is_string()) return std::nullopt;
  std::string_view text = quantity.get_ref<const std::string&>();
  size_t at = 0;
  if (at < text.size() && (text[at] == '+' || text[at] == '-')) ++at;
  size_t digits = 0;
  while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) ++at, ++digits;
  if (at < text.size() && text[at] == '.') {
    ++at;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) ++at, ++digits;
  }
  if (digits == 0) return std::nullopt;
  const std::string number(text.substr(0, at));
  std::string_view suffix = text.substr(at);
  long double scale = 1;
  static const std::pair<std::string_view, long double> kSuffixes[] = {
      {"", 1},
      {"m", 1e-3L},
      {"k", 1e3L},
      {"M", 1e6L},
      {"G", 1e9L},
      {"T", 1e12L},
      {"P", 1e15L},
      {"E", 1e18L},
      {"Ki", 1024.0L},
      {"Mi", 1048576.0L},
      {"Gi", 1073741824.0L},
      {"Ti", 1099511627776.0L},
      {"Pi", 1125899906842624.0L},
      {"Ei", 1152921504606846976.0L}};
  bool known = false;
  for (const auto& [name, factor] : kSuffixes) {
    if (suffix == name) {
      scale = factor;
      known = true;
    }
  }
  if (!known) {
    if (suffix.empty() || (suffix[0] != 'e' && suffix[0] != 'E')) return std::nullopt;
    std::string_view exponent = WithoutSign(suffix.substr(1));
    if (!IsDigits(exponent) || exponent.size() > 4) return std::nullopt;
    scale = std::pow(10.0L, std::stold(std::string(suffix.substr(1))));
  }
  return std::stold(number) * scale;
}

// What the API server checks of a volume source the webhook injects: a known source kind, and
// for the common ones the fields it requires. A source it would refuse makes every mutated pod
// invalid, so it is refused here, at start.
bool CheckVolumeSource(Checker& check, const std::string& volume, const std::string& kind,
                       const json& source) {
  static const std::set<std::string> kKinds = {"hostPath",
                                               "emptyDir",
                                               "secret",
                                               "configMap",
                                               "projected",
                                               "downwardAPI",
                                               "persistentVolumeClaim",
                                               "csi",
                                               "ephemeral",
                                               "nfs",
                                               "iscsi",
                                               "image",
                                               "gcePersistentDisk",
                                               "awsElasticBlockStore",
                                               "gitRepo",
                                               "glusterfs",
                                               "rbd",
                                               "flexVolume",
                                               "cinder",
                                               "cephfs",
                                               "flocker",
                                               "fc",
                                               "azureFile",
                                               "vsphereVolume",
                                               "quobyte",
                                               "azureDisk",
                                               "photonPersistentDisk",
                                               "portworxVolume",
                                               "scaleIO",
                                               "storageos"};
  const std::string where = "volume '" + volume + "'." + kind;
  if (!kKinds.contains(kind))
    return check.Fail("volume '" + volume + "': '" + kind + "' is not a volume source");
  if (kind == "hostPath") {
    static const std::set<std::string> kTypes = {
        "",       "DirectoryOrCreate", "Directory",  "FileOrCreate", "File",
        "Socket", "CharDevice",        "BlockDevice"};
    if (!check.KnownKeys(source, where, {"path", "type"})) return false;
    if (!IsAbsolutePath(source.value("path", json())))
      return check.Fail(where + ".path must be an absolute path");
    if (source.contains("type") &&
        (!source["type"].is_string() || !kTypes.contains(source["type"].get<std::string>())))
      return check.Fail(where +
                        ".type must be one of \"\", DirectoryOrCreate, Directory, "
                        "FileOrCreate, File, Socket, CharDevice, BlockDevice");
  } else if (kind == "emptyDir") {
    if (!check.KnownKeys(source, where, {"medium", "sizeLimit"})) return false;
    if (source.contains("medium") && source["medium"] != "" && source["medium"] != "Memory")
      return check.Fail(where + ".medium must be \"\" or Memory");
    if (source.contains("sizeLimit") && !QuantityValue(source["sizeLimit"]))
      return check.Fail(where + ".sizeLimit must be a quantity (like 64Mi)");
  } else if (kind == "configMap" || kind == "secret") {
    const char* key = kind == "configMap" ? "name" : "secretName";
    std::string name;
    if (!check.String(source, key, where, name)) return false;
  }
  return true;
}

// Injected names get "-2", "-3", ... on a clash, so they must leave room for it within 63.
constexpr size_t kMaxInjectedNameLength = 56;

bool BuildMounts(Checker& check, const json& mounts, const std::string& where,
                 const std::set<std::string>& volume_names, json& out) {
  if (!mounts.is_array()) return check.Fail(where + " must be a list");
  std::set<std::string> paths;
  out = json::array();
  for (const auto& mount : mounts) {
    if (!check.KnownKeys(mount, where + "[]", {"name", "mountPath", "readOnly", "subPath"}))
      return false;
    std::string name;
    if (!check.String(mount, "name", where + "[]", name)) return false;
    if (!volume_names.contains(name))
      return check.Fail(where + " mounts volume '" + name + "' that is not in volumes");
    if (!IsAbsolutePath(mount.value("mountPath", json())))
      return check.Fail(where + "[" + name + "].mountPath must be an absolute path");
    if (!paths.insert(mount["mountPath"].get<std::string>()).second)
      return check.Fail(where + " mounts two volumes at " + mount["mountPath"].get<std::string>());
    if (mount.contains("readOnly") && !mount["readOnly"].is_boolean())
      return check.Fail(where + "[" + name + "].readOnly must be true or false");
    if (mount.contains("subPath") && !mount["subPath"].is_string())
      return check.Fail(where + "[" + name + "].subPath must be a string");
    out.push_back(mount);
  }
  return true;
}

bool BuildResources(Checker& check, const json& resources, const std::string& where,
                    const std::vector<std::string>& prefixes) {
  if (!check.KnownKeys(resources, where, {"requests", "limits"})) return false;
  for (const auto& [kind, list] : resources.items()) {
    if (!list.is_object()) return check.Fail(where + "." + kind + " must be a mapping");
    for (const auto& [name, quantity] : list.items()) {
      if (!IsQualifiedName(name))
        return check.Fail(where + "." + kind + ": '" + name + "' is not a resource name");
      auto value = QuantityValue(quantity);
      if (!value || *value < 0)
        return check.Fail(where + "." + kind + "." + name +
                          " must be a quantity of at least 0 (like 100m, 64Mi, 1)");
      for (const auto& prefix : prefixes) {
        // An injected container that asked for a vGPU would take a device meant for the workload.
        if (name.starts_with(prefix))
          return check.Fail(where + "." + kind + " must not ask for a vGPU (" + name + ")");
      }
    }
  }
  // The API server refuses a request above its limit.
  if (resources.contains("requests") && resources.contains("limits")) {
    for (const auto& [name, request] : resources["requests"].items()) {
      if (!resources["limits"].contains(name)) continue;
      if (*QuantityValue(request) > *QuantityValue(resources["limits"][name]))
        return check.Fail(where + ".requests." + name + " must not exceed limits." + name);
    }
  }
  return true;
}

// An exec probe; null (absent, or set to null to drop a default) means none.
bool BuildProbe(Checker& check, const json& probe, const std::string& where, json& out) {
  out = nullptr;
  if (probe.is_null()) return true;
  if (!check.KnownKeys(probe, where,
                       {"command", "periodSeconds", "timeoutSeconds", "failureThreshold",
                        "initialDelaySeconds"}))
    return false;
  std::vector<std::string> command;
  if (!check.StringList(probe.value("command", json()), where + ".command", command, false))
    return false;
  out = {{"exec", {{"command", command}}}};
  for (const char* key :
       {"periodSeconds", "timeoutSeconds", "failureThreshold", "initialDelaySeconds"}) {
    if (!probe.contains(key)) continue;
    const json& value = probe[key];
    bool may_be_zero = std::string_view(key) == "initialDelaySeconds";
    if (!value.is_number_integer() || value.get<int64_t>() < (may_be_zero ? 0 : 1) ||
        value.get<int64_t>() > 86400)
      return check.Fail(where + "." + key + " must be a whole number of seconds" +
                        (may_be_zero ? " >= 0" : " >= 1"));
    out[key] = value;
  }
  return true;
}

// One injected container as configured: the part common to every attach mode, and the parts
// that differ (null when not configured).
struct ContainerSpec {
  InjectedContainer base;
  json args;
  json hot_plug_args;    // driverInit only
  json startup_probe;    // gridd only
  json readiness_probe;  // gridd only
};

bool BuildArgs(Checker& check, const json& in, const char* key, const std::string& where,
               json& out) {
  out = nullptr;
  if (!in.contains(key)) return true;
  std::vector<std::string> list;
  if (!check.StringList(in[key], where + "." + key, list, true)) return false;
  if (!list.empty()) out = list;
  return true;
}

// `extra_keys` are the mode-specific keys this container accepts besides the common ones.
bool BuildContainer(Checker& check, const json& in, const std::string& where,
                    const std::set<std::string>& volume_names,
                    const std::vector<std::string>& prefixes, std::set<std::string> extra_keys,
                    ContainerSpec& out) {
  std::set<std::string> keys{"name", "image",      "imagePullPolicy", "command",
                             "args", "privileged", "resources",       "volumeMounts"};
  keys.merge(extra_keys);
  if (!check.KnownKeys(in, where, keys)) return false;
  InjectedContainer& base = out.base;
  if (!check.String(in, "name", where, base.name)) return false;
  if (!IsDnsLabel(base.name) || base.name.size() > kMaxInjectedNameLength)
    return check.Fail(where + ".name '" + base.name + "' must be a DNS label of at most " +
                      std::to_string(kMaxInjectedNameLength) + " characters");
  json& obj = base.object;
  obj = json::object();
  obj["name"] = base.name;
  std::string image;
  if (!check.String(in, "image", where, image)) return false;
  obj["image"] = image;
  if (in.contains("imagePullPolicy")) {
    std::string policy;
    if (!check.String(in, "imagePullPolicy", where, policy)) return false;
    if (policy != "Always" && policy != "IfNotPresent" && policy != "Never")
      return check.Fail(where + ".imagePullPolicy must be Always, IfNotPresent or Never");
    obj["imagePullPolicy"] = policy;
  }
  std::vector<std::string> list;
  if (!check.StringList(in.value("command", json()), where + ".command", list, false)) return false;
  obj["command"] = list;
  if (!BuildArgs(check, in, "args", where, out.args)) return false;
  if (keys.contains("hotPlugArgs") &&
      !BuildArgs(check, in, "hotPlugArgs", where, out.hot_plug_args))
    return false;
  if (in.contains("privileged")) {
    if (!in["privileged"].is_boolean()) return check.Fail(where + ".privileged must be a boolean");
    // Root, whatever the pod's securityContext says: a pod-level runAsNonRoot or runAsUser would
    // otherwise reach the driver loader and gridd, which then fail (modprobe as a user) or are
    // refused by the kubelet (runAsNonRoot with an image that runs as root).
    if (in["privileged"].get<bool>()) {
      obj["securityContext"] = {
          {"privileged", true}, {"runAsUser", 0}, {"runAsGroup", 0}, {"runAsNonRoot", false}};
    }
  }
  if (in.contains("resources")) {
    if (!BuildResources(check, in["resources"], where + ".resources", prefixes)) return false;
    obj["resources"] = in["resources"];
  }
  json mounts;
  if (!BuildMounts(check, in.value("volumeMounts", json::array()), where + ".volumeMounts",
                   volume_names, mounts))
    return false;
  if (!mounts.empty()) obj["volumeMounts"] = mounts;
  if (keys.contains("startupProbe") && !BuildProbe(check, in.value("startupProbe", json()),
                                                   where + ".startupProbe", out.startup_probe))
    return false;
  if (keys.contains("readinessProbe") &&
      !BuildProbe(check, in.value("readinessProbe", json()), where + ".readinessProbe",
                  out.readiness_probe))
    return false;
  return true;
}

// `base` plus the given fields (null ones left out), rendered.
InjectedContainer Compose(const InjectedContainer& base,
                          std::initializer_list<std::pair<const char*, json>> fields) {
  InjectedContainer out = base;
  for (const auto& [key, value] : fields)
    if (!value.is_null()) out.object[key] = value;
  out.text = out.object.dump();
  return out;
}

// The containers per attach mode. Only on cold-plug with native sidecars does gridd's startup
// probe hold anything back (the next init containers and the workload wait for it, and the
// vGPU is there to be licensed); everywhere else a startup probe would either block the hot-plug
// that the probe waits for, or hold back nothing, so readiness alone reports the licence.
void ComposeInjections(const ContainerSpec& driver, const ContainerSpec& gridd, Config& config) {
  const bool native = config.sidecar_mode == SidecarMode::kNative;
  const json sidecar = native ? json("Always") : json();
  config.cold_plug.driver = Compose(driver.base, {{"args", driver.args}});
  config.cold_plug.gridd =
      Compose(gridd.base, {{"args", gridd.args},
                           {"startupProbe", native ? gridd.startup_probe : json()},
                           {"readinessProbe", gridd.readiness_probe},
                           {"restartPolicy", sidecar}});
  config.cold_plug.driver_is_init_container = true;
  config.hot_plug.driver =
      Compose(driver.base, {{"args", driver.hot_plug_args}, {"restartPolicy", sidecar}});
  config.hot_plug.gridd = Compose(gridd.base, {{"args", gridd.args},
                                               {"readinessProbe", gridd.readiness_probe},
                                               {"restartPolicy", sidecar}});
  config.hot_plug.driver_is_init_container = false;
}

// [-._a-zA-Z][-._a-zA-Z0-9]*, the API server's rule for env var names.
bool IsEnvName(const std::string& name) {
  auto allowed = [](char c, bool first) {
    return c == '-' || c == '.' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
  };
  if (name.empty() || !allowed(name[0], true)) return false;
  return std::all_of(name.begin() + 1, name.end(), [&](char c) { return allowed(c, false); });
}

Result<std::shared_ptr<const Config>> Build(const json& in) {
  Checker check;
  auto config = std::make_shared<Config>();
  auto fail = [&]() -> Result<std::shared_ptr<const Config>> {
    return Status::Error(ErrorCode::kConfig, "invalid webhook config: " + check.failure);
  };
  if (!check.KnownKeys(
          in, "the config",
          {"runtimeClassNames", "coldPlugRuntimeClassNames", "resourcePrefixes",
           "excludedNamespaces", "optOutAnnotation", "markerAnnotation", "nonKataPods",
           "runtimeClassToSet", "sidecarMode", "volumes", "driverInit", "gridd", "workload"}))
    return fail();
  if (!check.StringList(in.value("runtimeClassNames", json()), "runtimeClassNames",
                        config->runtime_class_names, false) ||
      !check.StringList(in.value("coldPlugRuntimeClassNames", json()), "coldPlugRuntimeClassNames",
                        config->cold_plug_runtime_class_names, true) ||
      !check.StringList(in.value("resourcePrefixes", json()), "resourcePrefixes",
                        config->resource_prefixes, false) ||
      !check.StringList(in.value("excludedNamespaces", json()), "excludedNamespaces",
                        config->excluded_namespaces, true) ||
      !check.String(in, "optOutAnnotation", "the config", config->opt_out_annotation) ||
      !check.String(in, "markerAnnotation", "the config", config->marker_annotation) ||
      !check.String(in, "runtimeClassToSet", "the config", config->runtime_class_to_set))
    return fail();
  // Both go into every mutated pod's metadata: a key the API server refuses would make every
  // vGPU pod fail to create.
  for (const auto& [key, value] : {std::pair{"optOutAnnotation", &config->opt_out_annotation},
                                   std::pair{"markerAnnotation", &config->marker_annotation}}) {
    if (!IsQualifiedName(*value)) {
      check.Fail(std::string(key) + " '" + *value +
                 "' is not a valid annotation key ([prefix/]name: prefix a DNS subdomain, name "
                 "up to 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric)");
      return fail();
    }
  }
  if (config->opt_out_annotation == config->marker_annotation) {
    check.Fail("optOutAnnotation and markerAnnotation must differ");
    return fail();
  }

  std::string word;
  if (!check.String(in, "nonKataPods", "the config", word)) return fail();
  if (word == "deny") {
    config->non_kata_policy = NonKataPolicy::kDeny;
  } else if (word == "setRuntimeClass") {
    config->non_kata_policy = NonKataPolicy::kSetRuntimeClass;
  } else {
    check.Fail("nonKataPods must be deny or setRuntimeClass, not '" + word + "'");
    return fail();
  }
  if (!check.String(in, "sidecarMode", "the config", word)) return fail();
  if (word == "native") {
    config->sidecar_mode = SidecarMode::kNative;
  } else if (word == "classic") {
    config->sidecar_mode = SidecarMode::kClassic;
  } else {
    check.Fail("sidecarMode must be native or classic, not '" + word + "'");
    return fail();
  }
  const auto& classes = config->runtime_class_names;
  if (std::find(classes.begin(), classes.end(), config->runtime_class_to_set) == classes.end()) {
    check.Fail("runtimeClassToSet '" + config->runtime_class_to_set +
               "' must be one of runtimeClassNames (a config that sets runtimeClassNames "
               "without the built-in class kata-vgpu sets runtimeClassToSet too)");
    return fail();
  }
  // A misspelt class here would silently make a cold-plug class hot-plug.
  for (const auto& name : config->cold_plug_runtime_class_names) {
    if (std::find(classes.begin(), classes.end(), name) == classes.end()) {
      check.Fail("coldPlugRuntimeClassNames entry '" + name +
                 "' must be one of runtimeClassNames (a config that sets runtimeClassNames "
                 "sets coldPlugRuntimeClassNames too, [] when no class cold-plugs)");
      return fail();
    }
  }

  std::set<std::string> volume_names;
  const json& volumes = in.value("volumes", json());
  if (!volumes.is_array()) {
    check.Fail("volumes must be a list");
    return fail();
  }
  for (const auto& volume : volumes) {
    InjectedVolume out;
    if (!volume.is_object() || !check.String(volume, "name", "volumes[]", out.name)) return fail();
    if (!IsDnsLabel(out.name) || out.name.size() > kMaxInjectedNameLength) {
      check.Fail("volumes[].name '" + out.name + "' must be a DNS label of at most 56 characters");
      return fail();
    }
    if (!volume_names.insert(out.name).second) {
      check.Fail("volume '" + out.name + "' is listed twice");
      return fail();
    }
    if (volume.size() != 2) {
      check.Fail("volume '" + out.name + "' needs exactly one source (hostPath, configMap, ...)");
      return fail();
    }
    for (const auto& [key, source] : volume.items()) {
      if (key == "name") continue;
      if (!source.is_object()) {
        check.Fail("volume '" + out.name + "': " + key + " must be a mapping");
        return fail();
      }
      if (!CheckVolumeSource(check, out.name, key, source)) return fail();
    }
    out.object = volume;
    config->volumes.push_back(std::move(out));
  }

  const auto& prefixes = config->resource_prefixes;
  ContainerSpec driver, gridd;
  if (!BuildContainer(check, in.value("driverInit", json()), "driverInit", volume_names, prefixes,
                      {"hotPlugArgs"}, driver) ||
      !BuildContainer(check, in.value("gridd", json()), "gridd", volume_names, prefixes,
                      {"startupProbe", "readinessProbe"}, gridd))
    return fail();
  if (driver.base.name == gridd.base.name) {
    check.Fail("driverInit.name and gridd.name must differ");
    return fail();
  }

  const json& workload = in.value("workload", json::object());
  if (!check.KnownKeys(workload, "workload", {"volumeMounts", "env"}) ||
      !BuildMounts(check, workload.value("volumeMounts", json::array()), "workload.volumeMounts",
                   volume_names, config->workload_mounts))
    return fail();
  const json& env = workload.value("env", json::array());
  if (!env.is_array()) {
    check.Fail("workload.env must be a list");
    return fail();
  }
  std::set<std::string> env_names;
  for (const auto& var : env) {
    std::string name;
    if (!check.KnownKeys(var, "workload.env[]", {"name", "value"}) ||
        !check.String(var, "name", "workload.env[]", name))
      return fail();
    if (!IsEnvName(name) || !env_names.insert(name).second) {
      check.Fail("workload.env name '" + name + "' is not a valid, unique variable name");
      return fail();
    }
    if (!var.contains("value") || !var["value"].is_string()) {
      check.Fail("workload.env[" + name + "].value must be a string");
      return fail();
    }
    config->workload_env.push_back(var);
  }

  ComposeInjections(driver, gridd, *config);
  for (const auto& volume : config->volumes) config->volume_texts.push_back(volume.object.dump());
  for (const auto& mount : config->workload_mounts)
    config->workload_mount_texts.push_back(mount.dump());
  for (const auto& var : config->workload_env) config->workload_env_texts.push_back(var.dump());
  return std::shared_ptr<const Config>(std::move(config));
}

Result<json> ParseYaml(std::string_view text, const std::string& what) {
  try {
    YAML::Node node = YAML::Load(std::string(text));
    if (node.IsNull()) return json::object();
    if (!node.IsMap()) return Status::Error(ErrorCode::kConfig, what + " must be a YAML mapping");
    return YamlToJson(node);
  } catch (const YAML::Exception& e) {
    return Status::Error(ErrorCode::kConfig, what + " is not valid YAML: " + e.what());
  }
}

}  // namespace

AttachMode Config::AttachModeOf(std::string_view runtime_class) const {
  const auto& cold = cold_plug_runtime_class_names;
  return std::find(cold.begin(), cold.end(), runtime_class) != cold.end() ? AttachMode::kColdPlug
                                                                          : AttachMode::kHotPlug;
}

bool IsDnsSubdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    if (!IsDnsLabel(name.substr(start, dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsQualifiedName(std::string_view key) {
  size_t slash = key.find('/');
  std::string_view name = key;
  if (slash != std::string_view::npos) {
    if (!IsDnsSubdomain(key.substr(0, slash))) return false;
    name = key.substr(slash + 1);
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (name.empty() || name.size() > 63 || !alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool IsDnsLabel(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-'; });
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
  auto defaults = ParseYaml(kDefaultYaml, "the built-in default config");
  if (!defaults.ok()) return defaults.status();
  auto user = ParseYaml(yaml_text, "the webhook config");
  if (!user.ok()) return user.status();
  json merged = std::move(defaults.value());
  Merge(merged, user.value());
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
