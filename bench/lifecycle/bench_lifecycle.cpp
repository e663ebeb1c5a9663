// Lifecycle benchmarks (issue #5's targets):
//
//   removal  time from a pod's deletion (kubelet stops listing it in PodResources, then the API
//            server's DELETED event) until its mdev is gone, grace period 0: p50/p99 over N pods.
//            The daemon in-process over the kernel model; PodResources over its real gRPC socket.
//   pass     CPU time of one reconcile pass over 512 devices held by 110 pods: indexing kubelet's
//            PodResources answer, the manager's snapshot, the plan (CLOCK_PROCESS_CPUTIME_ID).
//   rss      resident memory of the real kvgpu-device-plugin on the t4x2 FUSE simulator with
//            every pod source running: PodResources polling, the checkpoint watch, and a pod
//            watch on a fake API server reached through a kubeconfig (CA + bearer token).
//
// Usage: kvgpu-bench-lifecycle [removal|pass|rss|all] [pods]   (default: all, 200 pods)
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include "common/clock.h"
#include "common/cross_program.h"
#include "deviceplugin/daemon.h"
#include "deviceplugin/lifecycle/lifecycle.h"
#include "deviceplugin/model/resource_manager.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/cluster/daemons.h"
#include "fakes/cluster/fake_node.h"
#include "fakes/cluster/sim_mount.h"
#include "fakes/common/temp_dir.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/fake_podresources.h"
#include "mdev/sysfs_backend.h"
#include "sim/kernel_model.h"

namespace kvgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kResource = std::string(kVgpuResourcePrefix) + "222";
constexpr const char* kUuidsEnv = "KVGPU_VGPU_222_UUIDS";
constexpr int kGpus = 16;
constexpr int kPerGpu = 32;

// 16 T4s whose T4-1B allows 32 instances each: the 512 devices of the pass target.
sim::NodeProfile Node512() {
  const auto t4 = sim::ProfileByName("t4x2");
  sim::GpuSpec gpu = t4->gpus.at(0);
  for (sim::TypeSpec& type : gpu.types) {
    if (type.id == "nvidia-222") type.max_instances = kPerGpu;
  }
  sim::NodeProfile profile{"bench-512", "16 T4 x 32 T4-1B", {}, t4->host_driver_version};
  for (int i = 0; i < kGpus; ++i) {
    char address[16];
    std::snprintf(address, sizeof address, "0000:%02x:00.0", 0x10 + i);
    gpu.address = address;
    profile.gpus.push_back(gpu);
  }
  return profile;
}

std::string DeviceId(int index) {
  char address[16];
  std::snprintf(address, sizeof address, "0000:%02x:00.0", 0x10 + index / kPerGpu);
  return std::string(address) + "-nvidia-222-" + std::to_string(index % kPerGpu);
}

double Percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1))];
}

void PrintSpread(const std::string& what, const std::vector<double>& ms) {
  std::printf("%-44s n %4zu  p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms\n", what.c_str(), ms.size(),
              Percentile(ms, 0.5), Percentile(ms, 0.99), Percentile(ms, 1.0));
}

kube::PodInfo Pod(int i) {
  kube::PodInfo pod;
  pod.uid = "uid-" + std::to_string(i);
  pod.namespace_name = "bench";
  pod.name = "pod-" + std::to_string(i);
  pod.node_name = "node-1";
  pod.phase = "Running";
  return pod;
}

kubelet::PodResources Listed(int i, const std::vector<std::string>& ids) {
  return {"bench", "pod-" + std::to_string(i), {{"main", {{kResource, ids}}}}};
}

