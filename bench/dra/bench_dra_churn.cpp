// DRA under churn: the whole daemon in DRA mode on a simulated t4x2 (both GPUs in DRA mode),
// publishing its ResourceSlices to the fake API server over HTTPS at the production interval
// (1 s), while a kubelet client prepares and unprepares claims at a steady rate through the DRA
// gRPC service. Reports what the API server was sent (slice creates, patches and deletes, pool
// generations, bytes of the pool written per generation), the prepares' latency under that load,
// and the process's memory (VmRSS, VmHWM from /proc/self/status) after the first pool and at the
// end: the process also holds the fake API server (its records for tests off, its watch history
// compacted every 5 s), the simulator and the client, so the change across the churn is what
// speaks of the daemon, not the level.
//
// Usage: kvgpu-bench-dra-churn [seconds [operations-per-second [held]]]   (default 60 20 8)
// An operation is a prepare of a new claim of a T4-1B vGPU, on the two GPUs in turn; each
// unprepares the claim prepared `held` before it (with 0, its own claim right away). With claims
// held, each GPU stays locked to the type and the pool rarely changes; with none, every operation
// locks a GPU and frees it again, the most a pool can change.
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_stats.h"
#include "deviceplugin/daemon.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/apiserver/in_memory_kube.h"
#include "fakes/common/dra_node.h"
#include "fakes/common/sim_daemon_options.h"
#include "fakes/common/sim_node.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/fake_podresources.h"

namespace kvgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

int64_t Generation(const std::vector<json>& slices) {
  int64_t generation = -1;
  for (const json& s : slices) {
    generation = std::max<int64_t>(generation, s["spec"]["pool"]["generation"].get<int64_t>());
  }
  return generation;
}

size_t PoolBytes(const std::vector<json>& slices) {
  size_t bytes = 0;
  for (const json& s : slices) bytes += s.dump().size();
  return bytes;
}

