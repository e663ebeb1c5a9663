// The doctor's checks of what is installed on the node: the Kata release against each shipped
// class, Kata itself, kata-config/install.sh's configurations, containerd handlers and QEMU
// wrapper, and the device plugin's sockets and state. Its list also runs the checks of what a
// pod's VM is given (guest-image/build.sh install's kernel and driver bundle, their branch
// against the host's vGPU manager, the licence token), which are in doctor_guest.cpp.
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "doctor/doctor_internal.h"

namespace kvgpu::doctor::internal {

namespace {

bool IsExecutableFile(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IXUSR) != 0;
}

std::string VersionText(const std::vector<int>& v) {
  std::string out;
  for (int part : v) out += (out.empty() ? "" : ".") + std::to_string(part);
  return out;
}

// The Kata rows of docs/kata-config.md#versions (enforced also by check-config.py runtime, from
// kata-config/kata_qemu.py); a test keeps this table and the document's in step.
struct KataClass {
  const char* name;
  mdev::Flavour flavour;
  std::vector<int> minimum;
  const char* why;
};
const std::vector<KataClass>& KataClasses() {
  static const std::vector<KataClass> classes = {
      {"kata-vgpu",
       mdev::Flavour::kMdev,
       {3, 2, 0},
       "hot_plug_vfio = \"root-port\" with pcie_root_port came with Kata 3.2"},
      {"kata-vgpu-vf",
       mdev::Flavour::kVendorVfio,
       {3, 24, 0},
       "cold plug of the devices kubelet assigned (PodResources) came with Kata 3.24 (commit "
       "5aa184925a)"},
  };
  return classes;
}

void CheckKataRelease(NodeView& node, std::vector<Finding>& out) {
  const auto& kata = node.Kata();
  if (!kata.version) {
    out.push_back({"kata.version-unknown", Severity::kError, kata.problem,
                   "without Kata Containers no vGPU pod can start",
                   "install Kata Containers (its release tarball unpacks to /opt/kata), or pass "
                   "--kata-version-file with the output of 'kata-runtime --version'"});
    return;
  }
  auto version = ParseVersion(*kata.version);
  for (const auto& cls : KataClasses()) {
    if (version >= cls.minimum) continue;
    bool needed = node.HasFlavour(cls.flavour);
    out.push_back({"kata.too-old", needed ? Severity::kError : Severity::kInfo,
                   "Kata " + *kata.version + " cannot serve " + cls.name + " (needs " +
                       VersionText(cls.minimum) + " or later)" +
                       (needed ? "" : "; no GPU of this node needs that class"),
                   std::string(cls.why) + " (docs/kata-config.md#versions)",
                   "upgrade Kata Containers to " + VersionText(cls.minimum) +
                       " or later (3.27 and 3.32 are the releases the VM lab proves)"});
  }
}

void CheckKataInstall(NodeView& node, std::vector<Finding>& out) {
  const fs::path bin = node.options().kata_dir / "bin";
  for (const char* name : {"containerd-shim-kata-v2", "qemu-system-x86_64"}) {
    fs::path path = node.Path(bin / name);
    if (IsExecutableFile(path)) continue;
    out.push_back({"kata.binary-missing", Severity::kError,
                   path.string() + " is missing or not executable",
                   std::string(name) + " is what containerd (the shim) or the QEMU wrapper runs",
                   "install Kata Containers' release tarball so that it unpacks to " +
                       node.options().kata_dir.string() + " (docs/install.md step 3)"});
  }
}

fs::path ClassConfig(NodeView& node, const std::string& handler) {
  return node.options().install_prefix / "share/defaults/kata-containers" /
         ("configuration-" + handler + ".toml");
}

void CheckKataConfigs(NodeView& node, std::vector<Finding>& out) {
  for (const auto& cls : KataClasses()) {
    fs::path path = ClassConfig(node, cls.name);
    if (node.Read(path)) continue;
    out.push_back({"kata-config.missing", Severity::kError,
                   node.Path(path).string() + " is missing",
                   std::string("the ") + cls.name + " handler's Kata configuration: its pods fail",
                   "sudo kata-config/install.sh (docs/install.md step 3)"});
  }
}

struct Handler {
  bool seen = false;
  std::string runtime_path, config_path;
};

// The kata-vgpu handlers' tables in containerd's config text (config version 2 or 3): table
// headers "[plugins.<cri plugin>.containerd.runtimes.<handler>]" and ".options]", the two keys
// install.sh writes. Not a TOML parser: the doctor only needs to find what install.sh wrote.
std::map<std::string, Handler> FindHandlers(const std::string& text) {
  static const std::regex header(
      R"(^\s*\[(.*)\.runtimes\.\"?([A-Za-z0-9_-]+)\"?(\.options)?\]\s*$)");
  static const std::regex key(R"(^\s*(runtime_path|ConfigPath)\s*=\s*\"([^\"]*)\")");
  std::map<std::string, Handler> handlers;
  std::string current;
  std::istringstream lines(text);
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, m, header)) {
      current = m[2];
      handlers[current].seen = true;
    } else if (!line.empty() && line.find_first_not_of(" \t") != std::string::npos &&
               line[line.find_first_not_of(" \t")] == '[') {
      current.clear();
    } else if (!current.empty() && std::regex_search(line, m, key)) {
      (m[1] == "runtime_path" ? handlers[current].runtime_path : handlers[current].config_path) =
          m[2];
    }
  }
  return handlers;
}

