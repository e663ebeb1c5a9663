// kvgpu-monitoring-workload: the real daemons on two simulated nodes, kept running for a
// Prometheus to scrape (tests/monitoring/test_dashboard.py), with a scripted workload driven a
// phase at a time from stdin.
//
//   node-a  kvgpu-sim t4x2: GPU 0000:3b:00.0 on the device plugin, 0000:af:00.0 on DRA; the
//           licensing files published; the node kvgpu-scheduler-extender reads
//   node-b  kvgpu-sim t4x2, every GPU on the device plugin; no licence source; kvgpu-validator
//           validates it (its probe pod admitted through the plugin, the guest played with the
//           stand-ins of tests/validator/data)
//   kvgpu-webhook answers the AdmissionReviews of the workload's pods
//
// Protocol (one line each way): it prints `ready {"targets": [...]}` once every daemon serves
// /metrics (and the validator has run); then each `phase` line read runs one round of the
// workload and prints `done {...}` with what the cluster holds now; `stop` or EOF tears everything
// down. Anything that does not go as kubelet, the scheduler or the API server would want prints
// `error <why>` and exits 1 (the scratch directory is kept for its logs).
//
// One round: two pods through the webhook (one Kata pod allowed and mutated, one without
// runtimeClassName denied), the extender's filter and prioritize for the Kata pod, that pod run on
// node-a (tencent.com/vgpu-230), a pod run on node-b (tencent.com/vgpu-222), one Allocate made to
// fail on node-a (the simulator refuses the next vGPU creation with ENOSPC), and one ResourceClaim
// allocated from node-a's slices and prepared by kubelet's DRA side.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "demo/validator_step.h"
#include "fakes/cluster/daemons.h"
#include "fakes/cluster/fake_node.h"
#include "fakes/cluster/sim_mount.h"
#include "fakes/common/child_process.h"
#include "fakes/common/test_pki.h"
#include "fakes/dra_allocator/allocator.h"
#include "fakes/dra_allocator/claim_api.h"
#include "fakes/dra_allocator/pools.h"
#include "fakes/kubelet/dra_test_kubelet.h"
#include "kube/api_client.h"
#include "sim/host_software.h"
#include "sim/kernel_model.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using kvgpu::testing::ChildProcess;
using kvgpu::testing::FakeNode;
using kvgpu::testing::PluginProcess;
using kvgpu::testing::SimMount;
using kvgpu::testing::WaitFor;

constexpr const char* kDriver = "vgpu.tencent.com";
constexpr const char* kPodResource = "tencent.com/vgpu-230";    // GRID T4-1Q, node-a
constexpr const char* kOtherResource = "tencent.com/vgpu-222";  // GRID T4-1B, node-b
constexpr const char* kDraGpu = "0000:af:00.0";
constexpr const char* kClassName = "vgpu-230.vgpu.tencent.com";
constexpr const char* kClassSelector =
    R"(device.driver == "vgpu.tencent.com" && device.attributes["vgpu.tencent.com"].type == "nvidia-230")";
constexpr size_t kT4Resources = 12;  // the T4's vGPU types

struct Failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void Check(bool ok, const std::string& what, const std::string& detail = "") {
  if (!ok) throw Failed(what + (detail.empty() ? "" : ": " + detail));
}

// A port nothing listens on now (the kernel's pick), for a daemon's --metrics-addr.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw Failed("no free loopback port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// GET /metrics: the text, or nullopt while the endpoint does not answer 200. A program that has
// counted nothing yet answers an empty text (the extender before its first call).
std::optional<std::string> Metrics(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  auto result = client.Get("/metrics");
  if (!result || result->status != 200) return std::nullopt;
  return result->body;
}

std::string Rfc3339Now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

json KataPod(const std::string& name, const std::string& resource, bool kata = true) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", name + "-uid"}}},
              {"spec",
               {{"containers",
                 {{{"name", "cuda"},
                   {"image", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"},
                   {"resources", {{"limits", {{resource, "1"}}}}}}}}}}};
  if (kata) pod["spec"]["runtimeClassName"] = "kata-vgpu";
  return pod;
}

struct Node {
  explicit Node(std::string node_name) : name(std::move(node_name)) {}
  std::string name;
  std::unique_ptr<SimMount> sim;
  std::unique_ptr<FakeNode> node;
  std::unique_ptr<PluginProcess> plugin;
  int metrics_port = 0;
};

class Workload {
 public:
  explicit Workload(fs::path dir) : dir_(std::move(dir)) {}
  ~Workload() { Teardown(); }

  json Start();
  json Phase();
  void Teardown();

