// A node for crash tests: kvgpu-sim (FUSE) serving a t4x2 under a temp dir, kubelet's three
// faces played in this process (Registration + device plugin calls, PodResources v1, the
// device-manager checkpoint), and the real kvgpu-device-plugin as a child process that a test
// may kill -9, arm with failpoints and start again. No API server: kubelet's word alone decides.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fakes/cluster/sim_mount.h"
#include "fakes/common/child_process.h"
#include "fakes/common/temp_dir.h"
#include "fakes/kubelet/fake_kubelet.h"
#include "fakes/podresources/checkpoint_writer.h"
#include "fakes/podresources/fake_podresources.h"

namespace kvgpu::testing {

inline constexpr const char* kGpu0 = "0000:3b:00.0";
inline constexpr const char* kGpu1 = "0000:af:00.0";
inline constexpr const char* kT4_1B = "tencent.com/vgpu-222";  // GRID T4-1B, 16 per GPU

// One vGPU as <mount>/sim/state lists it.
struct SimVgpu {
  std::string uuid;
  std::string parent;
  std::string type;
  bool busy = false;
};

// A pod kubelet runs: one container "main" holding one device of kT4_1B.
struct CrashPod {
  std::string uid;
  std::string name;
  std::string device_id;
  std::string vgpu;            // the UUID from the plugin's answer
  std::string alloc_response;  // the ContainerAllocateResponse, serialized, for the checkpoint
};

class CrashNode {
 public:
  // Mounts the simulator and starts kubelet's fakes; the reason when it cannot.
  std::optional<std::string> Start();
  ~CrashNode();

  // kvgpu-device-plugin with `failpoints` (KVGPU_FAILPOINTS) armed; waits until it registered
  // every resource anew and streams their lists. The reason (with the log) when it does not.
  std::optional<std::string> StartPlugin(const std::string& failpoints = "");
  ChildProcess& plugin() { return *plugin_; }
  // Exit status of the plugin once it ended by itself within `timeout`; nullopt while it runs.
  std::optional<int> WaitPluginExit(std::chrono::milliseconds timeout);

  // kubelet admits a pod: Allocate of a healthy device of kT4_1B on `gpu`; when it succeeds the
  // pod goes to PodResources and the checkpoint (with the answer, as kubelet keeps it). The
  // Allocate's gRPC status message on failure.
  std::optional<std::string> RunPod(const std::string& name, const std::string& gpu, CrashPod* pod);
  // kubelet stops the pod: gone from PodResources; the checkpoint keeps its entry.
  void DeletePod(const std::string& name);
  // kubelet restarts: both sockets go away (the plugin's too) and come back; PodResources lists
  // nothing for `empty_for` (kubelet re-reading its checkpoint), then the running pods again.
  bool RestartKubelet(std::chrono::milliseconds empty_for);

  // A vGPU made through sysfs directly, as an operator or another tool would (not ours).
  std::optional<std::string> CreateForeign(const std::string& gpu, const std::string& type,
                                           std::string* uuid);
  std::vector<SimVgpu> Vgpus() const;
  std::set<std::string> VgpuUuids() const;
  // Waits until the simulator shows exactly `uuids`.
  bool WaitForVgpus(const std::set<std::string>& uuids, std::chrono::milliseconds timeout) const;
  // Resource -> advertised device IDs (health aside), from kubelet's newest lists.
  std::map<std::string, std::set<std::string>> Advertised() const;

  SimMount& sim() { return *sim_; }
  FakeKubelet& kubelet() { return *kubelet_; }
  CheckpointWriter& checkpoint() { return *checkpoint_; }
  std::filesystem::path state_dir() const { return dir_.path() / "state"; }
  std::filesystem::path state_file() const { return state_dir() / "device-plugin-state.json"; }
  // The plugin's log and the simulator's, for a failed test.
  std::string Logs() const;

 private:
  void Publish();

  TempDir dir_;
  std::unique_ptr<SimMount> sim_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<FakePodResources> podresources_;
  std::unique_ptr<CheckpointWriter> checkpoint_;
  std::unique_ptr<ChildProcess> plugin_;
  std::vector<CrashPod> running_;
  std::vector<CheckpointRecord> checkpoint_records_;  // never shrinks, as kubelet's file
};

}  // namespace kvgpu::testing
