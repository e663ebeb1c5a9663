// What the scheduling-loop tests share: bursts of T4 pods, the failures to print, the pass of the
// queue until nothing more binds, and the check that every pod left Pending fits nowhere.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "fakes/scheduling/scheduling_cluster.h"

namespace kvgpu::testing {

// Six T4 types: 16, 8, 16, 8, 4 and 2 per GPU.
inline const std::vector<std::string> kTypes = {"222", "223", "230", "231", "232", "233"};

inline std::vector<ClusterPod> Burst(std::mt19937& random, size_t size, const std::string& prefix,
                                     uint32_t max_count = 1) {
  std::vector<ClusterPod> pods;
  std::uniform_int_distribution<size_t> type(0, kTypes.size() - 1);
  std::uniform_int_distribution<uint32_t> count(1, max_count);
  for (size_t i = 0; i < size; ++i) {
    ClusterPod pod;
    pod.name = prefix + std::to_string(i);
    pod.resource = "tencent.com/vgpu-" + kTypes[type(random)];
    pod.count = count(random);
    pods.push_back(pod);
  }
  return pods;
}

inline std::string Failures(const SchedulingCluster& cluster) {
  std::string out;
  for (const ClusterPod& pod : cluster.Pods()) {
    if (pod.state == ClusterPod::State::kFailed) out += pod.name + ": " + pod.failure + "\n";
  }
  return out;
}

// Passes of the scheduling queue until one binds nothing, the nodes settled after each: pods
// whose bind was refused (another replica's bind took the room) are scheduled again.
inline void ScheduleUntilStable(SchedulingCluster& cluster) {
  for (int pass = 0; pass < 12; ++pass) {
    const size_t bound = cluster.ScheduleAndAdmit();
    ASSERT_TRUE(cluster.Settle());
    if (bound == 0) return;
  }
  FAIL() << "still binding pods after 12 passes";
}

// Every pod still Pending is one no kernel can take now.
inline void ExpectPendingFitNowhere(SchedulingCluster& cluster) {
  for (const ClusterPod& pod : cluster.Pods()) {
    if (pod.state != ClusterPod::State::kPending) continue;
    EXPECT_FALSE(cluster.FitsSomewhere(pod.resource, pod.count))
        << pod.name << " (" << pod.count << " x " << pod.resource
        << ") fits on some node but stayed Pending\n"
        << cluster.Explain(pod);
  }
}

}  // namespace kvgpu::testing
