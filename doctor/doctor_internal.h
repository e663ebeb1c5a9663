// What the doctor's check functions share: the node they read (paths under the root, sysfs
// through the injected SysfsIo, facts read once) and the shape of a check. Private to the doctor.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor_types.h"
#include "mdev/sysfs_backend.h"

namespace kvgpu::doctor::internal {

class NodeView {
 public:
  NodeView(const Options& options, mdev::SysfsIo& sysfs);

  const Options& options() const { return options_; }
  // A node path ("/etc/containerd/config.toml") below the root.
  fs::path Path(const fs::path& node_path) const;
  fs::path Sys(const fs::path& relative) const { return Path("/sys" / relative); }
  // Trimmed contents; nullopt when absent or unreadable.
  std::optional<std::string> Read(const fs::path& node_path);
  std::optional<std::string> ReadSys(const fs::path& relative);
  bool SysExists(const fs::path& relative) { return sysfs_.Exists(Sys(relative)); }
  std::vector<std::string> ListSys(const fs::path& relative);

  // The vGPU parents the mdev library sees (scanned once); nullptr when the scan failed.
  const mdev::Inventory* Inventory();
  // /sys/module/nvidia/version, e.g. "550.90.05"; nullopt without the NVIDIA driver.
  std::optional<std::string> HostDriverVersion() { return ReadSys("module/nvidia/version"); }
  // Which of the two classes this node's GPUs need (from the parents' flavours).
  bool HasFlavour(mdev::Flavour flavour);
  // The Kata release ("3.27.0"), or an explanation of why it could not be read.
  struct KataVersion {
    std::optional<std::string> version;
    std::string problem;
  };
  const KataVersion& Kata();
  // The mode probe of options().gpu_mode_probe (made once); nullptr for "none".
  const mdev::GpuModeProbe* ModeProbe();

 private:
  const Options& options_;
  mdev::SysfsIo& sysfs_;
  mdev::PosixSysfsIo host_;
  std::optional<std::optional<mdev::Inventory>> inventory_;
  std::optional<KataVersion> kata_;
  std::optional<std::shared_ptr<const mdev::GpuModeProbe>> probe_;
};

using CheckFn = void (*)(NodeView& node, std::vector<Finding>& out);
struct Check {
  const char* name;
  CheckFn run;
};

std::vector<Check> KernelChecks();    // doctor_kernel.cpp
std::vector<Check> ModeChecks();      // doctor_modes.cpp
std::vector<Check> SoftwareChecks();  // doctor_software.cpp

// The checks of what a vGPU pod's VM is given (doctor_guest.cpp), in SoftwareChecks' list.
void CheckGuestImage(NodeView& node, std::vector<Finding>& out);
void CheckGuestDriverBranch(NodeView& node, std::vector<Finding>& out);
void CheckLicence(NodeView& node, std::vector<Finding>& out);

// An info finding for a check that could not run because an earlier one failed: the table then
// says "skipped" instead of a misleading "ok".
inline void Skipped(std::vector<Finding>& out, const std::string& because) {
  out.push_back({"skipped", Severity::kInfo, "not checked: " + because, "", ""});
}

// "x.y.z" -> {x, y, z}; empty when not digits and dots.
std::vector<int> ParseVersion(const std::string& text);

}  // namespace kvgpu::doctor::internal