void BenchRemoval(int count) {
  if (count > kGpus * kPerGpu) throw std::runtime_error("at most 512 pods");
  kvgpu::testing::TempDir dir;
  auto model = sim::KernelModel::Create(dir.path() / "root", Node512());
  if (!model.ok()) throw std::runtime_error(model.status().ToString());
  const auto kubelet_dir = dir.path() / "kubelet";
  std::filesystem::create_directories(kubelet_dir / "pod-resources");
  kvgpu::testing::FakeKubelet kubelet(kubelet_dir / "device-plugins");
  kvgpu::testing::FakePodResources podresources(kubelet_dir / "pod-resources" / "kubelet.sock");
  if (!kubelet.Start() || !podresources.Start()) throw std::runtime_error("kubelet fakes failed");
  kvgpu::testing::InMemoryPodWatcher pods;
  kvgpu::testing::RecordingEventRecorder events;

  DaemonOptions options;
  options.args.sysfs_root = (*model)->root();
  options.args.kubelet_dir = kubelet_dir;
  options.args.state_dir = dir.path() / "state";
  options.args.node_name = "node-1";
  options.config.udev_events = false;
  options.config.lifecycle.grace_period = 0ms;  // the target's condition; the rest as deployed
  options.io = model->get();
  options.pods = &pods;
  options.events = &events;
  Daemon daemon(options);
  if (Status started = daemon.Start(); !started.ok()) throw std::runtime_error(started.ToString());
  if (!kubelet.WaitUntil([&] { return kubelet.Devices(kResource).size() == 512; }, 10s)) {
    throw std::runtime_error("the plugin did not list 512 devices");
  }
  pods.Sync({});

  std::vector<std::string> vgpus;
  std::vector<kubelet::PodResources> listed;
  std::vector<kvgpu::testing::CheckpointRecord> records;
  for (int i = 0; i < count; ++i) {
    v1beta1::AllocateResponse response;
    grpc::Status status = kubelet.Allocate(kResource, {{DeviceId(i)}}, &response);
    if (!status.ok()) throw std::runtime_error(status.error_message());
    vgpus.push_back(response.container_responses(0).envs().at(kUuidsEnv));
    listed.push_back(Listed(i, {DeviceId(i)}));
    records.push_back({Pod(i).uid,
                       "main",
                       kResource,
                       {DeviceId(i)},
                       -1,
                       response.container_responses(0).SerializeAsString()});
    pods.Emit(kube::PodEventType::kAdded, Pod(i));
  }
  // As kubelet: the checkpoint first, then the pods run and PodResources lists them.
  kvgpu::testing::CheckpointWriter(kubelet_dir).Write(records);
  podresources.SetPods(listed);
  // Pods that ran a while: past the plugin's settle time, which only shelters fresh allocations.
  std::this_thread::sleep_for(6s);

  std::vector<double> latencies;
  int lost = 0;
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    std::erase_if(listed, [&](const kubelet::PodResources& p) { return p.name == Pod(i).name; });
    podresources.SetPods(listed);
    kube::PodInfo gone = Pod(i);
    gone.deleting = true;
    pods.Emit(kube::PodEventType::kDeleted, gone);
    bool removed = false;
    while (Clock::now() - start < 10s) {
      const auto ids = (*model)->VgpuIds();
      if (std::find(ids.begin(), ids.end(), vgpus[static_cast<size_t>(i)]) == ids.end()) {
        removed = true;
        break;
      }
      std::this_thread::sleep_for(500us);
    }
    if (!removed) ++lost;
    latencies.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  daemon.Stop();
  PrintSpread("deletion -> mdev removed (grace 0)", latencies);
  std::printf("%-44s %d of %d\n", "not removed within 10 s", lost, count);
}

double CpuMs() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

void BenchPass(int iterations) {
  constexpr int kPods = 110;
  kvgpu::testing::TempDir dir;
  auto model = sim::KernelModel::Create(dir.path() / "root", Node512());
  if (!model.ok()) throw std::runtime_error(model.status().ToString());
  mdev::SysfsBackend node((*model)->root(), **model);
  MemoryStateStore store;
  UnknownHolders holders;
  ResourceManager manager(node, {}, store, holders);
  if (Status started = manager.Start(); !started.ok()) throw std::runtime_error(started.ToString());
  manager.SetRefreshRequester([] {});

  // 512 devices over 110 pods: 72 pods with 5, 38 with 4.
  std::vector<kubelet::PodResources> listed;
  for (int pod = 0, next = 0; pod < kPods; ++pod) {
    std::vector<std::string> ids;
    for (int n = pod < 72 ? 5 : 4; n > 0; --n) ids.push_back(DeviceId(next++));
    auto answer = manager.Allocate(kResource, {ids});
    if (!answer.ok()) throw std::runtime_error(answer.status().ToString());
    listed.push_back(Listed(pod, ids));
  }
  if (Status refreshed = manager.Refresh(); !refreshed.ok()) {
    throw std::runtime_error(refreshed.ToString());
  }

  LifecycleOptions reconcile;                  // as deployed: grace 30 s, settle 5 s
  const int64_t later = UnixNowMs() + 60'000;  // a minute on: no allocation is fresh any more
  for (const int live : {kPods, kPods / 2}) {
    const std::vector<kubelet::PodResources> answer(listed.begin(), listed.begin() + live);
    std::map<std::string, int64_t> free_since;
    std::vector<double> cpu;
    size_t held = 0;
    for (int i = 0; i < iterations; ++i) {
      const double start = CpuMs();
      HolderFacts facts;
      facts.kubelet_known = true;
      facts.kubelet_up_unix_ms = later - 60'000;
      facts.kubelet_holders = HoldersFromPodResources(answer);
      const LifecycleSnapshot snapshot = manager.Snapshot();
      const PassPlan plan = PlanPass(snapshot, facts, free_since, later, reconcile);
      cpu.push_back(CpuMs() - start);
      held = plan.held;
    }
    PrintSpread("pass CPU, 512 devices, " + std::to_string(live) + " of 110 pods live", cpu);
    std::printf("%-44s %zu held\n", "  verdicts", held);
  }
}

