// The demo proper: a simulated two-T4 node (kvgpu-sim), the real kvgpu-device-plugin and
// kvgpu-webhook as child processes, and the kubelet and API server fakes playing their part,
// narrated step by step: a pod through the device plugin front end, then the same node on DRA.
// Each step checks what it shows; the first failed check ends the demo.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fakes/cluster/daemons.h"
#include "fakes/cluster/fake_node.h"
#include "fakes/cluster/sim_mount.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "kube/api_client.h"

namespace kvgpu::demo {

// Shared by the acts (node_demo.cpp, dra_act.cpp).
inline constexpr const char* kNode = "demo-node";
inline constexpr const char* kNamespace = "default";
// T4-1Q: 16 per T4, so 32 on the node; every other type is withdrawn from a GPU it locks.
inline constexpr const char* kType = "nvidia-230";
inline constexpr int kPerGpu = 16;

struct Programs {
  std::filesystem::path sim;
  std::filesystem::path device_plugin;
  std::filesystem::path webhook;
  std::filesystem::path vgpuctl;
  std::filesystem::path validator_standins;  // tests/validator/data: nvidia-smi, vectorAdd
};

class NodeDemo {
 public:
  explicit NodeDemo(Programs programs);
  ~NodeDemo();
  NodeDemo(const NodeDemo&) = delete;
  NodeDemo& operator=(const NodeDemo&) = delete;

  // 0 when every step showed what it should, 1 otherwise (the reason on stderr).
  int Run();
  // From the signal thread (Ctrl-C): the child processes get SIGTERM, so whatever step runs
  // fails at once, and Run() tears down and returns 130. Touches nothing Run() owns.
  void Interrupt();

 private:
  // Stops the daemons, unmounts the simulator and removes the scratch directory; runs once.
  void Teardown();
  void Started(size_t child, pid_t pid);
  void Start();
  void ShowCapacity();
  void AdmitPod();
  void AllocatePod();
  void DeletePod();
  void ValidateNode();
  // The DRA act (dra_act.cpp): the daemon restarted with every GPU on DRA, its slices, a claim
  // allocated from them, prepared and unprepared through kubelet's DRA calls.
  void SwitchToDra();
  void AllocateClaim();
  void PrepareClaim();
  void UnprepareClaim();
  std::string Vgpuctl(const std::string& command);

  Programs programs_;
  std::filesystem::path dir_;
  std::unique_ptr<testing::SimMount> sim_;
  std::unique_ptr<testing::FakeNode> node_;
  std::unique_ptr<testing::PluginProcess> plugin_;
  std::unique_ptr<testing::WebhookProcess> webhook_;
  std::once_flag teardown_once_;
  bool keep_dir_ = false;
  std::atomic<bool> interrupted_{false};
  std::array<std::atomic<pid_t>, 3> children_{};  // sim, plugin, webhook, as they start

  // Carried between steps.
  std::string resource_;
  nlohmann::json admitted_pod_;
  std::string device_id_;
  std::string gpu_;
  std::vector<testing::NodeResource> initial_;
  std::unique_ptr<testing::DraTestKubelet> dra_kubelet_;
  std::unique_ptr<kube::ApiClient> api_client_;
  nlohmann::json claim_;       // as the API server stores it once allocated
  std::string dra_device_;     // the allocated device's name
  std::string mdev_uuid_;      // the vGPU NodePrepareResources made for it
  std::string metadata_spec_;  // the CDI spec mounting the claim's device metadata
};

}  // namespace kvgpu::demo
