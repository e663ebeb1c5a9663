// kvgpu-validator's whole flow on a simulated node: kvgpu-sim's GPUs, the real device plugin and
// vgpuctl as separate processes, the fake API server holding the Node, and the test playing
// kubelet and the Kata guest: it admits the probe pod through the plugin (a real vGPU is made),
// runs the pod's script with the stand-in nvidia-smi and vectorAdd (data/README.md) and serves
// its output as the pod's log. A healthy node ends True; one fault per step ends False with that
// step named, and the probe pod's vGPU is gone after every run but the one that keeps it.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "fakes/cluster/daemons.h"
#include "fakes/cluster/fake_node.h"
#include "fakes/cluster/sim_mount.h"
#include "fakes/common/temp_dir.h"
#include "kube/node.h"
#include "scheduling/node_vgpu_state.h"
#include "sim/host_software.h"
#include "sim/kernel_model.h"
#include "validator/command.h"
#include "validator/record.h"
#include "validator/validator.h"

namespace kvgpu::validator {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::FakeNode;

constexpr const char* kNode = "node-1";
const std::string kData = KVGPU_VALIDATOR_TEST_DATA;
constexpr const char* kConfig =
    "udevEvents: false\nrescanInterval: 200ms\nlifecycle:\n  gracePeriod: 0s\n"
    "  pollInterval: 200ms\n";

// What the test's kubelet and guest do wrong, one at a time.
struct Faults {
  bool never_runs = false;    // the pod stays Pending (a Kata VM that never boots)
  bool unlicensed = false;    // nvidia-smi -q says Unlicensed
  bool sample_fails = false;  // vectorAdd fails its check
  bool vgpu_kept = false;     // QEMU keeps the vGPU: the plugin cannot remove it
  // The validator reads a copy of the plugin's state taken after Allocate with every ownerPod
  // gone, as before the plugin's next pass learns the pod from kubelet (and the vGPU kept).
  bool owner_unknown = false;
};

class ValidatorFlowTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (testing::FuseUnavailableReason()) return;
    dir_ = new testing::TempDir();
    sim_ = new testing::SimMount(KVGPU_SIM_PATH, "t4x2", dir_->path());
    if (auto failed = sim_->Mount()) FAIL() << *failed;
    node_ = new FakeNode(dir_->path() / "kubelet", kNode);
    ASSERT_TRUE(node_->Start().ok());
    // The Node exists before the plugin starts, so its vGPU state annotation lands on it.
    node_->api().SetNode({{"metadata", {{"name", kNode}}}});
    plugin_ = new testing::PluginProcess(KVGPU_DEVICE_PLUGIN_PATH, sim_->mount(),
                                         dir_->path() / "plugin", *node_, kConfig);
    if (auto failed = plugin_->Start(*node_, 12)) FAIL() << *failed;
    // The doctor's node: the same profile's kernel tree with the installed software beside it.
    auto profile = sim::ProfileByName("t4x2");
    auto model = sim::KernelModel::Create(dir_->path() / "host", *profile);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = model->release();
    ASSERT_TRUE(sim::LayOutHostSoftware(model_->root()).ok());
  }

  static void TearDownTestSuite() {
    delete plugin_;
    delete node_;
    delete sim_;
    delete model_;
    delete dir_;
  }

  void SetUp() override {
    if (auto reason = testing::FuseUnavailableReason()) GTEST_SKIP() << *reason;
    ASSERT_NE(plugin_, nullptr);
    PublishNode(true);
    node_->api().SetPodHooks(
        {[this](const nlohmann::json& pod) { Created(pod); },
         [this](const std::string& ns, const std::string& name) { Deleting(ns, name); }});
    auto client = kube::ApiClient::Create(ClientConfig());
    ASSERT_TRUE(client.ok());
    api_ = std::move(client.value());
  }

  void TearDown() override {
    std::vector<std::thread> pods;
    {
      std::lock_guard lock(mutex_);
      pods.swap(pods_);
    }
    for (auto& pod : pods) pod.join();
    node_->api().SetPodHooks({});
    if (HasFailure()) std::cerr << "--- plugin log ---\n" << plugin_->process().Log();
  }

  static kube::Config ClientConfig() {
    kube::Config config = node_->api().ClientConfig();
    return config;
  }

  // The Node as kubelet reports it: the plugin's resources as allocatable (none, or those of
  // `only` when given). The plugin's annotation stays, as kubelet's status updates leave it.
  void PublishNode(bool with_resources, const std::set<std::string>& only = {}) {
    nlohmann::json node = node_->api().node(kNode);
    node["metadata"]["labels"] = {{"kata-vgpu.io/vgpu-mode", "mdev"}};
    nlohmann::json allocatable = {{"cpu", "8"}};
    for (const auto& resource : node_->Resources()) {
      if (with_resources && (only.empty() || only.count(resource.name) != 0)) {
        allocatable[resource.name] = std::to_string(resource.allocatable);
      }
    }
    node["status"] = {{"allocatable", allocatable},
                      {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
    node_->api().SetNode(std::move(node));
  }

  // Until the plugin's vGPU state annotation (resource -> type) is on the Node.
  static bool WaitForStateAnnotation() {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto annotations =
          node_->api().node(kNode)["metadata"].value("annotations", nlohmann::json::object());
      if (annotations.contains(scheduling::kNodeStateAnnotation)) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  // kubelet and the Kata guest, on their own thread: the request that created the pod returns.
  void Created(const nlohmann::json& pod) {
    std::lock_guard lock(mutex_);
    pods_.emplace_back([this, pod] {
      if (faults_.never_runs) return;
      if (!node_->AdmitPod(pod).ok()) return;  // AdmitPod set it Failed
      const std::string ns = pod["metadata"]["namespace"];
      const std::string name = pod["metadata"]["name"];
      if (faults_.vgpu_kept || faults_.owner_unknown) {
        for (const auto& line : VgpuIds()) sim_->Control("busy " + line);
      }
      if (faults_.owner_unknown) WriteStateWithoutOwners();
      const auto& command = pod["spec"]["containers"][0]["command"];
      auto run = RunCommand(
          {"env", "PATH=" + kData + "/bin:/usr/bin:/bin",
           "KVGPU_FAKE_SMI_OUTPUT=" + kData +
               (faults_.unlicensed ? "/nvidia-smi-q-unlicensed.txt" : "/nvidia-smi-q-licensed.txt"),
           std::string("KVGPU_FAKE_CUDA=") + (faults_.sample_fails ? "fail" : "pass"), command[0],
           command[1], command[2]},
          10s);
      // The phase before the log: once the log is there the validator may delete the pod.
      node_->api().SetPhase(ns, name, "Succeeded");
      node_->api().SetPodLog(ns, name, run.ok() ? run->out : run.status().message());
    });
  }

  void Deleting(const std::string& ns, const std::string& name) {
    if (faults_.never_runs) {
      node_->api().MarkDeleting(ns, name);
      node_->api().DeletePod(ns, name);
      return;
    }
    node_->DeletePod(ns, name);
  }

  static std::filesystem::path StateWithoutOwners() { return dir_->path() / "state-view.json"; }

  // The plugin's state once it lists a vGPU, every ownerPod taken out.
  static void WriteStateWithoutOwners() {
    nlohmann::json state;
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    do {
      std::ifstream in(plugin_->state_file());
      state = nlohmann::json::parse(in, nullptr, false);
      if (state.is_object() && !state.value("vgpus", nlohmann::json::array()).empty()) break;
      std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < deadline);
    for (auto& entry : state["vgpus"]) {
      entry.erase("ownerPod");
      entry.erase("ownerUid");
    }
    std::ofstream(StateWithoutOwners()) << state.dump();
  }

  // Lets a kept vGPU go, so the plugin removes it and the node is clean for the next test.
  static void ReleaseKeptVgpus() {
    for (const auto& id : VgpuIds()) sim_->Control("release " + id);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!VgpuIds().empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(VgpuIds().empty());
  }

  static std::vector<std::string> VgpuIds() {
    std::vector<std::string> ids;
    std::istringstream lines(sim_->State());
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string kind, id;
      fields >> kind >> id;
      if (kind == "vgpu") ids.push_back(id);
    }
    return ids;
  }

  ValidatorOptions Options() const {
    ValidatorOptions options;
    options.node = kNode;
    options.vgpuctl = KVGPU_VGPUCTL_PATH;
    options.host_root = model_->root().string();
    options.sysfs_root = sim_->mount().string();
    options.state_file =
        (faults_.owner_unknown ? StateWithoutOwners() : plugin_->state_file()).string();
    options.guest.nvidia_smi = "nvidia-smi";
    options.guest.cuda_sample = "vectorAdd";
    options.guest.licence_interval = 100ms;
    // Bounds far above what the simulated node takes (attach ~0.1 s), except cleanup's: the
    // plugin keeps a vGPU at least until it has heard kubelet answer for its settle time (5 s,
    // deviceplugin/lifecycle/holder_tracker.h), which the suite's first run may still be within.
    options.timeouts = {10s, 5s, 2s, 5s, 500ms, 5s, 8s};
    options.poll = 50ms;
    return options;
  }

  // One run, recorded on the Node as the program does.
  Outcome Validate(std::optional<std::chrono::milliseconds> cleanup = std::nullopt) {
    ValidatorOptions options = Options();
    if (cleanup) options.timeouts.cleanup = *cleanup;
    Validator validator(*api_, options);
    Outcome outcome = validator.Run();
    EXPECT_TRUE(RecordOnNode(*api_, kNode, outcome).ok());
    return outcome;
  }

  void ExpectNode(const std::string& status, const std::string& reason) {
    auto node = kube::ParseNode(node_->api().node(kNode));
    ASSERT_TRUE(node.ok());
    const auto* condition = node->Condition(kConditionType);
    ASSERT_NE(condition, nullptr);
    EXPECT_EQ(condition->status, status);
    EXPECT_EQ(condition->reason, reason) << condition->message;
    EXPECT_EQ(node->labels.at(kValidatedLabel), status == "True" ? "true" : "false");
    EXPECT_NE(node->Condition("Ready"), nullptr);  // kubelet's conditions stay
    // The run's Event is the Node's latest; the device plugin beside it posts Events of the
    // validation pod on its own thread, which may land after it on a loaded machine.
    const auto events = node_->api().events();
    const auto on_node = std::find_if(events.rbegin(), events.rend(), [](const auto& event) {
      return event["involvedObject"]["kind"] == "Node";
    });
    ASSERT_NE(on_node, events.rend()) << "no Event on the Node";
    EXPECT_EQ((*on_node)["reason"],
              status == "True" ? "KataVgpuValidated" : "KataVgpuValidationFailed");
  }

  static testing::TempDir* dir_;
  static testing::SimMount* sim_;
  static FakeNode* node_;
  static testing::PluginProcess* plugin_;
  static sim::KernelModel* model_;
  std::unique_ptr<kube::ApiClient> api_;
  Faults faults_;
  std::mutex mutex_;
  std::vector<std::thread> pods_;
};

testing::TempDir* ValidatorFlowTest::dir_ = nullptr;
testing::SimMount* ValidatorFlowTest::sim_ = nullptr;
FakeNode* ValidatorFlowTest::node_ = nullptr;
testing::PluginProcess* ValidatorFlowTest::plugin_ = nullptr;
sim::KernelModel* ValidatorFlowTest::model_ = nullptr;

TEST_F(ValidatorFlowTest, AHealthySimulatedNodeIsValidatedAndItsVgpuIsGoneAfterwards) {
  const Outcome outcome = Validate();
  ASSERT_TRUE(outcome.validated()) << (outcome.failed() ? outcome.failed()->message : "");
  EXPECT_EQ(outcome.steps.size(), 7u);
  ExpectNode("True", "Validated");
  EXPECT_TRUE(VgpuIds().empty());
  // A 1 GiB type was asked for: the T4's smallest are 222, 225 and 230 (T4-1B, -1A, -1Q), and
  // among equals the first by name.
  EXPECT_NE(outcome.steps[1].message.find("tencent.com/vgpu-222 "), std::string::npos)
      << outcome.steps[1].message;
}

TEST_F(ValidatorFlowTest, TheProbeAsksForTheSmallestFramebufferNotTheFirstName) {
  // T4-8A (8 GiB), T4-2Q (2 GiB), T4-16Q (16 GiB): by name 228 would come first.
  ASSERT_TRUE(WaitForStateAnnotation());
  PublishNode(true, {"tencent.com/vgpu-228", "tencent.com/vgpu-231", "tencent.com/vgpu-234"});
  const Outcome outcome = Validate();
  ASSERT_TRUE(outcome.validated()) << (outcome.failed() ? outcome.failed()->message : "");
  EXPECT_NE(outcome.steps[1].message.find("tencent.com/vgpu-231 "), std::string::npos)
      << outcome.steps[1].message;
}

TEST_F(ValidatorFlowTest, ADoctorFindingFailsTheDoctorStepAndMakesNoPod) {
  const fs::path module = model_->root() / "sys/module/vfio_pci";
  fs::rename(module, fs::path(module.string() + ".aside"));
  const Outcome outcome = Validate();
  fs::rename(fs::path(module.string() + ".aside"), module);
  ASSERT_NE(outcome.failed(), nullptr);
  EXPECT_EQ(outcome.failed()->step, Step::kDoctor);
  EXPECT_TRUE(outcome.pod.empty());
  ExpectNode("False", "Doctor");
}

TEST_F(ValidatorFlowTest, NoAllocatableVgpuFailsSchedule) {
  PublishNode(false);
  const Outcome outcome = Validate();
  ASSERT_NE(outcome.failed(), nullptr);
  EXPECT_EQ(outcome.failed()->step, Step::kSchedule);
  ExpectNode("False", "Schedule");
}

TEST_F(ValidatorFlowTest, APodThatNeverRunsFailsAttachAndIsStillDeleted) {
  faults_.never_runs = true;
  const Outcome outcome = Validate();
  ASSERT_NE(outcome.failed(), nullptr);
  EXPECT_EQ(outcome.failed()->step, Step::kAttach);
  EXPECT_EQ(outcome.steps.back().step, Step::kCleanup);
  EXPECT_TRUE(outcome.steps.back().ok);
  ExpectNode("False", "Attach");
}

TEST_F(ValidatorFlowTest, AnUnlicensedGuestFailsLicence) {
  faults_.unlicensed = true;
  const Outcome outcome = Validate();
  ASSERT_NE(outcome.failed(), nullptr);
  EXPECT_EQ(outcome.failed()->step, Step::kLicence);
  EXPECT_NE(outcome.failed()->message.find("Unlicensed"), std::string::npos);
  ExpectNode("False", "Licence");
  EXPECT_TRUE(VgpuIds().empty());
}

TEST_F(ValidatorFlowTest, AFailingSampleFailsCuda) {
  faults_.sample_fails = true;
  const Outcome outcome = Validate();
  ASSERT_NE(outcome.failed(), nullptr);
  EXPECT_EQ(outcome.failed()->step, Step::kCuda);
  ExpectNode("False", "Cuda");
}

TEST_F(ValidatorFlowTest, AVgpuLeftBehindFailsCleanup) {
  faults_.vgpu_kept = true;
  // The run fails at the cleanup bound, so a short one (the simulated plugin answers in ms).
  const Outcome outcome = Validate(1s);
  ASSERT_NE(outcome.failed(), nullptr);
  EXPECT_EQ(outcome.failed()->step, Step::kCleanup) << outcome.failed()->message;
  EXPECT_NE(outcome.failed()->message.find("vGPU"), std::string::npos) << outcome.failed()->message;
  ExpectNode("False", "Cleanup");
  ReleaseKeptVgpus();
}

TEST_F(ValidatorFlowTest, AVgpuNotYetAttributedToAnyPodStillFailsCleanup) {
  // The plugin's state says nothing of whose the new vGPU is; it stays on the node. Without
  // counting it the run would pass with "the plugin never attributed a vGPU to it".
  faults_.owner_unknown = true;
  const Outcome outcome = Validate(1s);
  ASSERT_NE(outcome.failed(), nullptr);
  EXPECT_EQ(outcome.failed()->step, Step::kCleanup) << outcome.failed()->message;
  EXPECT_NE(outcome.failed()->message.find("attributed to no pod yet"), std::string::npos)
      << outcome.failed()->message;
  ExpectNode("False", "Cleanup");
  ReleaseKeptVgpus();
}

}  // namespace
}  // namespace kvgpu::validator
