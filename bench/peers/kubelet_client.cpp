// The kubelet of bench/peers/deviceplugin.sh: one program that plays kubelet's device manager
// for any v1beta1 device plugin (ours and NVIDIA's kubevirt-gpu-device-plugin alike), through
// fakes/kubelet's FakeKubelet: it serves Registration on <plugin-dir>/kubelet.sock, dials every
// plugin that registers, asks GetDevicePluginOptions and keeps its ListAndWatch stream open.
// Beside it, as a kubelet does, it serves PodResources v1 on <plugin-dir>/../pod-resources/
// kubelet.sock (no pods: nothing runs on this node) and keeps an empty device-manager checkpoint
// in <plugin-dir>; ours asks both who holds its vGPUs, NVIDIA's plugin asks neither.
// It starts the plugin itself, so that it knows when the plugin began, and measures:
//
//   start     from the spawn to the first Register call, to the first ListAndWatch answer that
//             lists devices, and to the last resource's first list (the set of resources stays
//             unchanged for --settle-s after it); the plugin's CPU time then, its RSS after the
//             settling. The plugin is started --starts times; the last start goes on to the
//             phases below.
//   idle      --idle-s seconds without a call, --settle-s after the lists: the plugin's CPU time
//             (utime + stime of /proc/PID/stat, and its threads' run time from schedstat), its
//             VmRSS (sampled each second), VmHWM, RssAnon, RssFile, threads, the lists pushed.
//   allocate  --allocate N calls of Allocate for one device of --resource, --gap-ms apart, each
//             timed from the call to the answer. With --metrics-port (ours), the plugin's own
//             create and Allocate histograms are read before and after each call: the kernel's
//             share of the call is the growth of kvgpu_deviceplugin_vgpu_create_seconds_sum.
//             With --free-sysfs DIR, once every listed device was allocated, every vGPU under
//             DIR/sys/bus/mdev/devices is removed (outside the timed part) and the calls wait
//             until the plugin lists what it listed before the phase (its rescan saw them go).
//             Without it the device IDs are allocated round-robin, as for a plugin that hands out
//             vGPUs made beforehand.
//
// Usage: kvgpu-bench-kubelet-client --plugin-dir DIR --log FILE [--starts K] [--settle-s S]
//          [--idle-s S] [--allocate N --resource NAME [--gap-ms G] [--metrics-port P]
//          [--free-sysfs DIR]] -- PLUGIN [ARG...]
// Prints one line per measurement ("start ...", "idle ...", "allocate ...", "end ...") of
// key value pairs on stdout; stops with exit 1 and a message on stderr when the plugin does not
// come up, exits, or an Allocate fails.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fakes/common/child_process.h"
#include "fakes/common/http_request.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/fake_podresources.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Options {
  fs::path plugin_dir;
  fs::path log;
  int starts = 1;
  double settle_s = 3;
  double idle_s = 60;
  int allocate = 0;
  std::string resource;
  int gap_ms = 100;
  int metrics_port = 0;
  fs::path free_sysfs;
  std::vector<std::string> plugin;
};

[[noreturn]] void Fail(const std::string& message) {
  throw std::runtime_error(message);
}

