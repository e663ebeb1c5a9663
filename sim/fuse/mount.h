// kvgpu-sim's life: check that FUSE can be used, lay out the profile's model in a private
// backing directory, mount it, serve until SIGINT/SIGTERM/SIGHUP or an external unmount, then
// unmount and delete the backing directory.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>

namespace kvgpu::sim {

struct MountOptions {
  std::string profile;
  std::filesystem::path mountpoint;  // created when absent
  // Where the model's tree lives (must be empty or absent); default: a fresh directory under
  // /dev/shm (or $TMPDIR), deleted at exit. One given here is kept.
  std::filesystem::path backing;
  bool background = false;  // detach after mounting
  bool debug = false;       // libfuse's request trace on stderr
  bool quiet = false;       // no log of failed writes and control commands
  // How long the kernel may keep names and attributes (never contents) before asking again.
  // Removals are pushed to the kernel at once, so this only trades memory for speed; 0 makes
  // every path walk reach the simulator (a full scan of the A100 profile: ~1.3 s instead of
  // ~0.1 s).
  double cache_seconds = 5;
  std::filesystem::path fuse_device = "/dev/fuse";
};

// Exit codes of RunSimulator (and kvgpu-sim).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // could not mount or serve
inline constexpr int kExitUsage = 2;   // bad arguments, unknown profile
inline constexpr int kExitNoFuse = 3;  // no /dev/fuse, or no permission to use it

// Blocks while mounted (or returns once detached, with `background`). `out` gets one line when
// the mount is ready; `err` gets every error.
int RunSimulator(const MountOptions& options, std::ostream& out, std::ostream& err);

}  // namespace kvgpu::sim
