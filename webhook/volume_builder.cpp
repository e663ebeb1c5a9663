#include "webhook/volume_builder.h"

#include "webhook/api_rules.h"

namespace kvgpu::webhook {

using nlohmann::json;

namespace {

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

}  // namespace

bool BuildVolumes(Checker& check, const json& volumes, std::vector<InjectedVolume>& volumes_out,
                  std::set<std::string>& names) {
  if (!volumes.is_array()) return check.Fail("volumes must be a list");
  for (const auto& volume : volumes) {
    InjectedVolume out;
    if (!volume.is_object() || !check.String(volume, "name", "volumes[]", out.name)) return false;
    if (!IsDnsLabel(out.name) || out.name.size() > kMaxInjectedNameLength) {
      return check.Fail("volumes[].name '" + out.name +
                        "' must be a DNS label of at most 56 characters");
    }
    if (!names.insert(out.name).second) {
      return check.Fail("volume '" + out.name + "' is listed twice");
    }
    if (volume.size() != 2) {
      return check.Fail("volume '" + out.name +
                        "' needs exactly one source (hostPath, configMap, ...)");
    }
    for (const auto& [key, source] : volume.items()) {
      if (key == "name") continue;
      if (!source.is_object()) {
        return check.Fail("volume '" + out.name + "': " + key + " must be a mapping");
      }
      if (!CheckVolumeSource(check, out.name, key, source)) return false;
    }
    out.object = volume;
    out.text = out.object.dump();
    volumes_out.push_back(std::move(out));
  }

  return true;
}

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

bool BuildWorkload(Checker& check, const json& workload, const std::set<std::string>& volume_names,
                   std::vector<RenderedObject>& mounts, std::vector<RenderedObject>& env_out) {
  json mount_list;
  if (!check.KnownKeys(workload, "workload", {"volumeMounts", "env"}) ||
      !BuildMounts(check, workload.value("volumeMounts", json::array()), "workload.volumeMounts",
                   volume_names, mount_list))
    return false;
  const json& env = workload.value("env", json::array());
  if (!env.is_array()) return check.Fail("workload.env must be a list");
  std::set<std::string> env_names;
  for (const auto& var : env) {
    std::string name;
    if (!check.KnownKeys(var, "workload.env[]", {"name", "value"}) ||
        !check.String(var, "name", "workload.env[]", name))
      return false;
    if (!IsEnvName(name) || !env_names.insert(name).second) {
      return check.Fail("workload.env name '" + name + "' is not a valid, unique variable name");
    }
    if (!var.contains("value") || !var["value"].is_string()) {
      return check.Fail("workload.env[" + name + "].value must be a string");
    }
    env_out.push_back({var, var.dump()});
  }

  for (const json& mount : mount_list) mounts.push_back({mount, mount.dump()});
  return true;
}

}  // namespace kvgpu::webhook