Options Parse(int argc, char** argv) {
  Options o;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) Fail(flag + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) o.plugin.emplace_back(argv[i]);
      break;
    }
    if (a == "--plugin-dir") {
      o.plugin_dir = value(a);
    } else if (a == "--log") {
      o.log = value(a);
    } else if (a == "--starts") {
      o.starts = std::stoi(value(a));
    } else if (a == "--settle-s") {
      o.settle_s = std::stod(value(a));
    } else if (a == "--idle-s") {
      o.idle_s = std::stod(value(a));
    } else if (a == "--allocate") {
      o.allocate = std::stoi(value(a));
    } else if (a == "--resource") {
      o.resource = value(a);
    } else if (a == "--gap-ms") {
      o.gap_ms = std::stoi(value(a));
    } else if (a == "--metrics-port") {
      o.metrics_port = std::stoi(value(a));
    } else if (a == "--free-sysfs") {
      o.free_sysfs = value(a);
    } else {
      Fail("unknown argument " + a);
    }
  }
  if (o.plugin_dir.empty() || o.log.empty() || o.plugin.empty() || o.starts < 1) {
    Fail("usage: --plugin-dir DIR --log FILE [options] -- PLUGIN [ARG...]");
  }
  if (o.allocate > 0 && o.resource.empty()) Fail("--allocate needs --resource");
  return o;
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// utime + stime of the whole process (threads that ended included), in ms.
double CpuMs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) Fail("cannot read /proc/" + std::to_string(pid) + "/stat");
  std::istringstream fields(text.substr(close + 2));
  std::vector<std::string> f;
  std::string field;
  while (fields >> field) f.push_back(field);
  // After "(comm)": state is field 3, utime 14 and stime 15 (proc(5)), here indexes 11 and 12.
  if (f.size() < 13) Fail("short /proc/" + std::to_string(pid) + "/stat");
  const double tick_ms = 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(f[11]) + std::stod(f[12])) * tick_ms;
}

// The run time of the threads alive now (schedstat: ns on a CPU), in ms; ns resolution where
// /proc/PID/stat counts ticks.
double ThreadRunMs(pid_t pid) {
  double ns = 0;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "schedstat");
    double run = 0;
    if (in >> run) ns += run;
  }
  return ns / 1e6;
}

std::map<std::string, long> StatusKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::map<std::string, long> out;
  std::string line;
  while (std::getline(in, line)) {
    for (const char* key : {"VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"}) {
      std::string prefix = std::string(key) + ":";
      if (line.rfind(prefix, 0) == 0) out[key] = std::stol(line.substr(prefix.size()));
    }
  }
  return out;
}

// Sum of every series of a metric (e.g. a histogram's _sum over its labels) in /metrics text.
double MetricSum(const std::string& text, const std::string& name) {
  double total = 0;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name, 0) != 0) continue;
    char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    total += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

using Lists = std::map<std::string, std::map<std::string, std::string>>;

Lists CurrentLists(const kvgpu::testing::FakeKubelet& kubelet) {
  Lists lists;
  for (const std::string& r : kubelet.ConnectedResources()) lists[r] = kubelet.Devices(r);
  return lists;
}

void CheckRunning(kvgpu::testing::ChildProcess& plugin) {
  if (!plugin.Running()) {
    std::string log = plugin.Log();
    if (log.size() > 3000) log = "..." + log.substr(log.size() - 3000);
    Fail("the plugin exited; its log ends:\n" + log);
  }
}

// Clears the plugin directory as kubelet does when it starts (every socket but its own goes).
void ClearPluginDir(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename() == "kubelet_internal_checkpoint") continue;
    fs::remove(entry.path(), ec);
  }
}

struct StartResult {
  double register_ms = -1, first_list_ms = -1, all_lists_ms = -1;
  double cpu_ms = 0;         // the plugin's CPU time when the last resource's list came
  double spawn_unix_ms = 0;  // the wall clock at the spawn, to read the plugin's log against
  size_t resources = 0, devices = 0;
};

