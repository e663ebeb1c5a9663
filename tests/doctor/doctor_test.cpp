// `vgpuctl doctor` on simulated nodes: a healthy node (the kernel model plus the installed
// software laid out as the installers leave it) gives no finding above info, and each planted
// fault - one broken precondition of docs/install.md - gives exactly its own finding, with a fix,
// and nothing else. Also: the doctor never changes the node, the CLI's exit codes and JSON.
#include "doctor/doctor.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

#include "common/clock.h"
#include "mdev/vgpuctl/vgpuctl.h"
#include "sim/host_software.h"
#include "tests/mdev/node_test_support.h"

namespace kvgpu::mdev {
namespace {

using doctor::Severity;

// One node: a kernel model of `profile` and the host software of `software`, under one root.
class DoctorNode {
 public:
  explicit DoctorNode(const std::string& profile, sim::HostSoftware software = {}) : sim_(profile) {
    Status s = sim::LayOutHostSoftware(sim_.root(), software);
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  const fs::path& root() const { return sim_.root(); }
  SimulatedNode& sim() { return sim_; }
  doctor::Report Diagnose(std::optional<fs::path> kata_version_file = std::nullopt) {
    doctor::Options options;
    options.root = root();
    options.kata_version_file = kata_version_file;
    options.now_unix_s = UnixNowMs() / 1000;
    options.gpu_mode_probe = probe;  // the simulator's modes file, as NVML would tell it
    return doctor::Diagnose(options, sim_.model());
  }
  void Write(const fs::path& relative, const std::string& content) {
    fs::create_directories((root() / relative).parent_path());
    std::ofstream(root() / relative, std::ios::trunc) << content;
  }
  void Remove(const fs::path& relative) { fs::remove_all(root() / relative); }
  // What only NVML shows, as the simulator writes it (sim-gpu-modes.json).
  nlohmann::json Modes() {
    std::ifstream in(root() / sim::KernelModel::kModesFile);
    return nlohmann::json::parse(in);
  }
  void SetModes(const nlohmann::json& modes) {
    Write(sim::KernelModel::kModesFile, modes.dump() + "\n");
  }
  GpuModeProbeChoice probe = GpuModeProbeChoice::kSim;

 private:
  SimulatedNode sim_;
};

// Findings above info, as "check/id".
std::vector<std::string> Problems(const doctor::Report& report) {
  std::vector<std::string> out;
  for (const auto& check : report.checks) {
    for (const auto& f : check.findings) {
      if (f.severity != Severity::kInfo) out.push_back(check.check + "/" + f.id);
    }
  }
  return out;
}

const doctor::Finding* FindingById(const doctor::Report& report, const std::string& id) {
  for (const auto& check : report.checks) {
    for (const auto& f : check.findings) {
      if (f.id == id) return &f;
    }
  }
  return nullptr;
}

// The guest driver the installers leave beside each profile's host driver: the current profiles
// (sim/profiles.cpp) carry an R580 manager, which an R550 guest driver would not match.
sim::HostSoftware Software(const std::string& profile) {
  sim::HostSoftware software;
  auto spec = sim::ProfileByName(profile);
  if (spec.ok() && spec->host_driver_version.rfind("580.", 0) == 0) {
    software.guest_driver_version = "580.65.06";  // vGPU 19.0's Linux guest driver
  }
  return software;
}

TEST(Doctor, HealthySimulatedNodesHaveNoFindingAboveInfo) {
  for (const char* profile :
       {"t4x2", "a100-sriov", "h200-vfio", "h200-mig", "l40s-vfio", "rtxpro6000-mig", "mixed"}) {
    SCOPED_TRACE(profile);
    DoctorNode node(profile, Software(profile));
    doctor::Report report = node.Diagnose();
    EXPECT_EQ(Problems(report), std::vector<std::string>{});
    EXPECT_EQ(report.ExitCode(), 0);
  }
}

struct Fault {
  std::string description;
  std::string profile;
  std::function<void(DoctorNode&)> plant;
  std::string expected;  // "check/id"
  Severity severity;
  std::string seen_mentions;  // a piece of what the finding must say it saw
};

// gtest names a case by its description instead of dumping the struct's bytes.
void PrintTo(const Fault& fault, std::ostream* os) {
  *os << fault.description;
}

fs::path Pf(DoctorNode& node, size_t gpu) {
  return fs::path("sys/bus/pci/devices") / node.sim().gpu(gpu);
}

std::vector<Fault> Faults() {
  return {
      {"IOMMU off in firmware or on the command line", "t4x2",
       [](DoctorNode& n) { n.Remove("sys/class/iommu/dmar0"); }, "iommu/iommu.off",
       Severity::kError, "no IOMMU"},
      {"interrupt remapping turned off on the command line", "t4x2",
       [](DoctorNode& n) {
         n.Write("proc/cmdline", "root=/dev/sda1 intel_iommu=on intremap=off\n");
       },
       "interrupt-remapping/irq-remap.disabled", Severity::kError, "intremap=off"},
      {"an IOMMU that cannot remap interrupts (ECAP bit 3 clear)", "t4x2",
       [](DoctorNode& n) { n.Write("sys/class/iommu/dmar0/intel-iommu/ecap", "f050d2\n"); },
       "interrupt-remapping/irq-remap.unsupported", Severity::kError, "bit 3"},
      {"VFIO told to allow unsafe interrupts", "t4x2",
       [](DoctorNode& n) {
         n.Write("sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts", "Y\n");
       },
       "interrupt-remapping/irq-remap.unsafe-allowed", Severity::kWarning, "allow_unsafe"},
      {"vfio_pci not loaded", "t4x2", [](DoctorNode& n) { n.Remove("sys/module/vfio_pci"); },
       "vfio/vfio.module-missing", Severity::kError, "vfio_pci"},
      {"vfio_iommu_type1 not loaded", "t4x2",
       [](DoctorNode& n) { n.Remove("sys/module/vfio_iommu_type1"); }, "vfio/vfio.module-missing",
       Severity::kError, "vfio_iommu_type1"},
      {"the mdev core not loaded", "t4x2",
       [](DoctorNode& n) {
         n.Remove("sys/module/mdev");
         n.Remove("sys/bus/mdev");
       },
       "vfio/vfio.mdev-missing", Severity::kError, "mdev core"},
      {"no vhost-vsock device (vhost_vsock not loaded)", "t4x2",
       [](DoctorNode& n) { n.Remove("dev/vhost-vsock"); }, "kvm/kvm.device-missing",
       Severity::kError, "vhost-vsock"},
      {"nouveau loaded", "t4x2", [](DoctorNode& n) { n.Write("sys/module/nouveau/refcnt", "1\n"); },
       "nvidia-driver/nvidia.nouveau-loaded", Severity::kError, "nouveau"},
      {"no NVIDIA host driver", "t4x2", [](DoctorNode& n) { n.Remove("sys/module/nvidia"); },
       "nvidia-driver/nvidia.driver-missing", Severity::kError, "not loaded"},
      {"the plain NVIDIA driver without the vGPU manager", "t4x2",
       [](DoctorNode& n) { n.Remove("sys/module/nvidia_vgpu_vfio"); },
       "vgpu-manager/nvidia.vgpu-manager-missing", Severity::kError, "nvidia_vgpu_vfio"},
      {"a host driver version that is not digits and dots", "t4x2",
       [](DoctorNode& n) { n.Write("sys/module/nvidia/version", "unknown\n"); },
       "nvidia-driver/nvidia.version-unreadable", Severity::kWarning, "unknown"},
      {"the vGPU manager loaded but no GPU offers vGPU types", "t4x2",
       [](DoctorNode& n) {
         for (const auto& entry : fs::directory_iterator(n.root() / "sys/class/mdev_bus")) {
           fs::remove(entry.path());
         }
       },
       "vgpu-parents/parents.none", Severity::kError, "no mdev parent"},
      {"SR-IOV VFs not enabled", "a100-sriov",
       [](DoctorNode& n) { n.Write(Pf(n, 0) / "sriov_numvfs", "0\n"); },
       "vgpu-parents/sriov.vfs-disabled", Severity::kError, "sriov_numvfs 0"},
      {"current_vgpu_type not writable", "h200-vfio",
       [](DoctorNode& n) {
         fs::path vf = fs::canonical(n.root() / Pf(n, 0) / "virtfn0");
         fs::permissions(vf / "nvidia/current_vgpu_type", fs::perms::owner_read);
       },
       "vgpu-parents/vfio-vf.type-not-writable", Severity::kError, "current_vgpu_type"},
      {"Kata older than the kata-vgpu class needs", "t4x2",
       [](DoctorNode& n) {
         n.Write("opt/kata/bin/kata-runtime", "#!/bin/sh\necho 'kata-runtime  : 3.1.0'\n");
       },
       "kata-release/kata.too-old", Severity::kError, "kata-vgpu (needs 3.2.0"},
      {"Kata older than the kata-vgpu-vf class needs, on a VF node", "h200-vfio",
       [](DoctorNode& n) {
         n.Write("opt/kata/bin/kata-runtime", "#!/bin/sh\necho 'kata-runtime  : 3.23.0'\n");
       },
       "kata-release/kata.too-old", Severity::kError, "kata-vgpu-vf (needs 3.24.0"},
      {"no kata-runtime, and a shim that names no release", "t4x2",
       [](DoctorNode& n) { n.Remove("opt/kata/bin/kata-runtime"); },
       "kata-release/kata.version-unknown", Severity::kError, "no Kata release"},
      {"Kata's QEMU missing", "t4x2",
       [](DoctorNode& n) { n.Remove("opt/kata/bin/qemu-system-x86_64"); },
       "kata-install/kata.binary-missing", Severity::kError, "qemu-system-x86_64"},
      {"the kata-vgpu-vf configuration missing", "t4x2",
       [](DoctorNode& n) {
         n.Remove("opt/kata-vgpu/share/defaults/kata-containers/configuration-kata-vgpu-vf.toml");
       },
       "kata-configs/kata-config.missing", Severity::kError, "configuration-kata-vgpu-vf.toml"},
      {"containerd's config missing", "t4x2",
       [](DoctorNode& n) { n.Remove("etc/containerd/config.toml"); },
       "containerd/containerd.config-missing", Severity::kError, "config.toml"},
      {"containerd with only one of the two handlers", "t4x2",
       [](DoctorNode& n) {
         n.Write(
             "etc/containerd/config.toml",
             "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata-vgpu]\n"
             "  runtime_path = \"/opt/kata/bin/containerd-shim-kata-v2\"\n");
       },
       "containerd/containerd.handler-missing", Severity::kError, "'kata-vgpu-vf'"},
      {"a handler whose ConfigPath names a file that does not exist", "t4x2",
       [](DoctorNode& n) {
         std::ifstream in(n.root() / "etc/containerd/config.toml");
         std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
         std::string from = "configuration-kata-vgpu-vf.toml";
         text.replace(text.find(from), from.size(), "configuration-gone.toml");
         n.Write("etc/containerd/config.toml", text);
       },
       "containerd/containerd.handler-config-missing", Severity::kError, "configuration-gone.toml"},
      {"the QEMU wrapper not installed", "t4x2",
       [](DoctorNode& n) { n.Remove("opt/kata-vgpu/bin/qemu-system-x86_64"); },
       "qemu-wrapper/qemu-wrapper.missing", Severity::kError, "qemu-system-x86_64"},
      {"the kata-vgpu class running Kata's plain QEMU instead of the wrapper", "t4x2",
       [](DoctorNode& n) {
         n.Write("opt/kata-vgpu/share/defaults/kata-containers/configuration-kata-vgpu.toml",
                 "[hypervisor.qemu]\npath = \"/opt/kata/bin/qemu-system-x86_64\"\n");
       },
       "qemu-wrapper/qemu-wrapper.unused", Severity::kWarning, "/opt/kata/bin/qemu-system-x86_64"},
      {"the guest kernel missing", "t4x2",
       [](DoctorNode& n) { n.Remove("opt/kata-vgpu/guest/vmlinuz-6.1.119-kvgpu3"); },
       "guest-image/guest.kernel-missing", Severity::kError, "vmlinuz"},
      {"the driver bundle built for another guest kernel", "t4x2",
       [](DoctorNode& n) {
         n.Write("opt/kata-vgpu/driver/bundle-info",
                 "driver-version=550.90.07\nkernel-release=6.1.100-kvgpu2\n");
       },
       "guest-image/guest.bundle-kernel-mismatch", Severity::kError, "6.1.100-kvgpu2"},
      {"a guest driver from a newer branch than the host's manager", "t4x2",
       [](DoctorNode& n) {
         n.Write("opt/kata-vgpu/driver/bundle-info",
                 "driver-version=570.124.06\nkernel-release=6.1.119-kvgpu3\n");
       },
       "guest-driver-branch/guest.driver-branch-incompatible", Severity::kError, "R570"},
      {"a guest driver from the previous branch (supported, with a note)", "t4x2",
       [](DoctorNode& n) {
         n.Write("opt/kata-vgpu/driver/bundle-info",
                 "driver-version=535.183.06\nkernel-release=6.1.119-kvgpu3\n");
       },
       "guest-driver-branch/guest.driver-branch-older", Severity::kWarning, "R535"},
      {"a guest driver branch the doctor's table does not know", "t4x2",
       [](DoctorNode& n) {
         n.Write("opt/kata-vgpu/driver/bundle-info",
                 "driver-version=390.157\nkernel-release=6.1.119-kvgpu3\n");
       },
       "guest-driver-branch/guest.driver-branch-unknown", Severity::kWarning, "R390"},
      {"no driver bundle installed", "t4x2",
       [](DoctorNode& n) { n.Remove("opt/kata-vgpu/driver"); }, "guest-image/guest.bundle-missing",
       Severity::kError, "bundle-info"},
      {"gridd.conf not published", "t4x2",
       [](DoctorNode& n) { n.Remove("var/lib/kata-vgpu/licensing/gridd.conf"); },
       "licence/licence.gridd-conf-missing", Severity::kWarning, "gridd.conf"},
      {"no licence token published", "t4x2",
       [](DoctorNode& n) { n.Remove("var/lib/kata-vgpu/licensing/ClientConfigToken"); },
       "licence/licence.token-missing", Severity::kWarning, "*.tok"},
      {"the token directory unreadable (here: a file where it should be)", "t4x2",
       [](DoctorNode& n) {
         n.Remove("var/lib/kata-vgpu/licensing/ClientConfigToken");
         n.Write("var/lib/kata-vgpu/licensing/ClientConfigToken", "");
       },
       "licence/licence.unreadable", Severity::kWarning, "cannot list"},
      {"gridd.conf unreadable (here: a directory in its place)", "t4x2",
       [](DoctorNode& n) {
         n.Remove("var/lib/kata-vgpu/licensing/gridd.conf");
         fs::create_directories(n.root() / "var/lib/kata-vgpu/licensing/gridd.conf");
       },
       "licence/licence.unreadable", Severity::kWarning, "cannot read"},
      {"a licence token that is not a JWT", "t4x2",
       [](DoctorNode& n) {
         n.Write("var/lib/kata-vgpu/licensing/ClientConfigToken/client_configuration_token.tok",
                 "not a token");
       },
       "licence/licence.token-unparseable", Severity::kError, "not a JWT"},
      {"an expired licence token", "t4x2",
       [](DoctorNode& n) {
         int64_t now = UnixNowMs() / 1000;
         n.Write("var/lib/kata-vgpu/licensing/ClientConfigToken/client_configuration_token.tok",
                 sim::ClientConfigToken(now - 2 * 86400, now - 86400));
       },
       "licence/licence.token-expired", Severity::kError, "expired"},
      {"kubelet not running", "t4x2",
       [](DoctorNode& n) { n.Remove("var/lib/kubelet/device-plugins/kubelet.sock"); },
       "device-plugin/plugin.kubelet-socket-missing", Severity::kWarning, "kubelet.sock"},
      {"the device plugin not serving", "t4x2",
       [](DoctorNode& n) { n.Remove("var/lib/kubelet/device-plugins/kata-vgpu-vgpu-222.sock"); },
       "device-plugin/plugin.not-serving", Severity::kWarning, "kata-vgpu-*.sock"},
      {"MIG on and no GPU instance made (a VF re-enable destroyed them)", "h200-mig",
       [](DoctorNode& n) {
         const nlohmann::json modes = n.Modes();
         for (const auto& gpu : modes["gpus"]) {
           for (const auto& gi : gpu["gpuInstances"]) {
             ASSERT_TRUE(
                 n.sim().model().DestroyGpuInstance(gpu["address"], gi["id"].get<uint32_t>()).ok());
           }
         }
       },
       "gpu-modes/gpu-mode.mig-no-instances", Severity::kError, "no GPU instance"},
      {"GPU instances of a profile no vGPU type of the GPU runs in", "h200-mig",
       [](DoctorNode& n) {
         nlohmann::json modes = n.Modes();
         for (auto& gpu : modes["gpus"]) {
           for (auto& gi : gpu["gpuInstances"]) gi["profileId"] = 9;
         }
         n.SetModes(modes);
       },
       "gpu-modes/gpu-mode.mig-instances-unfit", Severity::kError, "profile 9"},
      {"the device plugin's state file corrupt", "t4x2",
       [](DoctorNode& n) {
         n.Write("var/lib/kata-vgpu/device-plugin-state.json", "{\"vgpus\": 3");
       },
       "device-plugin/plugin.state-corrupt", Severity::kWarning, "device-plugin-state.json"},
  };
}

// One ctest case per fault: each builds its own node (about a second on a loaded machine).
class DoctorFault : public ::testing::TestWithParam<Fault> {};

TEST_P(DoctorFault, GivesItsOwnFindingWithAFixAndNothingElse) {
  const Fault& fault = GetParam();
  SCOPED_TRACE(fault.description);
  DoctorNode node(fault.profile, Software(fault.profile));
  fault.plant(node);
  doctor::Report report = node.Diagnose();
  ASSERT_EQ(Problems(report), std::vector<std::string>{fault.expected});
  const doctor::Finding* f =
      FindingById(report, fault.expected.substr(fault.expected.find('/') + 1));
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, fault.severity);
  EXPECT_NE(f->seen.find(fault.seen_mentions), std::string::npos) << f->seen;
  EXPECT_FALSE(f->why.empty());
  EXPECT_FALSE(f->fix.empty());
  EXPECT_EQ(report.ExitCode(),
            fault.severity == Severity::kError ? doctor::kExitErrors : doctor::kExitWarnings);
}

std::string FaultName(const ::testing::TestParamInfo<Fault>& info) {
  std::string name;
  for (char c : info.param.description) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) name += c;
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(PlantedFaults, DoctorFault, ::testing::ValuesIn(Faults()), FaultName);

// A GPU whose modes no probe can tell is not a fault: the plugin goes by the kernel's counts.
TEST(Doctor, AGpuWhoseModeTheProbeCannotTellIsInfoAndNoProbeSkipsTheCheck) {
  DoctorNode node("h200-mig", Software("h200-mig"));
  node.Remove(sim::KernelModel::kModesFile);
  doctor::Report report = node.Diagnose();
  EXPECT_EQ(Problems(report), std::vector<std::string>{});
  const doctor::Finding* unknown = FindingById(report, "gpu-mode.unknown");
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->severity, Severity::kInfo);
  EXPECT_NE(unknown->seen.find("0000:41:00.0"), std::string::npos) << unknown->seen;
  node.probe = GpuModeProbeChoice::kNone;
  report = node.Diagnose();
  EXPECT_EQ(FindingById(report, "gpu-mode.unknown"), nullptr);
  ASSERT_NE(FindingById(report, "skipped"), nullptr);
}

// With the GPU instances in place the check is quiet; the row reads ok.
TEST(Doctor, MigGpusWithFittingInstancesPassTheGpuModesCheck) {
  for (const char* profile : {"h200-mig", "rtxpro6000-mig"}) {
    SCOPED_TRACE(profile);
    DoctorNode node(profile, Software(profile));
    doctor::Report report = node.Diagnose();
    for (const auto& check : report.checks) {
      if (check.check == "gpu-modes") {
        EXPECT_TRUE(check.findings.empty());
      }
    }
  }
}

// Every file's type, mode, size, link target and content: what a read-only run must leave alone.
std::map<std::string, std::string> Snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    struct stat st {};
    ::lstat(entry.path().c_str(), &st);
    std::string value = std::to_string(st.st_mode) + ":" + std::to_string(st.st_size) + ":" +
                        std::to_string(st.st_mtim.tv_sec) + "." +
                        std::to_string(st.st_mtim.tv_nsec);
    if (entry.is_symlink()) value += "->" + fs::read_symlink(entry.path()).string();
    out[fs::relative(entry.path(), root).string()] = value;
  }
  return out;
}

