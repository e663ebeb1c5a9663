// bench/peers/scheduler.sh's nodes: what each of N GPU nodes shows the scheduler, computed by the
// project's own code from a simulated kernel, one JSON document a line on stdout:
//
//   {"name": "gpu-node-0", "allocatable": {"tencent.com/vgpu-222": "3", ...},
//    "annotations": {"kvgpu.tencent.com/vgpu-state": "<the state document>"},
//    "slices": [<ResourceSlice>, ...]}                                    (with --slices only)
//
// Each node has 8 Tesla T4s (kvgpu-sim's T4: 12 types, one type per GPU), as
// bench/extender/bench_extender.cpp's nodes: each GPU is free with probability 0.4, else locked
// to a random type with 1 to all of its instances made. The vGPUs are made in the kernel model
// (sim/) through the mdev library's sysfs backend and recorded as the device plugin records its
// own, each held by a pod; then, as the node daemon does it:
//   - allocatable: the device lists kubelet would get (DeviceCatalogue: free slots the kernel can
//     still create and our vGPUs), counted as kubelet's device manager counts healthy devices;
//   - the annotation: BuildSchedulerState, rendered by scheduling::RenderNodeState at the
//     version the plugin writes by default;
//   - the slices: dra::BuildResourceSlices of the same kernel view (narrowed: a locked GPU offers
//     only its type, its counter less what its vGPUs use), without binding conditions and without
//     compatibility groups (dra.bindingConditions: false; no daemon runs here to confirm an
//     allocation, and 1.37's default gates drop the groups). No owner reference (the script sets
//     it once the Node exists).
//
//   kvgpu-bench-scheduler-nodes --nodes N [--seed S] [--first I] [--slices]
//
// The same seed gives the same nodes. Node i is named gpu-node-<i>; --first starts there.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/cross_program.h"
#include "deviceplugin/dra/resource_slices.h"
#include "deviceplugin/model/device_catalogue.h"
#include "deviceplugin/model/device_id.h"
#include "deviceplugin/model/model_options.h"
#include "deviceplugin/model/scheduler_state.h"
#include "mdev/sysfs_backend.h"
#include "scheduling/node_vgpu_state.h"
#include "sim/kernel_model.h"