// config.toml plus, for config version 3, the drop-ins its one-line `imports` names.
std::string ContainerdText(NodeView& node, const std::string& main) {
  std::string text = main;
  static const std::regex imports(R"(^\s*imports\s*=\s*\[(.*)\])");
  static const std::regex quoted("\"([^\"]+)\"");
  std::istringstream lines(main);
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (!std::regex_search(line, m, imports)) continue;
    std::string list = m[1];
    for (std::sregex_iterator it(list.begin(), list.end(), quoted), end; it != end; ++it) {
      text += "\n" + node.Read((*it)[1].str()).value_or("");
    }
  }
  return text;
}

// docs/install.md step 3 and docs/kata-config.md#containerd.
void CheckContainerd(NodeView& node, std::vector<Finding>& out) {
  const fs::path& config = node.options().containerd_config;
  auto main = node.Read(config);
  if (!main) {
    out.push_back(
        {"containerd.config-missing", Severity::kError, node.Path(config).string() + " is missing",
         "kubelet starts pods through containerd; without its config there are no "
         "kata-vgpu handlers",
         "install containerd (1.6, 1.7 or 2.x), 'containerd config default > " + config.string() +
             "', then sudo kata-config/install.sh --restart-containerd"});
    return;
  }
  auto handlers = FindHandlers(ContainerdText(node, *main));
  for (const auto& cls : KataClasses()) {
    const Handler& handler = handlers[cls.name];
    if (!handler.seen) {
      out.push_back(
          {"containerd.handler-missing", Severity::kError,
           node.Path(config).string() + " (and its imports) define no runtime '" + cls.name + "'",
           std::string("pods of RuntimeClass ") + cls.name + " fail with 'no runtime for \"" +
               cls.name + "\" is configured'",
           "sudo kata-config/install.sh --restart-containerd"});
      continue;
    }
    fs::path wanted = ClassConfig(node, cls.name);
    if (!handler.config_path.empty() && handler.config_path != wanted.string() &&
        !node.Read(handler.config_path)) {
      out.push_back({"containerd.handler-config-missing", Severity::kError,
                     std::string("runtime '") + cls.name + "' has ConfigPath " +
                         handler.config_path + ", which does not exist",
                     "the Kata shim fails to load its configuration and the pod never starts",
                     "sudo kata-config/install.sh --restart-containerd (it writes " +
                         wanted.string() + " and points the handler at it)"});
    }
  }
}

