// What the doctor's checks take (the options: where the node keeps what) and give (findings).
// Apart from doctor.h so that the checks' shared pieces (doctor_internal.h) need not include the
// doctor that runs them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "common/cross_program.h"
#include "mdev/gpu_mode_probe.h"

namespace kvgpu::doctor {

namespace fs = std::filesystem;

enum class Severity { kInfo, kWarning, kError };

struct Finding {
  std::string id;  // stable, e.g. "vfio.module-missing": scripts and tests match on it
  Severity severity = Severity::kError;
  std::string seen;  // what the node shows, with the path it was read from
  std::string why;   // what breaks because of it
  std::string fix;   // the exact command or change
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

}  // namespace kvgpu::doctor