namespace {

namespace dp = kvgpu::deviceplugin;
namespace dra = kvgpu::deviceplugin::dra;
using nlohmann::json;

constexpr int kGpusPerNode = 8;
constexpr double kFreeGpu = 0.4;

struct Options {
  size_t nodes = 0;
  size_t first = 0;
  uint32_t seed = 42;
  bool slices = false;
};

int Usage() {
  std::cerr << "usage: kvgpu-bench-scheduler-nodes --nodes N [--seed S] [--first I] [--slices]\n";
  return 2;
}

[[noreturn]] void Die(const std::string& what) {
  std::cerr << "kvgpu-bench-scheduler-nodes: " << what << "\n";
  std::exit(1);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// 8 of kvgpu-sim's T4, on buses of two sockets.
kvgpu::sim::NodeProfile EightT4() {
  auto t4x2 = kvgpu::sim::ProfileByName("t4x2");
  if (!t4x2.ok()) Die(t4x2.status().ToString());
  kvgpu::sim::NodeProfile profile = *t4x2;
  const kvgpu::sim::GpuSpec t4 = profile.gpus.front();
  profile.name = "t4x8";
  profile.summary = "eight Tesla T4, time-sliced vGPU on the mdev bus";
  profile.gpus.clear();
  const int buses[kGpusPerNode] = {0x1a, 0x1c, 0x3b, 0x3d, 0x88, 0x8a, 0xaf, 0xb1};
  for (int g = 0; g < kGpusPerNode; ++g) {
    kvgpu::sim::GpuSpec gpu = t4;
    char address[16];
    std::snprintf(address, sizeof address, "0000:%02x:00.0", buses[g]);
    gpu.address = address;
    gpu.numa_node = buses[g] < 0x80 ? 0 : 1;
    profile.gpus.push_back(gpu);
  }
  return profile;
}

// One node: vGPUs made on the model, its three views printed, the vGPUs removed again.
void Node(size_t index, std::mt19937& random, kvgpu::sim::KernelModel& model,
          kvgpu::mdev::SysfsBackend& backend, const Options& options) {
  const std::string name = "gpu-node-" + std::to_string(index);
  const auto& gpus = model.profile().gpus;
  std::vector<dp::CreatedVgpu> records;
  for (size_t g = 0; g < gpus.size(); ++g) {
    const bool free = std::bernoulli_distribution(kFreeGpu)(random);
    const auto& type =
        gpus[g].types[std::uniform_int_distribution<size_t>(0, gpus[g].types.size() - 1)(random)];
    const uint32_t used = std::uniform_int_distribution<uint32_t>(1, type.max_instances)(random);
    if (free) continue;
    for (uint32_t slot = 0; slot < used; ++slot) {
      auto vgpu = backend.Create({gpus[g].address, type.id, std::nullopt});
      if (!vgpu.ok()) Die(name + ": " + vgpu.status().ToString());
      dp::CreatedVgpu record;
      record.device_id = dp::MakeDeviceId({gpus[g].address, type.id, slot});
      record.resource =
          std::string(kvgpu::kVgpuResourcePrefix) + type.id.substr(type.id.rfind('-') + 1);
      record.vgpu_id = vgpu->id;
      record.parent = gpus[g].address;
      record.physical_gpu = gpus[g].address;
      record.type_id = type.id;
      record.slot = slot;
      record.created_unix_ms = NowMs();
      record.owner_pod = "ml/" + name + "-" + std::to_string(g) + "-" + std::to_string(slot);
      records.push_back(std::move(record));
    }
  }
  auto inventory = backend.Scan();
  if (!inventory.ok()) Die(name + ": " + inventory.status().ToString());
  const dp::ModelOptions model_options;
  dp::DeviceCatalogue catalogue;
  catalogue.Rebuild(*inventory, records, model_options);
  const dp::GpuRules rules = dp::RulesFor(*inventory, model_options);

  json out = {{"name", name}};
  json allocatable = json::object();
  for (const auto& [resource, counts] : catalogue.Counts()) {
    const uint32_t healthy = counts.available + counts.allocated;
    if (healthy > 0) allocatable[resource] = std::to_string(healthy);
  }
  out["allocatable"] = allocatable;
  kvgpu::scheduling::NodeVgpuState state =
      dp::BuildSchedulerState(*inventory, records, catalogue, rules, false);
  state.node = name;
  state.generation = 1;
  state.published_unix_ms = NowMs();
  out["annotations"] = {
      {kvgpu::scheduling::kNodeStateAnnotation, kvgpu::scheduling::RenderNodeState(state)}};
  if (options.slices) {
    dra::SliceOptions slice_options;
    slice_options.node_name = name;
    slice_options.model = model_options;
    slice_options.binding_conditions = false;
    slice_options.compatibility_groups = false;
    dra::TypeMemory memory;
    auto slices = dra::BuildResourceSlices(memory.Remember(*inventory), rules, slice_options, 1);
    if (!slices.ok()) Die(name + ": " + slices.status().ToString());
    out["slices"] = *slices;
  }
  std::cout << out.dump() << "\n";

  for (const auto& record : records) {
    auto removed = backend.Remove(record.vgpu_id);
    if (!removed.ok()) Die(name + ": " + removed.ToString());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(Usage());
      return argv[++i];
    };
    if (arg == "--nodes") {
      options.nodes = std::stoul(value());
    } else if (arg == "--first") {
      options.first = std::stoul(value());
    } else if (arg == "--seed") {
      options.seed = static_cast<uint32_t>(std::stoul(value()));
    } else if (arg == "--slices") {
      options.slices = true;
    } else {
      return Usage();
    }
  }
  if (options.nodes == 0) return Usage();

  // The kernel model's tree is files: on a tmpfs where there is one (TMPDIR, else /dev/shm).
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0'              ? tmp
                     : std::filesystem::is_directory("/dev/shm") ? "/dev/shm"
                                                                 : "/tmp";
  std::string dir_template = base + "/kvgpu-sched-nodes-XXXXXX";
  if (mkdtemp(dir_template.data()) == nullptr) Die("mkdtemp in " + base + " failed");
  const std::filesystem::path dir = dir_template;
  int status = 0;
  {
    auto model = kvgpu::sim::KernelModel::Create(dir / "root", EightT4());
    if (!model.ok()) Die(model.status().ToString());
    kvgpu::mdev::SysfsBackend backend((*model)->root(), **model);
    // One random stream for all nodes: node i is the same for a seed whatever --first is only
    // when the nodes before it were drawn, so skip them the same way.
    std::mt19937 random(options.seed);
    for (size_t i = 0; i < options.first + options.nodes; ++i) {
      if (i < options.first) {
        // Draw the same numbers the node would have used, without making anything.
        for (int g = 0; g < kGpusPerNode; ++g) {
          static_cast<void>(std::bernoulli_distribution(kFreeGpu)(random));
          const auto& types = (*model)->profile().gpus[0].types;
          const auto& type =
              types[std::uniform_int_distribution<size_t>(0, types.size() - 1)(random)];
          static_cast<void>(std::uniform_int_distribution<uint32_t>(1, type.max_instances)(random));
        }
        continue;
      }
      Node(i, random, **model, backend, options);
    }
    std::cout.flush();
    if (!std::cout) status = 1;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return status;
}
