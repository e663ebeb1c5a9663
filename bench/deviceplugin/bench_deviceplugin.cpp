// Device plugin benchmarks against the kernel model on a node of 16 GPUs x 32 instances.
//
//   allocate  Allocate overhead without the kernel's own time (the create writes and the wait for
//             the device to show), p50/p99, for 1 and 8 devices: in the resource manager alone,
//             and end to end through gRPC from the fake kubelet.
//   push      time from a kernel change (a GPU vanishing or returning, announced as a udev event
//             would) until kubelet's ListAndWatch stream has the new list.
//   rss       resident memory of the real kvgpu-device-plugin process serving that node.
//
// Usage: kvgpu-bench-deviceplugin [iterations [manager|grpc|rss|all]]   (default 200 all)
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "common/cross_program.h"
#include "deviceplugin/daemon.h"
#include "fakes/common/temp_dir.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "mdev/sysfs_backend.h"
#include "sim/kernel_model.h"

extern char** environ;

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kResource = std::string(kVgpuResourcePrefix) + "222";
const std::string k223 = std::string(kVgpuResourcePrefix) + "223";

// 16 T4-like GPUs whose T4-1B type allows 32 instances (the real T4 allows 16; 32 is the size the
// benchmark asks for), alongside the T4's other types so every GPU offers 12 resources.
sim::NodeProfile BigNode() {
  auto t4 = sim::ProfileByName("t4x2");
  sim::GpuSpec gpu = t4->gpus.at(0);
  for (sim::TypeSpec& type : gpu.types) {
    if (type.id == "nvidia-222") type.max_instances = 32;
  }
  sim::NodeProfile profile{"bench-16x32", "16 GPUs x 32 instances", {}, t4->host_driver_version};
  for (int i = 0; i < 16; ++i) {
    char address[16];
    std::snprintf(address, sizeof(address), "0000:%02x:00.0", 0x10 + i);
    gpu.address = address;
    profile.gpus.push_back(gpu);
  }
  return profile;
}

// Sums the kernel's time (create and remove calls) seen by the manager.
class KernelClock : public ManagerObserver {
 public:
  void OnVgpuCreated(const std::string&, std::chrono::nanoseconds took, bool) override {
    kernel += took;
  }
  void OnVgpuRemoved(const std::string&, std::chrono::nanoseconds took, bool) override {
    kernel += took;
  }
  std::chrono::nanoseconds kernel{0};
};

struct Stats {
  double p50_us = 0, p99_us = 0, max_us = 0;
};

Stats Summarize(std::vector<double> us) {
  if (us.empty()) throw std::runtime_error("no samples");
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))];
  };
  return {at(0.5), at(0.99), us.back()};
}

void Print(const std::string& what, const Stats& s) {
  std::printf("%-52s p50 %8.1f us   p99 %8.1f us   max %8.1f us\n", what.c_str(), s.p50_us,
              s.p99_us, s.max_us);
}

// Device IDs of GPU `gpu` for slots [first, first + n).
std::vector<std::string> Ids(int gpu, int first, int n) {
  std::vector<std::string> ids;
  char address[16];
  std::snprintf(address, sizeof(address), "0000:%02x:00.0", 0x10 + gpu);
  for (int i = first; i < first + n; ++i) {
    ids.push_back(std::string(address) + "-nvidia-222-" + std::to_string(i));
  }
  return ids;
}

// Removes every vGPU (outside the timed part) so the next round starts from a free node.
void Clear(sim::KernelModel& model, mdev::SysfsBackend& node) {
  for (const std::string& id : model.VgpuIds()) (void)node.Remove(id);
}

void BenchManager(int iterations) {
  kvgpu::testing::TempDir dir;
  auto model = sim::KernelModel::Create(dir.path() / "root", BigNode());
  mdev::SysfsBackend node((*model)->root(), **model);
  MemoryStateStore store;
  UnknownHolders holders;
  KernelClock clock;
  ResourceManager manager(node, {}, store, holders, &clock);
  if (!manager.Start().ok()) throw std::runtime_error("start failed");
  manager.SetRefreshRequester([] {});  // the daemon rescans off the request path
  for (int size : {1, 8}) {
    std::vector<double> overhead, total;
    for (int i = 0; i < iterations; ++i) {
      std::vector<std::string> ids = Ids(i % 16, 0, size);
      clock.kernel = {};
      auto start = Clock::now();
      auto result = manager.Allocate(kResource, {ids});
      auto took = Clock::now() - start;
      if (!result.ok()) throw std::runtime_error(result.status().ToString());
      total.push_back(std::chrono::duration<double, std::micro>(took).count());
      overhead.push_back(std::chrono::duration<double, std::micro>(took - clock.kernel).count());
      Clear(**model, node);
      (void)manager.Refresh();
    }
    Print("manager Allocate " + std::to_string(size) + " device(s), overhead", Summarize(overhead));
    Print("manager Allocate " + std::to_string(size) + " device(s), with kernel", Summarize(total));
  }
}