// Spawns the plugin and waits for its lists: every resource that registers and lists devices,
// until none is added for `settle`.
StartResult Start(kvgpu::testing::FakeKubelet& kubelet, kvgpu::testing::ChildProcess& plugin,
                  const Options& o) {
  const auto settle =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.settle_s));
  StartResult r;
  r.spawn_unix_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const auto t0 = Clock::now();
  if (!plugin.Start()) Fail("cannot start the plugin: " + plugin.error());
  std::set<std::string> listed;
  auto last_change = t0;
  const auto deadline = t0 + 120s;
  for (;;) {
    // Wakes on every registration and list the fake receives.
    kubelet.WaitUntil(
        [&] {
          if (r.register_ms < 0 && !kubelet.Registrations().empty()) return true;
          for (const std::string& res : kubelet.ConnectedResources()) {
            if (!listed.contains(res) && !kubelet.Devices(res).empty()) return true;
          }
          return false;
        },
        100ms);
    const auto now = Clock::now();
    if (r.register_ms < 0 && !kubelet.Registrations().empty()) r.register_ms = Ms(now - t0);
    for (const std::string& res : kubelet.ConnectedResources()) {
      if (listed.contains(res) || kubelet.Devices(res).empty()) continue;
      listed.insert(res);
      if (r.first_list_ms < 0) r.first_list_ms = Ms(now - t0);
      r.all_lists_ms = Ms(now - t0);
      r.cpu_ms = CpuMs(plugin.pid());
      last_change = now;
    }
    if (!listed.empty() && now - last_change >= settle) break;
    CheckRunning(plugin);
    if (now > deadline) {
      Fail(listed.empty() ? "no ListAndWatch with devices within 120 s (registrations: " +
                                std::to_string(kubelet.Registrations().size()) + ")"
                          : "the plugin kept adding resources for 120 s");
    }
  }
  for (const auto& [res, devices] : CurrentLists(kubelet)) {
    r.devices += devices.size();
    if (!devices.empty()) ++r.resources;
  }
  return r;
}