TEST(Doctor, ReadsOnlyAndChangesNothingOnTheNode) {
  DoctorNode node("mixed");
  node.Remove("sys/module/vfio_pci");  // a run with findings as well as checks that pass
  auto before = Snapshot(node.root());
  (void)node.Diagnose();
  EXPECT_EQ(Snapshot(node.root()), before);
}

struct CliOutcome {
  int code;
  std::string out, err;
};

CliOutcome RunCli(DoctorNode& node, std::vector<std::string> args) {
  args.insert(args.begin(), {"--sysfs-root", node.root().string()});
  std::ostringstream out, err;
  int code = vgpuctl::Run(args, node.sim().model(), out, err);
  return {code, out.str(), err.str()};
}

TEST(Doctor, CliPrintsATableWithOneOkRowPerPassingCheckAndExitsZeroWhenHealthy) {
  DoctorNode node("t4x2");
  CliOutcome r = RunCli(node, {"doctor"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("STATUS", 0), 0u);
  EXPECT_NE(r.out.find("ok       iommu"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("error"), std::string::npos) << r.out;
}

TEST(Doctor, CliJsonNamesEachFindingWithSeenWhyFixAndTheExitCodeFollowsTheWorstSeverity) {
  DoctorNode node("t4x2");
  node.Remove("sys/module/vfio");
  CliOutcome r = RunCli(node, {"doctor", "--json"});
  EXPECT_EQ(r.code, doctor::kExitErrors);
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["status"], "error");
  EXPECT_EQ(doc["exit_code"], doctor::kExitErrors);
  bool found = false;
  for (const auto& check : doc["checks"]) {
    for (const auto& f : check["findings"]) {
      found |= f["id"] == "vfio.module-missing";
      EXPECT_TRUE(f.contains("seen") && f.contains("why") && f.contains("fix")) << f.dump();
    }
  }
  EXPECT_TRUE(found) << r.out;

  node.Write("sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "N\n");
  node.Remove("var/lib/kubelet/device-plugins/kubelet.sock");  // a warning only
  EXPECT_EQ(RunCli(node, {"doctor"}).code, doctor::kExitWarnings);
}

TEST(Doctor, KataVersionFromAFileInsteadOfRunningKata) {
  DoctorNode node("t4x2");
  fs::path file = node.sim().dir() / "kata-version.txt";
  std::ofstream(file) << "Kata Containers containerd shim (Golang): id: \"io.containerd.kata.v2\", "
                         "version: 3.3.0, commit: 1234\n";
  CliOutcome r = RunCli(node, {"doctor", "--json", "--kata-version-file", file.string()});
  auto doc = nlohmann::json::parse(r.out);
  // 3.3.0 serves kata-vgpu; kata-vgpu-vf (3.24) is not needed on a T4 node: info only.
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(doc["status"], "ok");

  std::ofstream(file, std::ios::trunc) << "garbage\n";
  r = RunCli(node, {"doctor", "--json", "--kata-version-file", file.string()});
  EXPECT_EQ(r.code, doctor::kExitErrors);
  EXPECT_NE(r.out.find("names no Kata release"), std::string::npos) << r.out;
}

// The doctor's class minimums are the Kata row of docs/kata-config.md's version table: at each
// documented minimum the class is served, one release before it it is not.
TEST(Doctor, KataMinimumsAreTheVersionTableOfKataConfigMd) {
  std::ifstream doc(std::string(KVGPU_SOURCE_DIR) + "/docs/kata-config.md");
  std::string line;
  while (std::getline(doc, line) && line.rfind("| Kata Containers |", 0) != 0) {
  }
  std::regex minimum("≥ (\\d+)\\.(\\d+)");
  std::vector<std::pair<int, int>> minimums;
  for (std::sregex_iterator it(line.begin(), line.end(), minimum), end; it != end; ++it) {
    minimums.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  }
  ASSERT_EQ(minimums.size(), 2u) << "the row changed shape: " << line;
  DoctorNode node("t4x2");
  fs::path file = node.sim().dir() / "kata-version.txt";
  const char* classes[] = {"kata-vgpu", "kata-vgpu-vf"};
  for (size_t i = 0; i < 2; ++i) {
    auto [major, minor] = minimums[i];
    std::string refused = std::string("cannot serve ") + classes[i] + " (needs";
    auto refuses = [&](const std::string& version) {
      std::ofstream(file, std::ios::trunc) << version << "\n";
      for (const auto& check : node.Diagnose(file).checks) {
        for (const auto& f : check.findings) {
          if (f.seen.find(refused) != std::string::npos) return true;
        }
      }
      return false;
    };
    SCOPED_TRACE(classes[i]);
    EXPECT_FALSE(refuses(std::to_string(major) + "." + std::to_string(minor) + ".0"));
    EXPECT_TRUE(refuses(std::to_string(major) + "." + std::to_string(minor - 1) + ".99"));
  }
}

TEST(Doctor, BadCommandLineIsAUsageErrorAndRunsNoCheck) {
  DoctorNode node("t4x2");
  CliOutcome r = RunCli(node, {"doctor", "--no-such-flag"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("vgpuctl --help"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvgpu::mdev
