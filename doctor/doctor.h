// `vgpuctl doctor`: checks, read-only, every node precondition of docs/install.md and says for
// each failure what it saw, why it matters and the exact fix. The checks are a table of small
// functions (doctor_kernel.cpp: the kernel and the NVIDIA host driver; doctor_modes.cpp: MIG and
// the GPU instances; doctor_software.cpp: Kata, containerd, the device plugin; doctor_guest.cpp:
// the guest image, its driver branch, the licence). Every path is read below a root,
// so tests and the demo run it on a simulated node.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor_types.h"
#include "mdev/sysfs_io.h"

namespace kvgpu::doctor {

const char* SeverityName(Severity severity);

struct CheckResult {
  std::string check;  // the check's name, e.g. "iommu"
  std::vector<Finding> findings;
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
