// The done-when of the scheduler extender: a burst of 200 pods of 6 types over 4 simulated
// 2 x T4 nodes (the real device plugin on each, the fake kubelet admitting), scheduled back to
// back as kube-scheduler does, with and without the extender: how many run, fail admission, or
// wait Pending. Results: docs/bench-extender.md.
//
//   kvgpu-bench-extender-burst [SEEDS]   (default: 5)
#include <spdlog/spdlog.h>

#include <cstdio>
#include <random>
#include <string>

#include "common/cross_program.h"
#include "fakes/scheduling/scheduling_cluster.h"

namespace {

using kvgpu::testing::ClusterPod;
using kvgpu::testing::SchedulingCluster;

const std::vector<std::string> kTypes = {"222", "223", "230", "231", "232", "233"};

std::vector<ClusterPod> Burst(uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<size_t> type(0, kTypes.size() - 1);
  std::vector<ClusterPod> pods;
  for (int i = 0; i < 200; ++i) {
    ClusterPod pod;
    pod.name = "burst-" + std::to_string(i);
    pod.resource = std::string(kvgpu::kVgpuResourcePrefix) + kTypes[type(random)];
    pods.push_back(pod);
  }
  return pods;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  const uint32_t seeds = argc > 1 ? static_cast<uint32_t>(std::stoul(argv[1])) : 5;
  std::printf(
      "| seed | extender | bound | running | failed (UnexpectedAdmissionError) | pending |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    for (bool use_extender : {false, true}) {
      SchedulingCluster cluster(4, use_extender);
      if (!cluster.Settle()) std::fprintf(stderr, "nodes did not settle\n");
      cluster.Submit(Burst(seed));
      const size_t bound = cluster.ScheduleAndAdmit();
      std::printf("| %u | %s | %zu | %zu | %zu | %zu |\n", seed, use_extender ? "yes" : "no", bound,
                  cluster.Count(ClusterPod::State::kRunning),
                  cluster.Count(ClusterPod::State::kFailed),
                  cluster.Count(ClusterPod::State::kPending));
      std::fflush(stdout);
    }
  }
  return 0;
}
