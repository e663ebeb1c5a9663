// Filter + prioritize latency of the scheduler extender per pod, as kube-scheduler calls it (the
// JSON body in, the JSON answer out, through Extender::Handle: parsing, judging every node,
// rendering), for N nodes of 8 T4 GPUs each, in both argument shapes; and the process's memory.
// One thread: pin it to a core with taskset. Results: docs/bench-extender.md.
//
//   kvgpu-bench-extender [--names-only] [--pods=N] [--per-pod] [NODES...]   (default: 100 1000)
//
// --names-only skips the Nodes shape (every Node object in every call: minutes at 5,000 nodes);
// --pods sets the pods per size (default 1,000 below 1,000 nodes, else 200); --per-pod writes each
// pod's type, the nodes filter kept and its CPU time to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "common/clock.h"
#include "common/cross_program.h"
#include "extender/extender.h"
#include "scheduling/node_vgpu_state.h"

namespace {

using kvgpu::extender::ClusterView;
using kvgpu::extender::Extender;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The T4's types as the simulator offers them: id and instances per GPU.
const std::vector<std::pair<int, uint32_t>> kT4Types = {{222, 16}, {223, 8}, {225, 16}, {228, 2},
                                                        {230, 16}, {231, 8}, {232, 4},  {233, 2},
                                                        {234, 1},  {319, 4}, {320, 2},  {321, 1}};

std::string Resource(int type) {
  return std::string(kvgpu::kVgpuResourcePrefix) + std::to_string(type);
}

// A node of 8 T4s: about 40% free, the rest locked to a random type with some of it used.
kvgpu::scheduling::NodeVgpuState RandomNode(const std::string& name, std::mt19937& random) {
  kvgpu::scheduling::NodeVgpuState state;
  state.node = name;
  state.generation = 1;
  state.published_unix_ms = kvgpu::UnixNowMs();
  std::uniform_int_distribution<size_t> pick(0, kT4Types.size() - 1);
  for (int g = 0; g < 8; ++g) {
    kvgpu::scheduling::GpuSlots gpu;
    char id[32];
    std::snprintf(id, sizeof id, "0000:%02x:00.0", 0x10 + g);
    gpu.id = id;
    if (std::bernoulli_distribution(0.4)(random)) {
      for (const auto& [type, max] : kT4Types) {
        gpu.resources[Resource(type)] = {"nvidia-" + std::to_string(type), 0, max};
      }
    } else {
      const auto& [type, max] = kT4Types[pick(random)];
      const uint32_t used = std::uniform_int_distribution<uint32_t>(1, max)(random);
      gpu.LockTo("nvidia-" + std::to_string(type));
      gpu.resources[Resource(type)] = {gpu.locked_type, used, max - used};
      for (uint32_t i = 0; i < used; ++i) {
        state.holders.insert("ml/" + name + "-" + std::to_string(g) + "-" + std::to_string(i));
      }
    }
    state.gpus.push_back(std::move(gpu));
  }
  return state;
}

json NodeObject(const kvgpu::scheduling::NodeVgpuState& state) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", state.node},
        {"labels", {{"kubernetes.io/hostname", state.node}, {"kata-vgpu.io/vgpu-mode", "mdev"}}},
        {"annotations",
         {{kvgpu::scheduling::kNodeStateAnnotation, kvgpu::scheduling::RenderNodeState(state)}}}}},
      {"status", {{"allocatable", {{"cpu", "64"}, {"memory", "512Gi"}}}}}};
}

json Pod(const std::string& name, int type) {
  return {{"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "uid-" + name}}},
          {"spec",
           {{"runtimeClassName", "kata-vgpu"},
            {"containers",
             {{{"name", "main"},
               {"image", "pytorch"},
               {"resources", {{"limits", {{Resource(type), "1"}}}}}}}}}}};
}

// This thread's CPU time: unlike the wall time, not stretched by other processes on the core.
double ThreadCpuMicros() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e6 + static_cast<double>(now.tv_nsec) / 1e3;
}

struct Options {
  bool names_only = false;
  int pods = 0;          // 0: by node count
  bool per_pod = false;  // each pod's type, nodes kept and CPU time on stderr
};