void Run(const Options& o) {
  fs::create_directories(o.plugin_dir);
  kvgpu::testing::FakePodResources podresources(o.plugin_dir.parent_path() / "pod-resources" /
                                                "kubelet.sock");
  if (!podresources.Start()) Fail("cannot serve " + podresources.socket().string());
  const kvgpu::testing::CheckpointWriter checkpoint(o.plugin_dir.parent_path());
  std::optional<kvgpu::testing::FakeKubelet> kubelet;
  kvgpu::testing::ChildProcess plugin(o.plugin, o.log);
  for (int s = 1; s <= o.starts; ++s) {
    if (plugin.Running()) plugin.Stop();
    kubelet.reset();
    ClearPluginDir(o.plugin_dir);
    checkpoint.Write({});  // kubelet's device manager writes one as it starts
    kubelet.emplace(o.plugin_dir);
    if (!kubelet->Start()) Fail("cannot serve " + kubelet->socket_path().string());
    StartResult r = Start(*kubelet, plugin, o);
    std::map<std::string, long> kib = StatusKib(plugin.pid());
    std::printf(
        "start %d register_ms %.2f first_list_ms %.2f all_lists_ms %.2f resources %zu devices %zu "
        "cpu_ms %.1f vmrss_kib %ld spawn_unix_ms %.0f\n",
        s, r.register_ms, r.first_list_ms, r.all_lists_ms, r.resources, r.devices, r.cpu_ms,
        kib["VmRSS"], r.spawn_unix_ms);
    std::fflush(stdout);
  }
  const pid_t pid = plugin.pid();

  // Idle: no calls; what the plugin does on its own (rescans, health checks, runtime).
  auto updates = [&] {
    int n = 0;
    for (const std::string& res : kubelet->ConnectedResources()) n += kubelet->Updates(res);
    return n;
  };
  if (o.idle_s > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.settle_s));
    const int updates0 = updates();
    const int lists0 = podresources.list_calls();
    const double cpu0 = CpuMs(pid), run0 = ThreadRunMs(pid);
    const auto t0 = Clock::now();
    long rss_min = StatusKib(pid)["VmRSS"], rss_max = rss_min;
    const auto end =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.idle_s));
    for (auto next = t0 + 1s; next <= end; next += 1s) {
      std::this_thread::sleep_until(next);
      CheckRunning(plugin);
      long rss = StatusKib(pid)["VmRSS"];
      rss_min = std::min(rss_min, rss);
      rss_max = std::max(rss_max, rss);
    }
    std::this_thread::sleep_until(end);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu1 = CpuMs(pid), run1 = ThreadRunMs(pid);
    std::map<std::string, long> kib = StatusKib(pid);
    std::printf(
        "idle seconds %.1f cpu_ms %.1f thread_run_ms %.2f vmrss_kib %ld vmrss_min_kib %ld "
        "vmrss_max_kib %ld vmhwm_kib %ld rssanon_kib %ld rssfile_kib %ld rssshmem_kib %ld "
        "threads %ld list_updates %d podresources_lists %d\n",
        seconds, cpu1 - cpu0, run1 - run0, kib["VmRSS"], rss_min, rss_max, kib["VmHWM"],
        kib["RssAnon"], kib["RssFile"], kib["RssShmem"], kib["Threads"], updates() - updates0,
        podresources.list_calls() - lists0);
    std::fflush(stdout);
  }

  if (o.allocate > 0) {
    const Lists baseline = CurrentLists(*kubelet);
    auto it = baseline.find(o.resource);
    if (it == baseline.end() || it->second.empty()) {
      std::string have;
      for (const auto& [res, devices] : baseline) have += " " + res;
      Fail("the plugin lists no device of " + o.resource + " (it lists:" + have + ")");
    }
    std::vector<std::string> ids;
    for (const auto& [id, health] : it->second) ids.push_back(id);
    auto scrape = [&]() -> std::string {
      if (o.metrics_port == 0) return "";
      std::string text = kvgpu::testing::HttpRequest(o.metrics_port, "GET", "/metrics");
      if (text.find(" 200 ") == std::string::npos) Fail("GET /metrics failed: " + text);
      return text;
    };
    size_t next = 0;
    for (int i = 0; i < o.allocate; ++i) {
      if (next == ids.size()) {
        next = 0;
        if (!o.free_sysfs.empty()) {
          // Every vGPU goes; the plugin's rescan then lists the node as before the phase.
          const fs::path devices = o.free_sysfs / "sys/bus/mdev/devices";
          for (const auto& entry : fs::directory_iterator(devices)) {
            std::ofstream(entry.path() / "remove") << "1";
          }
          if (!kubelet->WaitUntil([&] { return CurrentLists(*kubelet) == baseline; }, 60s)) {
            Fail("the plugin did not list the freed node again within 60 s");
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(o.gap_ms));
      const std::string before = scrape();
      v1beta1::AllocateResponse response;
      const auto t0 = Clock::now();
      grpc::Status status = kubelet->Allocate(o.resource, {{ids[next]}}, &response);
      const auto took = Clock::now() - t0;
      if (!status.ok()) {
        Fail("Allocate of " + ids[next] + " failed: " + status.error_message());
      }
      if (response.container_responses_size() != 1 ||
          response.container_responses(0).devices_size() == 0) {
        Fail("Allocate of " + ids[next] + " answered no device: " + response.DebugString());
      }
      const std::string after = scrape();
      double kernel_us = -1, plugin_us = -1;
      if (!before.empty()) {
        kernel_us = (MetricSum(after, "kvgpu_deviceplugin_vgpu_create_seconds_sum") -
                     MetricSum(before, "kvgpu_deviceplugin_vgpu_create_seconds_sum")) *
                    1e6;
        plugin_us = (MetricSum(after, "kvgpu_deviceplugin_allocate_seconds_sum") -
                     MetricSum(before, "kvgpu_deviceplugin_allocate_seconds_sum")) *
                    1e6;
      }
      std::printf("allocate %d id %s total_us %.1f kernel_us %.1f plugin_us %.1f\n", i,
                  ids[next].c_str(), std::chrono::duration<double, std::micro>(took).count(),
                  kernel_us, plugin_us);
      ++next;
    }
  }

  CheckRunning(plugin);
  std::map<std::string, long> kib = StatusKib(pid);
  const int exit_status = plugin.Stop();
  std::printf("end vmhwm_kib %ld vmrss_kib %ld exit %d\n", kib["VmHWM"], kib["VmRSS"], exit_status);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Run(Parse(argc, argv));
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvgpu-bench-kubelet-client: %s\n", e.what());
    return 1;
  }
  return 0;
}