// Fields of /proc/<pid>/status, in KiB.
std::map<std::string, long> MemoryOf(pid_t pid) {
  std::map<std::string, long> out;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    for (const char* key : {"VmRSS", "RssAnon", "RssFile", "Threads"}) {
      if (line.starts_with(std::string(key) + ":")) {
        out[key] = std::atol(line.c_str() + std::string(key).size() + 1);
      }
    }
  }
  return out;
}

// Resident KiB per mapped file (libraries), largest first: where RssFile goes.
std::vector<std::pair<long, std::string>> ResidentFiles(pid_t pid) {
  std::map<std::string, long> per_file;
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  std::string line, file;
  while (std::getline(smaps, line)) {
    if (line.starts_with("Rss:")) {
      if (!file.empty()) per_file[file] += std::atol(line.c_str() + 4);
    } else if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
               line.find('-') < line.find(' ')) {
      const auto slash = line.find('/');
      file = slash == std::string::npos ? "" : line.substr(line.rfind('/') + 1);
    }
  }
  std::vector<std::pair<long, std::string>> out;
  for (const auto& [name, kib] : per_file) out.emplace_back(kib, name);
  std::sort(out.rbegin(), out.rend());
  return out;
}

void BenchRss() {
  kvgpu::testing::TempDir dir;
  kvgpu::testing::SimMount sim(KVGPU_SIM_PATH, "t4x2", dir.path() / "sim");
  std::filesystem::create_directories(dir.path() / "sim");
  if (auto failed = sim.Mount()) throw std::runtime_error(*failed);
  kvgpu::testing::FakeNode node(dir.path() / "kubelet", "node-1");
  if (auto started = node.Start(); !started.ok()) throw std::runtime_error(started.error);
  // The deployed config but a quick poll and no grace, so the lifecycle is busy while measured.
  const std::string config =
      "udevEvents: false\n"
      "rescanInterval: 1s\n"
      "lifecycle:\n"
      "  gracePeriod: 0s\n"
      "  pollInterval: 1s\n";
  // Always with --kubeconfig: the pod watch on the fake API server runs.
  kvgpu::testing::PluginProcess plugin(KVGPU_DEVICE_PLUGIN_PATH, sim.mount(), dir.path() / "plugin",
                                       node, config);
  if (auto failed = plugin.Start(node, 12)) throw std::runtime_error(*failed);

  std::map<std::string, long> peak;
  auto sample = [&] {
    for (const auto& [key, kib] : MemoryOf(plugin.process().pid())) {
      peak[key] = std::max(peak[key], kib);
    }
  };
  // Pods come and go: Allocate, PodResources and checkpoint updates, watch events, removals.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 6; ++i) {
      auto ran = node.RunPod("bench", "pod-" + std::to_string(round * 6 + i), {{kResource, 1}});
      if (!ran.ok()) throw std::runtime_error(ran.error);
      sample();
    }
    std::this_thread::sleep_for(6s);  // past the settle time
    for (int i = 0; i < 6; ++i) {
      (void)node.DeletePod("bench", "pod-" + std::to_string(round * 6 + i));
      sample();
    }
    for (int s = 0; s < 8; ++s) {
      std::this_thread::sleep_for(250ms);
      sample();
    }
  }
  const auto last = MemoryOf(plugin.process().pid());
  const auto files = ResidentFiles(plugin.process().pid());
  // Proof that every source was running while measured.
  const int open_watches = node.api().open_watches();
  const int lists = node.pod_resources().list_calls();
  plugin.process().Stop();
  std::printf("%-44s VmRSS %6ld KiB  RssAnon %6ld KiB  RssFile %6ld KiB  threads %ld\n",
              "plugin RSS, end", last.at("VmRSS"), last.at("RssAnon"), last.at("RssFile"),
              last.at("Threads"));
  std::printf("%-44s VmRSS %6ld KiB  RssAnon %6ld KiB  RssFile %6ld KiB  threads %ld\n",
              "plugin RSS, peak while sampled", peak["VmRSS"], peak["RssAnon"], peak["RssFile"],
              peak["Threads"]);
  std::printf("%-44s %d open pod watch(es), %d PodResources List calls\n", "  sources",
              open_watches, lists);
  for (size_t i = 0; i < files.size() && i < 6; ++i) {
    std::printf("  resident file %-30s %6ld KiB\n", files[i].second.c_str(), files[i].first);
  }
}

}  // namespace
}  // namespace kvgpu::deviceplugin

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  const int pods = argc > 2 ? std::atoi(argv[2]) : 200;
  spdlog::set_level(spdlog::level::warn);
  try {
    if (what == "removal" || what == "all") kvgpu::deviceplugin::BenchRemoval(pods);
    if (what == "pass" || what == "all") kvgpu::deviceplugin::BenchPass(200);
    if (what == "rss" || what == "all") kvgpu::deviceplugin::BenchRss();
  } catch (const std::exception& e) {
    std::cerr << "kvgpu-bench-lifecycle: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
