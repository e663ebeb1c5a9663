// ResourceSlices as an allocator reads them (KEP-4381 structured parameters; KEP-4815
// partitionable devices), written from k8s.io/dynamic-resource-allocation structured/internal/
// {stable,incubating}/pools_*.go (kubernetes/kubernetes, 1.34-1.36):
// - a pool is (driver, pool name); only the slices of its highest generation count, older ones
//   are ignored;
// - a pool is complete when it holds resourceSliceCount slices of that generation; devices are
//   never allocated from an incomplete pool (allocator_incubating.go allocateOne: "We don't
//   allocate devices from invalid or incomplete pools");
// - a pool whose device names repeat is invalid (poolIsInvalid);
// - counter sets (sharedCounters, in their own slices since 1.35) belong to the pool; devices come
//   from the slices that target the node (spec.nodeName, or spec.allNodes).
// Node selectors and per-device node selection are not modelled: a slice using them is an error.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgpu::testing::dra {

struct CounterConsumption {
  std::string counter_set;
  std::map<std::string, int64_t> counters;
  std::vector<std::string> compatibility_groups;  // KEP-5963; empty: none declared
};

struct PoolDevice {
  std::string name;
  nlohmann::json device;  // as published, for selectors
  std::vector<CounterConsumption> consumes;
  std::vector<std::string> binding_conditions;
  std::vector<std::string> binding_failure_conditions;
};

struct Pool {
  std::string driver;
  std::string name;
  int64_t generation = 0;
  bool complete = false;
  bool invalid = false;
  std::string invalid_reason;
  std::map<std::string, std::map<std::string, int64_t>> counter_sets;  // set -> counter -> value
  std::vector<PoolDevice> devices;  // in slice name order, then device order
};

// The pools `node` can use, by (driver, pool name).
Result<std::vector<Pool>> GatherPools(const std::vector<nlohmann::json>& slices,
                                      const std::string& node);

}  // namespace kvgpu::testing::dra