void BenchGrpc(int iterations, std::chrono::milliseconds settle) {
  kvgpu::testing::TempDir dir;
  auto model = sim::KernelModel::Create(dir.path() / "root", BigNode());
  testing::FakeKubelet kubelet(dir.path() / "kubelet" / "device-plugins");
  if (!kubelet.Start()) throw std::runtime_error("kubelet fake failed");
  // The daemon's own node; the benchmark removes vGPUs through a second Node on the same model.
  mdev::SysfsBackend node((*model)->root(), **model);
  DaemonOptions options;
  options.args.sysfs_root = (*model)->root();
  options.args.kubelet_dir = dir.path() / "kubelet";
  options.args.state_dir = dir.path() / "state";
  options.config.udev_events = false;
  options.config.rescan_interval = 10s;
  options.io = model->get();
  MemoryStateStore store;
  options.store = &store;
  std::mutex push_mutex;
  std::vector<double> pushes;
  options.on_push = [&](const std::string&, std::chrono::nanoseconds took) {
    std::lock_guard lock(push_mutex);
    pushes.push_back(std::chrono::duration<double, std::micro>(took).count());
  };
  Daemon daemon(options);
  if (!daemon.Start().ok()) throw std::runtime_error("daemon failed");
  if (!kubelet.WaitUntil([&] { return kubelet.Devices(kResource).size() == 512; }, 20s)) {
    throw std::runtime_error("lists never arrived");
  }
  // What any call costs on this machine: the gRPC round trip over the unix socket.
  std::vector<double> round_trips;
  for (int i = 0; i < iterations; ++i) {
    v1beta1::DevicePluginOptions plugin_options;
    auto start = Clock::now();
    if (!kubelet.GetDevicePluginOptions(kResource, &plugin_options).ok()) {
      throw std::runtime_error("GetDevicePluginOptions failed");
    }
    round_trips.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  Print("gRPC round trip (GetDevicePluginOptions), baseline", Summarize(round_trips));

  for (int size : {1, 8}) {
    std::vector<double> overhead;
    for (int i = 0; i < iterations; ++i) {
      std::vector<std::string> ids = Ids(i % 16, 0, size);
      std::string before = daemon.metrics().Render();
      auto start = Clock::now();
      v1beta1::AllocateResponse response;
      grpc::Status status = kubelet.Allocate(kResource, {ids}, &response);
      auto took = Clock::now() - start;
      if (!status.ok()) throw std::runtime_error(status.error_message());
      // Kernel time from the plugin's own create histogram: sum after minus sum before.
      auto sum = [](const std::string& text) {
        std::string key = "kvgpu_deviceplugin_vgpu_create_seconds_sum{";
        double total = 0;
        for (size_t pos = text.find(key); pos != std::string::npos; pos = text.find(key, pos + 1)) {
          size_t space = text.find(' ', text.find('}', pos));
          total += std::stod(text.substr(space + 1));
        }
        return total;
      };
      double kernel_us = (sum(daemon.metrics().Render()) - sum(before)) * 1e6;
      overhead.push_back(std::chrono::duration<double, std::micro>(took).count() - kernel_us);
      // Let the rescan after the allocation push the lock (the GPU's 223 devices vanish), then
      // free the GPU and wait for them to come back: samples never queue behind a rescan.
      std::string probe = ids[0].substr(0, 12) + "-nvidia-223-0";
      if (!kubelet.WaitUntil([&] { return kubelet.Devices(k223).count(probe) == 0; }, 10s)) {
        throw std::runtime_error("the lock was never pushed");
      }
      Clear(**model, node);
      daemon.RequestRefresh();
      if (!kubelet.WaitUntil([&] { return kubelet.Devices(k223).count(probe) == 1; }, 10s)) {
        throw std::runtime_error("rescan never freed the GPU");
      }
      // The other resources' streams push their unlocked lists too; let them finish.
      std::this_thread::sleep_for(settle);
    }
    Print("gRPC Allocate " + std::to_string(size) + " device(s), overhead", Summarize(overhead));
  }

  {
    std::lock_guard lock(push_mutex);
    Print("ListAndWatch push (list change -> written to kubelet)", Summarize(pushes));
  }
  // Whole path: a GPU goes away (or comes back) and a udev-like event asks for a rescan.
  std::vector<double> push;
  for (int i = 0; i < std::min(iterations, 100); ++i) {
    bool remove = i % 2 == 0;
    const std::string gpu = "0000:1f:00.0";
    auto start = Clock::now();
    if (remove) {
      (void)(*model)->RemoveGpu(gpu);
    } else {
      (void)(*model)->RestoreGpu(gpu);
    }
    daemon.RequestRefresh();
    std::string probe = gpu + "-nvidia-222-0";
    std::string want = remove ? "Unhealthy" : "Healthy";
    if (!kubelet.WaitUntil([&] { return kubelet.Devices(kResource)[probe] == want; }, 5s)) {
      throw std::runtime_error("push never arrived");
    }
    push.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  Print("kernel change -> kubelet has the list (rescan + push)", Summarize(push));
}

// Fields of /proc/<pid>/status in KiB: VmRSS is what `ps` and the target count; it is RssAnon
// (the process's own heap, stacks, data) plus RssFile (pages of mapped files, mostly shared
// libraries' code, which other processes using the same libraries share).
std::map<std::string, long> MemoryKib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::map<std::string, long> out;
  std::string line;
  while (std::getline(status, line)) {
    for (const char* key : {"VmRSS", "RssAnon", "RssFile", "RssShmem"}) {
      std::string prefix = std::string(key) + ":";
      if (line.rfind(prefix, 0) == 0) out[key] = std::stol(line.substr(prefix.size()));
    }
  }
  return out;
}

void BenchRss() {
  kvgpu::testing::TempDir dir;
  // The tree on disk; the daemon reads it through the real POSIX seam.
  auto model = sim::KernelModel::Create(dir.path() / "root", BigNode());
  testing::FakeKubelet kubelet(dir.path() / "kubelet" / "device-plugins");
  if (!kubelet.Start()) throw std::runtime_error("kubelet fake failed");
  std::string root = (*model)->root().string();
  std::string kubelet_dir = (dir.path() / "kubelet").string();
  std::string state_dir = (dir.path() / "state").string();
  std::string config = (dir.path() / "config.yaml").string();
  std::ofstream(config) << "udevEvents: false\nrescanInterval: 1s\nlogLevel: warn\n";
  std::vector<const char*> argv = {KVGPU_DEVICE_PLUGIN_PATH, "--sysfs-root",      root.c_str(),
                                   "--kubelet-dir",          kubelet_dir.c_str(), "--state-dir",
                                   state_dir.c_str(),        "--config",          config.c_str(),
                                   "--metrics-addr",         "127.0.0.1:19402",   nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, const_cast<char**>(argv.data()), environ) != 0) {
    throw std::runtime_error("spawn failed");
  }
  bool listed = kubelet.WaitUntil([&] { return kubelet.Devices(kResource).size() == 512; }, 30s);
  std::this_thread::sleep_for(3s);  // a few rescans and pushes
  std::map<std::string, long> memory = MemoryKib(pid);
  size_t threads = 0;
  for ([[maybe_unused]] const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    ++threads;
  }
  if (std::getenv("KVGPU_BENCH_PAUSE") != nullptr) {
    std::printf("daemon pid %d; press enter\n", pid);
    std::getchar();
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!listed) throw std::runtime_error("the daemon never listed the node");
  auto mib = [&](const char* key) { return static_cast<double>(memory[key]) / 1024; };
  std::printf("%-52s %8.1f MiB (%zu resources registered, %zu threads)\n",
              "kvgpu-device-plugin RSS, 16 GPUs x 32, all serving", mib("VmRSS"),
              kubelet.Registrations().size(), threads);
  std::printf("%-52s %8.1f MiB anon + %.1f MiB file + %.1f MiB shmem\n", "  of which",
              mib("RssAnon"), mib("RssFile"), mib("RssShmem"));
}

}  // namespace
}  // namespace kvgpu::deviceplugin

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  std::string only = argc > 2 ? argv[2] : "all";
  try {
    if (only == "all" || only == "manager") kvgpu::deviceplugin::BenchManager(iterations);
    if (only == "all" || only == "grpc")
      kvgpu::deviceplugin::BenchGrpc(
          iterations,
          std::chrono::milliseconds(std::getenv("KVGPU_BENCH_SETTLE_MS") != nullptr
                                        ? std::atoi(std::getenv("KVGPU_BENCH_SETTLE_MS"))
                                        : 0));
    if (only == "all" || only == "rss") kvgpu::deviceplugin::BenchRss();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
