// kvgpu-sim: a simulated NVIDIA vGPU host's sysfs, mounted with FUSE. See docs/simulator.md.
#include <CLI/CLI.hpp>
#include <iostream>

#include "sim/fuse/mount.h"
#include "sim/kernel_model.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kvgpu-sim: mounts a sysfs tree that behaves like an NVIDIA vGPU host (create, remove and\n"
      "current_vgpu_type answer as the drivers do). Run the daemons or vgpuctl with\n"
      "--sysfs-root MOUNT. Stays in the foreground; SIGINT or SIGTERM unmounts."};
  app.name("kvgpu-sim");
  kvgpu::sim::MountOptions options;
  bool list = false;
  app.add_flag("--list", list, "list the profiles and exit");
  app.add_option("--profile", options.profile, "node profile (see --list)");
  app.add_option("--mount", options.mountpoint, "mount point (created when absent)");
  app.add_option("--backing", options.backing,
                 "directory for the model's tree, kept at exit (default: a temporary one)");
  app.add_option("--cache-seconds", options.cache_seconds,
                 "how long the kernel may cache names and attributes (0: never)")
      ->capture_default_str();
  app.add_flag("--background", options.background, "detach once mounted");
  app.add_flag("--quiet", options.quiet, "do not log failed writes and control commands");
  app.add_flag("--debug", options.debug, "libfuse's trace of every request");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kvgpu::sim::kExitUsage;
  }
  if (list) {
    for (const auto& name : kvgpu::sim::ProfileNames()) {
      auto profile = kvgpu::sim::ProfileByName(name);
      if (profile.ok()) std::cout << name << "\t" << profile.value().summary << "\n";
    }
    return 0;
  }
  if (options.profile.empty() || options.mountpoint.empty()) {
    std::cerr << "kvgpu-sim: --profile and --mount are required (see --help)\n";
    return kvgpu::sim::kExitUsage;
  }
  return kvgpu::sim::RunSimulator(options, std::cout, std::cerr);
}
