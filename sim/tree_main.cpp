// kvgpu-sim-tree: lays out a node profile's sysfs tree under a directory and exits, for demos
// and for running vgpuctl by hand (`vgpuctl --sysfs-root DIR types`). The tree is static:
// writes to it change files, not vGPUs; the reacting model needs the FUSE simulator.
#include <iostream>
#include <string>
#include <string_view>

#include "sim/kernel_model.h"

namespace {

constexpr const char* kUsage =
    "usage: kvgpu-sim-tree --profile NAME --root DIR\n"
    "       kvgpu-sim-tree --list\n"
    "Lays out a simulated NVIDIA vGPU host's sysfs tree under DIR (empty or new).\n";

void ListProfiles() {
  for (const auto& name : kvgpu::sim::ProfileNames()) {
    auto profile = kvgpu::sim::ProfileByName(name);
    if (profile.ok()) std::cout << name << "\t" << profile.value().summary << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string profile_name;
  std::string root;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--list") {
      ListProfiles();
      return 0;
    }
    if ((arg == "--profile" || arg == "--root") && i + 1 < argc) {
      (arg == "--profile" ? profile_name : root) = argv[++i];
      continue;
    }
    std::cerr << "kvgpu-sim-tree: unexpected argument '" << arg << "'\n" << kUsage;
    return 2;
  }
  if (profile_name.empty() || root.empty()) {
    std::cerr << "kvgpu-sim-tree: --profile and --root are required\n" << kUsage;
    return 2;
  }
  auto profile = kvgpu::sim::ProfileByName(profile_name);
  if (!profile.ok()) {
    std::cerr << "kvgpu-sim-tree: " << profile.status().ToString() << "\n";
    return 2;
  }
  auto model = kvgpu::sim::KernelModel::Create(root, std::move(profile).value());
  if (!model.ok()) {
    std::cerr << "kvgpu-sim-tree: " << model.status().ToString() << "\n";
    return 1;
  }
  std::cout << "laid out profile " << profile_name << " under " << root << "/sys\n";
  return 0;
}