 private:
  void StartNode(Node& n, const std::string& config, const std::vector<std::string>& extra);
  void StartExtender();
  void RunValidator();
  void ExtenderCall(const std::string& verb, const json& pod);
  void ClaimOne(const std::string& name);
  json Facts() const;

  fs::path dir_;
  Node a_{"node-a"};
  Node b_{"node-b"};
  std::unique_ptr<kvgpu::testing::WebhookProcess> webhook_;
  int webhook_metrics_ = 0;
  kvgpu::testing::TestAuthority extender_ca_{"kvgpu-extender-ca"};
  std::unique_ptr<ChildProcess> extender_;
  int extender_port_ = 0;
  int extender_metrics_ = 0;
  std::unique_ptr<ChildProcess> validator_;
  int validator_metrics_ = 0;
  std::unique_ptr<kvgpu::testing::DraTestKubelet> dra_kubelet_;
  std::unique_ptr<kvgpu::kube::ApiClient> api_a_;
  int phase_ = 0;
  int running_a_ = 0, running_b_ = 0, claims_ = 0, failures_ = 0, admitted_ = 0, denied_ = 0;
  int extender_calls_ = 0;
  bool torn_down_ = false;
};

// The Node as kubelet and kube-apiserver keep it (uid, the vgpu-mode label, allocatable).
void PublishNode(Node& n) {
  kvgpu::demo::PublishNode(*n.node, n.name);
}

void Workload::StartNode(Node& n, const std::string& config,
                         const std::vector<std::string>& extra) {
  const fs::path base = dir_ / n.name;
  fs::create_directories(base);
  n.sim = std::make_unique<SimMount>(KVGPU_SIM_PATH, "t4x2", base);
  if (auto failed = n.sim->Mount())
    throw Failed("kvgpu-sim to mount for " + n.name + ": " + *failed);
  n.node = std::make_unique<FakeNode>(base / "kubelet", n.name);
  const auto started = n.node->Start();
  Check(started.ok(), "the kubelet and API server of " + n.name + " to start", started.error);
  PublishNode(n);  // before the plugin: its ResourceSlices name the Node's uid
  n.plugin = std::make_unique<PluginProcess>(KVGPU_DEVICE_PLUGIN_PATH, n.sim->mount(),
                                             base / "plugin", *n.node, config);
  n.metrics_port = FreePort();
  std::vector<std::string> argv = n.plugin->process().argv();
  argv.insert(argv.end(), {"--metrics-addr", "127.0.0.1:" + std::to_string(n.metrics_port)});
  argv.insert(argv.end(), extra.begin(), extra.end());
  n.plugin->process().set_argv(argv);
  if (auto failed = n.plugin->Start(*n.node, kT4Resources)) {
    throw Failed("kvgpu-device-plugin on " + n.name + " to register: " + *failed);
  }
  PublishNode(n);  // now with the plugin's resources allocatable (the validator reads them)
  Check(WaitFor([&] { return Metrics(n.metrics_port).has_value(); }),
        "the device plugin on " + n.name + " to serve /metrics", n.plugin->process().Log());
}

void Workload::StartExtender() {
  const fs::path base = dir_ / "extender";
  fs::create_directories(base);
  const auto serving = extender_ca_.Issue("kvgpu-scheduler-extender.kata-vgpu.svc", true);
  std::ofstream(base / "ca.crt") << extender_ca_.cert_pem();
  std::ofstream(base / "tls.crt") << serving.cert_pem;
  std::ofstream(base / "tls.key") << serving.key_pem;
  // Its own directory: the kubeconfig's CA (the API server's) is written beside it as ca.crt.
  fs::create_directories(base / "kube");
  a_.node->WriteKubeconfig(base / "kube" / "kubeconfig");
  extender_port_ = FreePort();
  extender_metrics_ = FreePort();
  extender_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{KVGPU_EXTENDER_PATH, "--listen",
                               "127.0.0.1:" + std::to_string(extender_port_), "--tls-cert-file",
                               (base / "tls.crt").string(), "--tls-key-file",
                               (base / "tls.key").string(), "--metrics-addr",
                               "127.0.0.1:" + std::to_string(extender_metrics_), "--kubeconfig",
                               (base / "kube" / "kubeconfig").string()},
      base / "extender.log");
  Check(extender_->Start(), "kvgpu-scheduler-extender to start", extender_->error());
  Check(WaitFor([&] { return !extender_->Running() || Metrics(extender_metrics_).has_value(); }) &&
            extender_->Running(),
        "kvgpu-scheduler-extender to serve /metrics", extender_->Log());
}

