#include "demo/vgpuctl_tour.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "doctor/doctor.h"
#include "mdev/vgpuctl/vgpuctl.h"
#include "sim/host_software.h"
#include "sim/kernel_model.h"

namespace kvgpu::demo {

namespace {

using kvgpu::sim::KernelModel;

struct Shell {
  KernelModel& model;
  std::string root;

  // Runs vgpuctl as a person would type it, echoing the command and its output.
  std::string Run(std::vector<std::string> args, int want_code = 0, bool echo_output = true) {
    std::cout << "\n$ vgpuctl";
    for (const auto& a : args) std::cout << ' ' << a;
    std::cout << "\n";
    args.insert(args.begin(), {"--sysfs-root", root});
    std::ostringstream out, err;
    int code = kvgpu::vgpuctl::Run(args, model, out, err);
    if (echo_output) std::cout << out.str();
    std::cout << err.str();
    if (code != want_code) {
      std::cerr << "demo: vgpuctl exited " << code << ", expected " << want_code << "\n";
      std::exit(1);
    }
    return out.str();
  }

  int Available(const std::string& parent, const std::string& type) {
    std::ostringstream out, err;
    kvgpu::vgpuctl::Run({"--sysfs-root", root, "types", "--json"}, model, out, err);
    const auto doc = nlohmann::json::parse(out.str());
    for (const auto& p : doc["parents"]) {
      if (p["name"] != parent) continue;
      for (const auto& t : p["types"]) {
        if (t["id"] == type) return t["available_instances"].get<int>();
      }
    }
    return -1;
  }
};

void Heading(const std::string& text) {
  std::cout << "\n# " << text << "\n";
}

void Expect(bool ok, const std::string& what) {
  if (ok) return;
  std::cerr << "demo: expected " << what << "\n";
  std::exit(1);
}

// docs/first-node.md on the simulated node: the doctor finds it ready, then finds exactly what a
// missing VFIO module breaks.
void ShowDoctor(Shell& shell) {
  Heading(
      "Is this node ready for vGPU pods? The doctor reads every precondition of docs/install.md "
      "(the simulator also lays out Kata, containerd, the guest image, the licence and the "
      "plugin's "
      "sockets as the installers leave them):");
  shell.Run({"doctor"});
  Heading("The same node if vfio_pci had not loaded: one finding, with why and the fix (exit 4).");
  std::filesystem::path module = std::filesystem::path(shell.root) / "sys/module/vfio_pci";
  std::filesystem::path aside = module;
  aside += ".demo-aside";
  std::filesystem::rename(module, aside);
  shell.Run({"doctor"}, kvgpu::doctor::kExitErrors);
  std::filesystem::rename(aside, module);
}

}  // namespace

int RunVgpuctlTour(const std::string& profile_name, std::string root) {
  std::filesystem::path scratch;  // removed at the end of a successful run
  if (root.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvgpu-demo-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::cerr << "demo: cannot make a temp dir\n";
      return 1;
    }
    scratch = pattern;
    root = pattern + "/node";
  }
  auto profile = kvgpu::sim::ProfileByName(profile_name);
  if (!profile.ok()) {
    std::cerr << "demo: " << profile.status().message() << "\n";
    return 1;
  }
  auto model = KernelModel::Create(root, *profile);
  if (!model.ok()) {
    std::cerr << "demo: " << model.status().message() << "\n";
    return 1;
  }
  Shell shell{**model, root};
  const auto& gpus = (*model)->profile().gpus;

  Heading("A simulated node (" + profile->summary + ") laid out like sysfs under " + root +
          ". The same code runs on a real node with --sysfs-root /.");
  if (Status s = kvgpu::sim::LayOutHostSoftware(root); !s.ok()) {
    std::cerr << "demo: " << s.message() << "\n";
    return 1;
  }
  // The mtty sample profile has no NVIDIA driver: the doctor would rightly find nothing ready.
  if (!profile->host_driver_version.empty()) ShowDoctor(shell);
  Heading("Which vGPU types can each GPU create, and how many of each?");
  shell.Run({"types"});

  if (profile_name != "t4x2") {
    shell.Run({"list"});
    Heading("Done: the t4x2 profile has the guided walk-through.");
    if (!scratch.empty()) std::filesystem::remove_all(scratch);
    return 0;
  }

  const std::string gpu = gpus.at(0).address;
  Heading(
      "kubelet allocates one T4-1Q (nvidia-230): the device plugin creates the mdev like this.");
  std::string uuid = shell.Run({"create", "--parent", gpu, "--type", "nvidia-230"});
  uuid.erase(uuid.find_last_not_of('\n') + 1);
  Heading("The vGPU exists, with the VFIO group Kata hands to the pod's VM:");
  shell.Run({"list"});

  Heading("Time-sliced vGPU: " + gpu + " is now locked to T4-1Q. Its other types show 0 left:");
  int same = shell.Available(gpu, "nvidia-230");
  int other = shell.Available(gpu, "nvidia-231");
  int other_gpu = shell.Available(gpus.at(1).address, "nvidia-231");
  std::cout << "  " << gpu << " nvidia-230 (T4-1Q): " << same << " left\n"
            << "  " << gpu << " nvidia-231 (T4-2Q): " << other << " left\n"
            << "  " << gpus.at(1).address << " nvidia-231 (T4-2Q): " << other_gpu << " left\n";
  Expect(same == 15 && other == 0 && other_gpu == 8, "15 / 0 / 8 instances left");

  Heading("Asking that GPU for another type fails with the kernel's reason:");
  shell.Run({"create", "--parent", gpu, "--type", "nvidia-231"}, 1);

  Heading(
      "The pod is deleted: the plugin removes the mdev and the GPU is free for any type again.");
  shell.Run({"remove", uuid});
  shell.Run({"list"});
  Expect(shell.Available(gpu, "nvidia-231") == 8, "T4-2Q capacity back on " + gpu);
  std::cout << "  " << gpu << " nvidia-231 (T4-2Q): 8 left again\n";
  Heading("Done. Run ./scripts/test.sh for the whole test suite.");
  if (!scratch.empty()) std::filesystem::remove_all(scratch);
  return 0;
}

}  // namespace kvgpu::demo