// docs/kata-config.md "BAR space": the kata-vgpu class's QEMU is our wrapper, which reserves
// root-port windows for the vGPU's BARs; Kata 3.28+ no longer does.
void CheckQemuWrapper(NodeView& node, std::vector<Finding>& out) {
  fs::path wrapper = node.options().install_prefix / "bin/qemu-system-x86_64";
  if (!IsExecutableFile(node.Path(wrapper))) {
    out.push_back({"qemu-wrapper.missing", Severity::kError,
                   node.Path(wrapper).string() + " is missing or not executable",
                   "kata-vgpu VMs run this QEMU; without it they do not start (and with Kata's "
                   "plain QEMU on 3.28+ a large-BAR vGPU gets no driver)",
                   "sudo kata-config/install.sh (or --kata-deploy on kata-deploy nodes)"});
    return;
  }
  auto config = node.Read(ClassConfig(node, "kata-vgpu"));
  static const std::regex path_key(R"(^\s*path\s*=\s*\"([^\"]*)\")", std::regex::multiline);
  std::smatch m;
  if (config && std::regex_search(*config, m, path_key) && m[1] != wrapper.string()) {
    out.push_back({"qemu-wrapper.unused", Severity::kWarning,
                   "configuration-kata-vgpu.toml runs " + m[1].str() + ", not " + wrapper.string(),
                   "without the wrapper's root-port reserves, Kata 3.28+ leaves a hot-plugged "
                   "large-BAR vGPU without a driver",
                   "sudo kata-config/install.sh (it rewrites the configuration)"});
  }
}

bool IsSocket(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// The running device plugin: kubelet's registration socket, the plugin's own sockets
// (kata-vgpu-<resource>.sock, deviceplugin/model/resource_naming.cpp) and its state file
// (deviceplugin/model/state_store.h: {"version": 1, "vgpus": [...]}).
void CheckDevicePlugin(NodeView& node, std::vector<Finding>& out) {
  fs::path plugins = node.options().kubelet_dir / "device-plugins";
  if (!IsSocket(node.Path(plugins / "kubelet.sock"))) {
    out.push_back({"plugin.kubelet-socket-missing", Severity::kWarning,
                   node.Path(plugins / "kubelet.sock").string() + " is not a socket",
                   "kubelet is not running (or uses another --root-dir), so no device plugin can "
                   "register",
                   "start kubelet; pass --kubelet-dir if its root is not /var/lib/kubelet"});
    return;
  }
  bool any = false;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(node.Path(plugins), ec)) {
    std::string name = entry.path().filename();
    any |= name.rfind("kata-vgpu-", 0) == 0 && IsSocket(entry.path());
  }
  if (!any) {
    out.push_back({"plugin.not-serving", Severity::kWarning,
                   "no kata-vgpu-*.sock in " + node.Path(plugins).string(),
                   "the device plugin is not serving on this node: no vGPU resources are "
                   "advertised",
                   "label the node kata-vgpu.io/vgpu-mode=mdev (or vf) and apply deploy/ "
                   "(docs/install.md steps 5 and 9); then 'kubectl -n kata-vgpu logs "
                   "ds/kvgpu-device-plugin'"});
  }
  fs::path state = node.options().state_dir / "device-plugin-state.json";
  auto text = node.Read(state);
  if (!text) return;  // a plugin that never made a vGPU has none yet
  auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || doc.value("version", 0) != 1 ||
      !doc.contains("vgpus") || !doc["vgpus"].is_array()) {
    out.push_back({"plugin.state-corrupt", Severity::kWarning,
                   node.Path(state).string() + " is not the plugin's state (version 1, vgpus list)",
                   "at its next start the plugin moves it aside and rebuilds it from kubelet's "
                   "checkpoint; vGPUs the checkpoint does not name are then left to you",
                   "restart the plugin's pod on this node, then compare 'vgpuctl list' with the "
                   "running pods and remove orphans with 'vgpuctl remove ID'"});
  }
}

}  // namespace

std::vector<Check> SoftwareChecks() {
  return {{"kata-release", CheckKataRelease},
          {"kata-install", CheckKataInstall},
          {"kata-configs", CheckKataConfigs},
          {"containerd", CheckContainerd},
          {"qemu-wrapper", CheckQemuWrapper},
          {"guest-image", CheckGuestImage},
          {"guest-driver-branch", CheckGuestDriverBranch},
          {"licence", CheckLicence},
          {"device-plugin", CheckDevicePlugin}};
}

}  // namespace kvgpu::doctor::internal