// kvgpu-validator, the program, once on node-b: it serves its result on /metrics afterwards.
void Workload::RunValidator() {
  const fs::path base = dir_ / "validator";
  auto profile = kvgpu::sim::ProfileByName("t4x2");
  Check(profile.ok(), "the t4x2 profile");
  auto model = kvgpu::sim::KernelModel::Create(base / "host", *profile);
  Check(model.ok(), "the doctor's node tree", model.ok() ? "" : model.status().ToString());
  Check(kvgpu::sim::LayOutHostSoftware((*model)->root()).ok(), "the installed software laid out");
  b_.node->WriteKubeconfig(base / "kubeconfig");
  validator_metrics_ = FreePort();
  validator_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{KVGPU_VALIDATOR_PATH,
                               "--node-name",
                               b_.name,
                               "--kubeconfig",
                               (base / "kubeconfig").string(),
                               "--vgpuctl",
                               KVGPU_VGPUCTL_PATH,
                               "--host-root",
                               (*model)->root().string(),
                               "--sysfs-root",
                               b_.sim->mount().string(),
                               "--state-file",
                               b_.plugin->state_file().string(),
                               "--nvidia-smi",
                               "nvidia-smi",
                               "--cuda-sample",
                               "vectorAdd",
                               "--licence-interval",
                               "200ms",
                               "--poll-interval",
                               "100ms",
                               "--interval",
                               "1440m",
                               "--metrics-addr",
                               "127.0.0.1:" + std::to_string(validator_metrics_)},
      base / "validator.log");
  {
    kvgpu::demo::ProbeKubelet kubelet(*b_.node, KVGPU_VALIDATOR_STANDINS);
    Check(validator_->Start(), "kvgpu-validator to start", validator_->error());
    // Its probe pod waits out the plugin's 5 s settle time before its vGPU goes: the deadline
    // gets that on top.
    Check(
        WaitFor(
            [&] {
              return !validator_->Running() ||
                     Metrics(validator_metrics_).value_or("").find("kvgpu_validator_runs_total") !=
                         std::string::npos;
            },
            kvgpu::testing::kEventDeadline + 10s) &&
            validator_->Running(),
        "kvgpu-validator to run once and serve /metrics", validator_->Log());
  }
  Check(Metrics(validator_metrics_).value_or("").find("\nkvgpu_validator_validated 1") !=
            std::string::npos,
        "kvgpu-validator to validate node-b", validator_->Log());
}

json Workload::Start() {
  const std::string common =
      "resourceDomain: tencent.com\n"
      "udevEvents: false\n"
      "rescanInterval: 1s\n"
      "lifecycle:\n"
      "  gracePeriod: 0s\n"
      "  pollInterval: 200ms\n";
  const fs::path licence = dir_ / "licensing-source";
  fs::create_directories(licence);
  std::ofstream(licence / "gridd.conf") << "ServerPort=443\nFeatureType=1\n";
  std::ofstream(licence / "client_configuration_token.tok") << "a-token\n";
  fs::create_directories(dir_ / "cdi-a");
  StartNode(a_,
            common + "cdi:\n  dir: " + (dir_ / "cdi-a").string() + "\ndra:\n  gpus: [\"" + kDraGpu +
                "\"]\n",
            {"--licensing-source", licence.string(), "--licensing-dir",
             (dir_ / "node-a" / "licensing").string()});
  fs::create_directories(dir_ / "cdi-b");
  StartNode(b_, common + "cdi:\n  dir: " + (dir_ / "cdi-b").string() + "\n", {});

  webhook_ = std::make_unique<kvgpu::testing::WebhookProcess>(KVGPU_WEBHOOK_PATH, dir_ / "webhook");
  webhook_metrics_ = FreePort();
  webhook_->set_extra_args({"--metrics-addr", "127.0.0.1:" + std::to_string(webhook_metrics_)});
  if (auto failed = webhook_->Start()) throw Failed("kvgpu-webhook to serve: " + *failed);

  StartExtender();

  dra_kubelet_ = std::make_unique<kvgpu::testing::DraTestKubelet>(a_.node->kubelet_dir());
  const auto registration = dra_kubelet_->Register(kDriver);
  Check(registration.has_value(), "kubelet to register the DRA plugin on node-a",
        a_.plugin->process().Log());
  auto client = kvgpu::kube::ApiClient::Create(a_.node->api().ClientConfig());
  Check(client.ok(), "a client of node-a's API server");
  api_a_ = std::move(client).value();

  RunValidator();

  auto target = [](const std::string& job, const std::string& node, int port) {
    json t = {{"job", job}, {"address", "127.0.0.1:" + std::to_string(port)}};
    if (!node.empty()) t["node"] = node;
    return t;
  };
  return {{"targets",
           {target("kata-vgpu/kvgpu-device-plugin", a_.name, a_.metrics_port),
            target("kata-vgpu/kvgpu-device-plugin", b_.name, b_.metrics_port),
            target("kata-vgpu/kvgpu-webhook", "", webhook_metrics_),
            target("kata-vgpu/kvgpu-scheduler-extender", "", extender_metrics_),
            target("kata-vgpu/kvgpu-validator", b_.name, validator_metrics_)}},
          {"dir", dir_.string()}};
}

