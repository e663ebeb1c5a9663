#include "webhook/container_builder.h"

#include "webhook/api_rules.h"
#include "webhook/volume_builder.h"

namespace kvgpu::webhook {

using nlohmann::json;

namespace {

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

bool BuildArgs(Checker& check, const json& in, const char* key, const std::string& where,
               json& out) {
  out = nullptr;
  if (!in.contains(key)) return true;
  std::vector<std::string> list;
  if (!check.StringList(in[key], where + "." + key, list, true)) return false;
  if (!list.empty()) out = list;
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

}  // namespace

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

void ComposeInjections(const ContainerSpec& driver, const ContainerSpec& gridd, SidecarMode mode,
                       Injection& hot_plug, Injection& cold_plug) {
  const bool native = mode == SidecarMode::kNative;
  const json sidecar = native ? json("Always") : json();
  cold_plug.driver = Compose(driver.base, {{"args", driver.args}});
  cold_plug.gridd = Compose(gridd.base, {{"args", gridd.args},
                                         {"startupProbe", native ? gridd.startup_probe : json()},
                                         {"readinessProbe", gridd.readiness_probe},
                                         {"restartPolicy", sidecar}});
  cold_plug.driver_is_init_container = true;
  hot_plug.driver =
      Compose(driver.base, {{"args", driver.hot_plug_args}, {"restartPolicy", sidecar}});
  hot_plug.gridd = Compose(gridd.base, {{"args", gridd.args},
                                        {"readinessProbe", gridd.readiness_probe},
                                        {"restartPolicy", sidecar}});
  hot_plug.driver_is_init_container = false;
}

}  // namespace kvgpu::webhook
