// The whole daemon on a simulated node, as the flow tests start it: sysfs is the kernel model's,
// kubelet's directory and the state record live in the node's temp dir, the node is "node-1".
#pragma once

#include "deviceplugin/daemon.h"
#include "fakes/common/sim_node.h"

namespace kvgpu::deviceplugin::testing {

inline DaemonOptions SimDaemonOptions(kvgpu::testing::SimNode& sim) {
  DaemonOptions options;
  options.args.sysfs_root = sim.model().root();
  options.args.kubelet_dir = sim.dir() / "kubelet";
  options.args.state_dir = sim.dir() / "state";
  options.args.node_name = "node-1";
  options.io = &sim.model();
  options.config.udev_events = false;  // the host's events are not the model's
  // DRA and cdi.enabled write CDI specs: the node's own directory, never the host's /var/run/cdi
  // (two tests writing one spec there at once broke each other's rename).
  options.config.cdi_dir = sim.dir() / "cdi";
  return options;
}

// Every GPU served through DRA, as the DRA flow tests and benchmarks start the daemon: no wait
// for a Node object's readiness, no scheduler-state publishing (the extender's, not DRA's).
inline DaemonOptions SimDraDaemonOptions(kvgpu::testing::SimNode& sim) {
  DaemonOptions options = SimDaemonOptions(sim);
  options.args.node_readiness_check = false;
  options.config.scheduler_state.publish = false;
  options.config.dra.all_gpus = true;
  return options;
}

}  // namespace kvgpu::deviceplugin::testing