void Workload::ExtenderCall(const std::string& verb, const json& pod) {
  httplib::SSLClient client("127.0.0.1", extender_port_);
  client.set_ca_cert_path((dir_ / "extender" / "ca.crt").string());
  client.enable_server_certificate_verification(true);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(10, 0);
  const json args = {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", {a_.name, b_.name}}};
  auto result = client.Post("/" + verb, args.dump(), "application/json");
  Check(result && result->status == 200, "the extender to answer " + verb,
        result ? result->body : httplib::to_string(result.error()));
  ++extender_calls_;
}

// A claim for one T4-1Q vGPU: allocated from node-a's published slices (kube-scheduler's part),
// confirmed by the daemon (binding conditions), prepared by kubelet.
void Workload::ClaimOne(const std::string& name) {
  kvgpu::testing::dra::HttpClaimApi claims(*api_a_);
  const json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", name}, {"namespace", "default"}}},
      {"spec",
       {{"devices",
         {{"requests", {{{"name", "gpu"}, {"exactly", {{"deviceClassName", kClassName}}}}}}}}}}};
  auto created = claims.Create(claim);
  Check(created.ok(), "claim " + name + " to be created");
  const json class_object = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "DeviceClass"},
      {"metadata", {{"name", kClassName}}},
      {"spec", {{"selectors", {{{"cel", {{"expression", kClassSelector}}}}}}}}};
  auto device_class = kvgpu::testing::dra::ParseDeviceClass(class_object);
  Check(device_class.ok(), "the DeviceClass to parse");
  std::optional<std::vector<kvgpu::testing::dra::DeviceResult>> fit;
  // The slices come a pass after the daemon's start and after every change.
  const bool allocated = WaitFor([&] {
    auto slices = claims.ListSlices();
    auto listed = claims.List();
    if (!slices.ok() || !listed.ok()) return false;
    auto pools = kvgpu::testing::dra::GatherPools(slices.value(), a_.name);
    if (!pools.ok() || pools->empty()) return false;
    auto result =
        kvgpu::testing::dra::Allocate(created.value(), {device_class.value()}, pools.value(),
                                      kvgpu::testing::dra::AllocatedDevices(listed.value()));
    if (!result.ok() || !result->has_value()) return false;
    fit = **result;
    return true;
  });
  Check(allocated && fit && fit->size() == 1, "claim " + name + " to fit on node-a's slices");
  const json reserved_for =
      json::array({{{"resource", "pods"}, {"name", name + "-pod"}, {"uid", name + "-pod-uid"}}});
  auto written = claims.WriteStatus(
      "default", name, created->at("metadata").value("resourceVersion", ""),
      kvgpu::testing::dra::AllocationJson(*fit, a_.name, Rfc3339Now()), reserved_for);
  Check(written.ok(), "claim " + name + "'s allocation to be written");
  const std::string device = fit->front().id.device;
  if (!fit->front().binding_conditions.empty()) {
    const std::string condition = fit->front().binding_conditions.front();
    Check(WaitFor([&] {
            const json stored = a_.node->api().resource_claim("default", name);
            for (const auto& d : stored["status"].value("devices", json::array())) {
              for (const auto& c : d.value("conditions", json::array())) {
                if (d.value("device", "") == device && c.value("type", "") == condition &&
                    c.value("status", "") == "True") {
                  return true;
                }
              }
            }
            return false;
          }),
          "the daemon to confirm " + condition + " on claim " + name, a_.plugin->process().Log());
  }
  const std::string uid = written->at("metadata").value("uid", "");
  std::string rpc_error;
  auto answers = dra_kubelet_->Prepare({{"default", uid, name}}, &rpc_error);
  Check(rpc_error.empty() && answers[uid].error.empty() && answers[uid].devices.size() == 1,
        "NodePrepareResources to prepare claim " + name, rpc_error + answers[uid].error);
  ++claims_;
}

