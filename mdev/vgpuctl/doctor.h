// `vgpuctl doctor`: checks, read-only, every node precondition of docs/install.md and says for
// each failure what it saw, why it matters and the exact fix. The checks are a table of small
// functions (doctor_kernel.cpp: the kernel and the NVIDIA host driver; doctor_modes.cpp: MIG and
// the GPU instances; doctor_software.cpp: Kata, containerd, the guest image, the licence, the
// device plugin). Every path is read below a root,
// so tests and the demo run it on a simulated node.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/cross_program.h"
#include "mdev/gpu_mode_probe.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::doctor {

namespace fs = std::filesystem;

enum class Severity { kInfo, kWarning, kError };
const char* SeverityName(Severity severity);

struct Finding {
  std::string id;  // stable, e.g. "vfio.module-missing": scripts and tests match on it
  Severity severity = Severity::kError;
  std::string seen;  // what the node shows, with the path it was read from
  std::string why;   // what breaks because of it
  std::string fix;   // the exact command or change
};

struct CheckResult {
  std::string check;  // the check's name, e.g. "iommu"
  std::vector<Finding> findings;
};

struct Options {
  fs::path root = "/";  // every node path below is read under this directory
  // Node paths (absolute, read under `root`).
  fs::path containerd_config = "/etc/containerd/config.toml";
  fs::path kubelet_dir = "/var/lib/kubelet";
  fs::path state_dir = "/var/lib/kata-vgpu";
  fs::path licensing_dir{kLicensingDir};
  fs::path kata_dir = "/opt/kata";
  fs::path install_prefix = "/opt/kata-vgpu";
  // Where the Kata release comes from: a file holding `kata-runtime --version`'s output (or just
  // "3.27.0"), else <root><kata_dir>/bin/kata-runtime --version is run.
  std::optional<fs::path> kata_version_file;
  int64_t now_unix_s = 0;  // the licence token's expiry is judged against this
  // Where MIG mode and the GPU instances are read (mdev/gpu_mode_probe.h); kSim reads
  // <root>/sim-gpu-modes.json.
  mdev::GpuModeProbeChoice gpu_mode_probe = mdev::GpuModeProbeChoice::kNvml;
};

struct Report {
  std::vector<CheckResult> checks;
  Severity Worst() const;  // kInfo when there are no findings
  // 0: nothing above info; 3: warnings, no errors; 4: at least one error (docs/vgpuctl.md).
  int ExitCode() const;
};

inline constexpr int kExitWarnings = 3;
inline constexpr int kExitErrors = 4;

// Runs every check. `sysfs` serves the reads below <root>/sys (the kernel model in tests);
// everything else is read with plain POSIX calls. Never writes.
Report Diagnose(const Options& options, mdev::SysfsIo& sysfs);

std::string ReportTable(const Report& report);
nlohmann::json ReportJson(const Report& report);

}  // namespace kvgpu::doctor
