// kvgpu-demo, the README's first command: a simulated NVIDIA vGPU node running the real daemons,
// narrated (demo/node_demo.h). --vgpuctl-tour shows the mdev layer alone instead.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <thread>

#include "demo/node_demo.h"
#include "demo/vgpuctl_tour.h"
#include "sim/kernel_model.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kvgpu-demo: a simulated node with two NVIDIA T4 GPUs (kvgpu-sim) running the real\n"
      "kvgpu-device-plugin and kvgpu-webhook, with a Kata pod asking for a vGPU from admission to\n"
      "deletion, then kvgpu-validator validating the node, then the node moved to DRA and a\n"
      "ResourceClaim from allocation to NodeUnprepareResources. Needs /dev/fuse and root (or "
      "fusermount3)."};
  bool tour = false;
  std::string profile_name = "t4x2";
  std::string root;
  app.add_flag("--vgpuctl-tour", tour,
               "instead: the mdev layer alone, vgpuctl on an in-process kernel model (no FUSE)");
  app.add_option("--profile", profile_name, "--vgpuctl-tour: simulated node profile")
      ->capture_default_str()
      ->check(CLI::IsMember(kvgpu::sim::ProfileNames()));
  app.add_option("--root", root, "--vgpuctl-tour: where to lay out the tree (default: a temp dir)");
  CLI11_PARSE(app, argc, argv);
  if (tour) return kvgpu::demo::RunVgpuctlTour(profile_name, root);

  // Ctrl-C, SIGTERM, a closed terminal: the signal thread interrupts the demo, whose main thread
  // then tears the node down (daemons stopped, simulator unmounted, scratch removed). Blocked
  // before any thread starts, so only that thread takes them; the daemons run in their own
  // process group, so the terminal's Ctrl-C reaches only the demo.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  kvgpu::demo::NodeDemo demo({KVGPU_SIM_PATH, KVGPU_DEVICE_PLUGIN_PATH, KVGPU_WEBHOOK_PATH,
                              KVGPU_VGPUCTL_PATH, KVGPU_VALIDATOR_STANDINS});
  std::thread([&demo, signals] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    std::cerr << "\ndemo: " << strsignal(signal_number) << "; stopping the node\n";
    demo.Interrupt();
    // A second signal: the user wants out now, cleanup or not.
    sigwait(&signals, &signal_number);
    ::_exit(128 + signal_number);
  }).detach();
  return demo.Run();
}