int Run(int seconds, int rate, int held) {
  spdlog::set_level(spdlog::level::warn);
  SimNode sim("t4x2");
  const auto kubelet_dir = sim.dir() / "kubelet";
  std::filesystem::create_directories(kubelet_dir / "pod-resources");
  FakeKubelet kubelet(kubelet_dir / "device-plugins");
  FakePodResources podresources(kubelet_dir / "pod-resources" / "kubelet.sock");
  InMemoryPodWatcher pods;
  RecordingEventRecorder events;
  FakeApiServer api_server;
  api_server.EnableKeepAlive();
  api_server.RecordForInspection(false);
  if (!kubelet.Start() || !podresources.Start() || !api_server.Start()) return 1;
  api_server.SetNode({{"metadata", {{"name", "node-1"}, {"uid", "node-uid-1"}}}});
  auto api = kube::ApiClient::Create(api_server.ClientConfig());
  if (!api.ok()) return 1;

  deviceplugin::DaemonOptions options = deviceplugin::testing::SimDraDaemonOptions(sim);
  options.pods = &pods;
  options.events = &events;
  options.api = api.value().get();
  deviceplugin::Daemon daemon(options);
  if (Status started = daemon.Start(); !started.ok()) {
    std::fprintf(stderr, "daemon: %s\n", started.ToString().c_str());
    return 1;
  }
  pods.Sync({});
  const std::string driver(deviceplugin::dra::kDefaultDraDriverName);
  std::string pool;
  for (int i = 0; i < 500 && pool.empty(); ++i) {
    std::vector<json> slices = api_server.resource_slices();
    if (!slices.empty()) pool = slices[0]["spec"]["pool"]["name"];
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (pool.empty()) {
    std::fprintf(stderr, "no ResourceSlices published\n");
    return 1;
  }
  DraTestKubelet client(kubelet_dir);
  if (!client.Register(driver)) return 1;

  // Type nvidia-222 (T4-1B, 16 per GPU) on both GPUs, slots in turn: every prepare and unprepare
  // changes the GPU's free room, and a strict GPU stays on the one type.
  auto device_of = [&](int i) {
    const uint32_t slot = static_cast<uint32_t>((i / 2) % 16);
    return DraName(sim.gpu(static_cast<size_t>(i % 2)), "nvidia-222", slot);
  };
  const long rss_start = bench::StatusKib("VmRSS");
  const int writes_start = api_server.resource_slice_writes();
  const int64_t generation_start = Generation(api_server.resource_slices());
  std::vector<double> prepare_us;
  std::vector<long> rss_series;   // every 10 s
  std::vector<long> heap_series;  // malloc's bytes in use, every 10 s
  int failures = 0, operations = 0;
  const auto period = std::chrono::microseconds(1'000'000 / std::max(rate, 1));
  const auto start = Clock::now();
  auto next = start;
  for (int i = 0; Clock::now() - start < std::chrono::seconds(seconds); ++i, ++operations) {
    std::this_thread::sleep_until(next);
    next += period;
    // As etcd compacts (every 5 minutes in kube-apiserver's default): the fake's watch history
    // stays bounded; the daemon's open watches go on.
    if (i % (5 * rate) == 0) api_server.Compact();
    if (i % (10 * rate) == 0) {
      rss_series.push_back(bench::StatusKib("VmRSS"));
      heap_series.push_back(static_cast<long>(mallinfo2().uordblks / 1024));
    }
    const std::string uid = "uid-" + std::to_string(i), name = "c" + std::to_string(i);
    api_server.SetResourceClaim(
        MakeAllocatedClaim("ns", name, uid, {{"gpu", driver, pool, device_of(i)}}));
    const auto began = Clock::now();
    auto answers = client.Prepare({{"ns", uid, name}});
    prepare_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - began).count());
    if (!answers[uid].error.empty()) ++failures;
    if (i >= held) {
      const int old = i - held;
      const std::string old_uid = "uid-" + std::to_string(old),
                        old_name = "c" + std::to_string(old);
      if (!client.Unprepare({{"ns", old_uid, old_name}})[old_uid].empty()) ++failures;
      api_server.DeleteResourceClaim("ns", old_name);
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the last pass lands
  const std::vector<json> slices = api_server.resource_slices();
  const int writes = api_server.resource_slice_writes() - writes_start;
  const int64_t generations = Generation(slices) - generation_start;
  const long rss_end = bench::StatusKib("VmRSS"), hwm = bench::StatusKib("VmHWM");
  daemon.Stop();

  const bench::Percentiles prepare = bench::Summarize(prepare_us);
  std::printf("churn: %d operations in %.1f s (%.1f/s), %d failed, %d claims held\n", operations,
              elapsed, operations / elapsed, failures, held);
  std::printf("prepare under churn: p50 %.2f ms  p99 %.2f ms  max %.2f ms (kernel included)\n",
              prepare.p50 / 1000, prepare.p99 / 1000, prepare.max / 1000);
  std::printf(
      "slices: %zu in the pool, %zu bytes; %lld generations (%.2f/s), %d writes (%.2f/s), about "
      "%.0f bytes/s of pool written\n",
      slices.size(), PoolBytes(slices), static_cast<long long>(generations),
      static_cast<double>(generations) / elapsed, writes, writes / elapsed,
      static_cast<double>(generations) * static_cast<double>(PoolBytes(slices)) / elapsed);
  std::printf(
      "memory: VmRSS %ld kB after the first pool, %ld kB at the end (%+ld kB); VmHWM %ld kB\n",
      rss_start, rss_end, rss_end - rss_start, hwm);
  std::printf("VmRSS every 10 s (kB):");
  for (long kb : rss_series) std::printf(" %ld", kb);
  std::printf("\nheap in use every 10 s (kB, mallinfo2):");
  for (long kb : heap_series) std::printf(" %ld", kb);
  std::printf("\n");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvgpu::testing

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 60;
  const int rate = argc > 2 ? std::atoi(argv[2]) : 20;
  const int held = argc > 3 ? std::atoi(argv[3]) : 8;
  if (seconds < 1 || rate < 1 || held < 0 || held > 31) {
    std::fprintf(stderr,
                 "usage: kvgpu-bench-dra-churn [seconds [operations-per-second [held 0-31]]]\n");
    return 2;
  }
  return kvgpu::testing::Run(seconds, rate, held);
}