void Run(size_t node_count, const Options& options) {
  std::mt19937 random(42);
  ClusterView view{std::string(kvgpu::kVgpuResourcePrefix)};
  std::vector<json> nodes;
  std::vector<std::string> names;
  for (size_t i = 0; i < node_count; ++i) {
    auto state = RandomNode("gpu-node-" + std::to_string(i), random);
    nodes.push_back(NodeObject(state));
    names.push_back(state.node);
  }
  view.SyncNodes(nodes);
  // Two pods bound to every tenth node whose vGPUs are not made yet.
  std::vector<kvgpu::kube::PodInfo> bound;
  for (size_t i = 0; i < node_count; i += 10) {
    for (int p = 0; p < 2; ++p) {
      auto pod =
          kvgpu::kube::ParsePod(Pod("waiting-" + std::to_string(i) + "-" + std::to_string(p), 222));
      pod->node_name = names[i];
      bound.push_back(*pod);
    }
  }
  view.SyncPods(bound);
  Extender extender(view, kvgpu::extender::ExtenderOptions{});
  const long rss_after_view = kvgpu::bench::StatusKib("VmRSS");

  for (bool names_only : {true, false}) {
    if (!names_only && options.names_only) break;
    std::vector<double> micros;
    std::vector<double> cpu_micros;
    size_t kept_total = 0;
    const int pods = options.pods > 0 ? options.pods : node_count >= 1000 ? 200 : 1000;
    std::uniform_int_distribution<size_t> pick(0, kT4Types.size() - 1);
    for (int i = 0; i < pods; ++i) {
      const int type = kT4Types[pick(random)].first;
      json args = {{"Pod", Pod("p" + std::to_string(i), type)}};
      if (names_only) {
        args["Nodes"] = nullptr;
        args["NodeNames"] = names;
      } else {
        args["Nodes"] = {{"metadata", json::object()}, {"items", nodes}};
        args["NodeNames"] = nullptr;
      }
      const std::string body = args.dump();  // kube-scheduler's side, not timed
      auto start = Clock::now();
      double cpu_start = ThreadCpuMicros();
      auto filtered = extender.Handle({"POST", "/filter", "application/json", body, false});
      auto took = Clock::now() - start;
      double cpu = ThreadCpuMicros() - cpu_start;
      // Prioritize gets the nodes that passed, in the same shape (kube-scheduler's side again).
      json result = json::parse(filtered.body);
      json next = {{"Pod", args["Pod"]}};
      if (names_only) {
        next["Nodes"] = nullptr;
        next["NodeNames"] = result["NodeNames"];
        kept_total += result["NodeNames"].size();
      } else {
        next["Nodes"] = result["Nodes"];
        next["NodeNames"] = nullptr;
        kept_total += result["Nodes"]["items"].size();
      }
      const std::string next_body = next.dump();
      start = Clock::now();
      cpu_start = ThreadCpuMicros();
      auto scored = extender.Handle({"POST", "/prioritize", "application/json", next_body, false});
      took += Clock::now() - start;
      cpu += ThreadCpuMicros() - cpu_start;
      if (scored.status != 200) std::fprintf(stderr, "prioritize answered %d\n", scored.status);
      micros.push_back(std::chrono::duration<double, std::micro>(took).count());
      cpu_micros.push_back(cpu);
      if (options.per_pod) {
        std::fprintf(stderr, "pod %d type %d kept %zu cpu %.0f µs\n", i, type,
                     static_cast<size_t>(names_only ? result["NodeNames"].size()
                                                    : result["Nodes"]["items"].size()),
                     cpu);
      }
    }
    const kvgpu::bench::Percentiles p = kvgpu::bench::Summarize(micros);
    const kvgpu::bench::Percentiles cpu = kvgpu::bench::Summarize(cpu_micros);
    std::printf("| %zu | %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %ld | %ld |\n",
                node_count, names_only ? "NodeNames" : "Nodes", pods, p.p50, p.p99, p.max, cpu.p50,
                cpu.p99, static_cast<double>(kept_total) / pods, rss_after_view / 1024,
                kvgpu::bench::StatusKib("VmHWM") / 1024);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--names-only") {
      options.names_only = true;
    } else if (arg == "--per-pod") {
      options.per_pod = true;
    } else if (arg.starts_with("--pods=")) {
      options.pods = std::stoi(arg.substr(7));
    } else {
      sizes.push_back(std::stoul(arg));
    }
  }
  if (sizes.empty()) sizes = {100, 1000};
  std::printf(
      "| nodes | shape | pods | p50 µs | p99 µs | max µs | CPU p50 µs | CPU p99 µs | nodes kept "
      "(mean) | RSS after the view MiB | peak RSS MiB |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t n : sizes) Run(n, options);
  return 0;
}