json Workload::Phase() {
  ++phase_;
  const std::string n = std::to_string(phase_);
  // Admission: a Kata pod is mutated, the same pod without Kata is denied.
  const json pod = KataPod("train-" + n, kPodResource);
  auto mutated = webhook_->client().Review(pod, "review-" + n);
  Check(mutated.ok() && mutated.allowed && !mutated.patch.is_null(),
        "the webhook to mutate the Kata pod", mutated.error + mutated.message);
  ++admitted_;
  auto denied = webhook_->client().Review(KataPod("plain-" + n, kPodResource, false), "deny-" + n);
  Check(denied.ok() && !denied.allowed, "the webhook to deny the pod without Kata", denied.error);
  ++denied_;
  // kube-scheduler asks the extender where the pod fits.
  ExtenderCall("filter", pod);
  ExtenderCall("prioritize", pod);
  // kubelet runs it on node-a, and another type's pod on node-b.
  auto ran = a_.node->RunPod("default", "train-" + n, {{kPodResource, 1}});
  Check(ran.ok(), "pod train-" + n + " to run on node-a", ran.error);
  ++running_a_;
  ran = b_.node->RunPod("default", "infer-" + n, {{kOtherResource, 1}});
  Check(ran.ok(), "pod infer-" + n + " to run on node-b", ran.error);
  ++running_b_;
  // The kernel refuses the next vGPU creation: kubelet's Allocate fails, the pod fails.
  auto fault = a_.sim->Control("fault write create ENOSPC 1");
  Check(!fault, "the simulator to take the fault", fault.value_or(""));
  ran = a_.node->RunPod("default", "unlucky-" + n, {{kPodResource, 1}});
  Check(!ran.ok(), "pod unlucky-" + n + "'s Allocate to fail on the injected ENOSPC");
  ++failures_;
  (void)a_.sim->Control("clear-faults");
  ClaimOne("claim-" + n);
  return Facts();
}

json Workload::Facts() const {
  return {{"phase", phase_},
          {"allocated",
           {{a_.name, {{kPodResource, running_a_}}}, {b_.name, {{kOtherResource, running_b_}}}}},
          {"prepared_claims", {{a_.name, claims_}}},
          {"allocation_failures", {{a_.name, failures_}}},
          {"webhook", {{"mutated", admitted_}, {"denied", denied_}}},
          {"extender_calls", extender_calls_},
          {"gpus",
           {{a_.name, json::array({"0000:3b:00.0"})},
            {b_.name, json::array({"0000:3b:00.0", "0000:af:00.0"})}}},
          {"licensed_nodes", json::array({a_.name})},
          {"validated", {{b_.name, 1}}}};
}

void Workload::Teardown() {
  if (torn_down_) return;
  torn_down_ = true;
  dra_kubelet_.reset();
  if (validator_) validator_->Stop();
  if (extender_) extender_->Stop();
  if (webhook_) webhook_->process().Stop();
  for (Node* n : {&a_, &b_}) {
    if (n->plugin) n->plugin->process().Stop();
  }
  for (Node* n : {&a_, &b_}) {
    n->node.reset();
    if (n->sim) n->sim->Unmount();
  }
}

// SIGTERM, SIGINT or SIGHUP (the test's harness asks for SIGTERM should it die: PR_SET_PDEATHSIG)
// end the command loop: the read of stdin is interrupted (no SA_RESTART), a round in progress
// finishes, and the daemons and mounts are torn down as after `stop`.
volatile sig_atomic_t g_stop = 0;

void OnStopSignal(int) {
  g_stop = 1;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction stop {};
  stop.sa_handler = OnStopSignal;
  ::sigemptyset(&stop.sa_mask);
  stop.sa_flags = 0;  // no SA_RESTART: a blocked read returns
  for (int signal_number : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(signal_number, &stop, nullptr);
  if (argc != 2) {
    std::cerr << "usage: kvgpu-monitoring-workload SCRATCH_DIR (empty or absent)\n";
    return 2;
  }
  const fs::path dir = fs::absolute(argv[1]);
  fs::create_directories(dir);
  Workload workload(dir);
  try {
    const json started = workload.Start();
    std::cout << "ready " << started.dump() << std::endl;
    for (std::string line; !g_stop && std::getline(std::cin, line);) {
      if (line == "stop" || g_stop) break;
      Check(line == "phase", "a command: phase or stop", line);
      const json facts = workload.Phase();
      std::cout << "done " << facts.dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::cout << "error " << e.what() << std::endl;
    workload.Teardown();
    return 1;
  }
  workload.Teardown();
  return 0;
}
