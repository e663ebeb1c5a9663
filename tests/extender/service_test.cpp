// The extender process as kube-scheduler meets it: HTTPS with the configured certificate, not
// ready until the node and pod watches follow the API server, then filter and bind answering over
// the wire, each call counted in the metrics; with a client CA the verbs refuse callers without
// a certificate; a start without usable TLS files fails with the reason.
#include "extender/service.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "extender/coverage.h"
#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/common/eventually.h"
#include "fakes/common/http_request.h"
#include "fakes/common/temp_dir.h"
#include "fakes/common/test_pki.h"
#include "tests/extender/node_states.h"

namespace kvgpu::extender {
namespace {

using namespace kvgpu::extender::testing;  // NOLINT(google-build-using-namespace)
using nlohmann::json;

// The API server for the extender's watches: lists of nodes and assigned pods, watches that stay
// open (and silent) until cancelled; for bind, one Node or pending pod by name, Node patches
// accepted and bindings recorded.
class QuietCluster : public kube::ApiTransport {
 public:
  QuietCluster(json nodes, json pods) : nodes_(std::move(nodes)), pods_(std::move(pods)) {}
  Result<json> Get(const std::string& path, kube::Canceller*) override {
    for (const json& node : nodes_) {
      if (path == "/api/v1/nodes/" + node["metadata"]["name"].get<std::string>()) return node;
    }
    for (const json& pod : pods_) {
      if (path == "/api/v1/namespaces/ml/pods/" + pod["metadata"]["name"].get<std::string>()) {
        return pod;
      }
    }
    json items = path.starts_with("/api/v1/nodes") ? nodes_ : json::array();
    return json{{"metadata", {{"resourceVersion", "7"}}}, {"items", items}};
  }
  Result<json> Post(const std::string& path, const json&, kube::Canceller*) override {
    std::lock_guard lock(mutex_);
    posts_.push_back(path);
    return json::object();
  }
  Result<json> Patch(const std::string& path, const json& body, const std::string&,
                     kube::Canceller*) override {
    std::lock_guard lock(mutex_);
    posts_.push_back("PATCH " + path);
    return body;
  }
  // Opens, then stays silent until cancelled. The cancel hook runs under the Canceller's lock, so
  // it takes only a lock of its own: no lock is held here while arming or disarming.
  Status Stream(const std::string&, std::chrono::milliseconds, const std::function<void()>& on_open,
                const std::function<bool(std::string_view)>&, kube::Canceller* cancel) override {
    struct Wait {
      std::mutex mutex;
      std::condition_variable wake;
      bool cancelled = false;
    };
    auto wait = std::make_shared<Wait>();
    if (cancel == nullptr || !cancel->Arm([wait] {
          std::lock_guard lock(wait->mutex);
          wait->cancelled = true;
          wait->wake.notify_all();
        })) {
      return Status::Error(ErrorCode::kCancelled, "stopped");
    }
    on_open();
    {
      std::unique_lock lock(wait->mutex);
      wait->wake.wait(lock, [&] { return wait->cancelled; });
    }
    cancel->Disarm();
    return Status::Error(ErrorCode::kCancelled, "stopped");
  }
  std::vector<std::string> posts() {
    std::lock_guard lock(mutex_);
    return posts_;
  }

 private:
  json nodes_;
  json pods_;
  std::mutex mutex_;
  std::vector<std::string> posts_;
};

json Train() {
  return {
      {"metadata", {{"name", "train"}, {"namespace", "ml"}, {"uid", "u1"}}},
      {"spec", {{"containers", {{{"name", "main"}, {"resources", {{"limits", {{k222, "1"}}}}}}}}}}};
}

json WholeNode(const std::string& name, const scheduling::NodeVgpuState& state) {
  return {{"metadata",
           {{"name", name}, {"annotations", {{scheduling::kNodeStateAnnotation, Text(state)}}}}}};
}

void Write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

class ServiceTest : public ::testing::Test {
 protected:
  ServiceTest()
      : authority_("kata-vgpu test CA"),
        cluster_(json::array({WholeNode("n1", NodeOf({T4("a")}, UnixNowMs())),
                              WholeNode("n2", NodeOf({T4("a", "223", 8)}, UnixNowMs()))}),
                 json::array({Train()})) {
    kvgpu::testing::CertAndKey leaf = authority_.Issue("kvgpu-scheduler-extender", true);
    Write(dir_.path() / "tls.crt", leaf.cert_pem);
    Write(dir_.path() / "tls.key", leaf.key_pem);
  }
  ServiceOptions Options() {
    ServiceOptions options;
    options.listen = "127.0.0.1:0";
    options.tls_cert_file = (dir_.path() / "tls.crt").string();
    options.tls_key_file = (dir_.path() / "tls.key").string();
    options.bind = true;
    options.api = &cluster_;
    return options;
  }
  std::unique_ptr<httplib::SSLClient> Client(int port) {
    Write(dir_.path() / "ca.crt", authority_.cert_pem());
    auto client = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    client->set_ca_cert_path((dir_.path() / "ca.crt").c_str());
    client->enable_server_certificate_verification(true);
    return client;
  }

  kvgpu::testing::TempDir dir_;
  kvgpu::testing::TestAuthority authority_;
  QuietCluster cluster_;
};

TEST_F(ServiceTest, ServesTheVerbsOverHttpsOnceItFollowsTheApiServer) {
  auto service = Service::Create(Options());
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  std::thread runner([&] { (*service)->Run(); });
  std::unique_ptr<httplib::SSLClient> client = Client((*service)->port());
  ASSERT_TRUE(kvgpu::testing::Eventually([&] {
    auto ready = client->Get("/readyz");
    return ready && ready->status == 200;
  })) << "ready once both watches follow";

  json args = {{"Pod", Train()}, {"Nodes", nullptr}, {"NodeNames", {"n1", "n2"}}};
  auto filtered = client->Post("/filter", args.dump(), "application/json");
  ASSERT_TRUE(filtered);
  ASSERT_EQ(filtered->status, 200);
  json result = json::parse(filtered->body);
  EXPECT_EQ(result["NodeNames"], json::array({"n1"})) << result.dump();
  EXPECT_TRUE(result["FailedAndUnresolvableNodes"].contains("n2"));

  json binding = {{"PodName", "train"}, {"PodNamespace", "ml"}, {"PodUID", "u1"}, {"Node", "n1"}};
  auto bound = client->Post("/bind", binding.dump(), "application/json");
  ASSERT_TRUE(bound);
  EXPECT_EQ(json::parse(bound->body)["Error"], "");
  EXPECT_EQ(cluster_.posts(),
            (std::vector<std::string>{"PATCH /api/v1/nodes/n1",
                                      "/api/v1/namespaces/ml/pods/train/binding"}))
      << "the bind is recorded on the Node, then bound";

  // ExtenderPreemptionArgs as kube-scheduler sends it with nodeCacheCapable (types.go): n2 has no
  // GPU offering 222 and is dropped; n1 fits the pod already and keeps its victims.
  const json preempt = {{"Pod", Train()},
                        {"NodeNameToVictims", nullptr},
                        {"NodeNameToMetaVictims",
                         {{"n1", {{"Pods", {{{"UID", "v1"}}}}, {"NumPDBViolations", 0}}},
                          {"n2", {{"Pods", {{{"UID", "v2"}}}}, {"NumPDBViolations", 0}}}}}};
  auto preempted = client->Post("/preempt", preempt.dump(), "application/json");
  ASSERT_TRUE(preempted);
  ASSERT_EQ(preempted->status, 200) << preempted->body;
  EXPECT_EQ(json::parse(preempted->body),
            json::parse(R"({"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"v1"}],
                                                             "NumPDBViolations":0}}})"));
  auto malformed = client->Post("/preempt", R"({"Pod":{}})", "application/json");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);

  const std::string metrics = (*service)->Metrics();
  EXPECT_NE(
      metrics.find("kvgpu_scheduler_extender_requests_total{code=\"200\",path=\"/filter\"} 1"),
      std::string::npos)
      << metrics;
  EXPECT_NE(
      metrics.find("kvgpu_scheduler_extender_requests_total{code=\"400\",path=\"/preempt\"} 1"),
      std::string::npos)
      << metrics;
  (*service)->Stop();
  runner.join();
}

// --metrics-addr is the daemon shell's listener (https/metrics_listener.h): a scrape is answered
// while other connections sit open and silent. prometheus-cpp's exposer, which the extender used
// before, gave each connection one of two threads, so two idle ones starved every scrape.
TEST_F(ServiceTest, MetricsAddrAnswersAScrapeWhileIdleConnectionsAreHeldOpen) {
  ServiceOptions options = Options();
  options.metrics_addr = "127.0.0.1:0";
  auto service = Service::Create(options);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  std::thread runner([&] { (*service)->Run(); });
  ASSERT_GT((*service)->metrics_port(), 0);
  std::unique_ptr<httplib::SSLClient> client = Client((*service)->port());
  ASSERT_TRUE(kvgpu::testing::Eventually([&] {
    auto healthy = client->Get("/healthz");
    return healthy && healthy->status == 200;
  }));

  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>((*service)->metrics_port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    idle.push_back(fd);
  }
  const std::string scrape =
      kvgpu::testing::HttpRequest((*service)->metrics_port(), "GET", "/metrics");
  EXPECT_NE(scrape.find("kvgpu_scheduler_extender_requests_total{code=\"200\",path=\"/healthz\"}"),
            std::string::npos)
      << scrape;
  for (int fd : idle) ::close(fd);
  (*service)->Stop();
  runner.join();
}

// With --client-ca-file, the verbs answer only a client with a certificate that CA signed (what
// kube-scheduler's tlsConfig certFile/keyFile present); the probes stay open for kubelet.
TEST_F(ServiceTest, WithAClientCaTheVerbsRefuseACallerWithoutACertificateAndTheProbesStayOpen) {
  Write(dir_.path() / "client-ca.crt", authority_.cert_pem());
  kvgpu::testing::CertAndKey scheduler = authority_.Issue("kube-scheduler", false);
  Write(dir_.path() / "client.crt", scheduler.cert_pem);
  Write(dir_.path() / "client.key", scheduler.key_pem);
  ServiceOptions options = Options();
  options.client_ca_file = (dir_.path() / "client-ca.crt").string();
  auto service = Service::Create(options);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  std::thread runner([&] { (*service)->Run(); });
  std::unique_ptr<httplib::SSLClient> anonymous = Client((*service)->port());
  ASSERT_TRUE(kvgpu::testing::Eventually([&] {
    auto ready = anonymous->Get("/readyz");
    return ready && ready->status == 200;
  })) << "the probes answer without a certificate";
  EXPECT_EQ(anonymous->Get("/healthz")->status, 200);
  const json args = {{"Pod", Train()}, {"Nodes", nullptr}, {"NodeNames", {"n1"}}};
  const json binding = {
      {"PodName", "train"}, {"PodNamespace", "ml"}, {"PodUID", "u1"}, {"Node", "n1"}};
  const json preempt = {{"Pod", Train()}, {"NodeNameToMetaVictims", json::object()}};
  for (const auto& [path, body] : {std::pair{"/filter", args}, std::pair{"/prioritize", args},
                                   std::pair{"/bind", binding}, std::pair{"/preempt", preempt}}) {
    auto refused = anonymous->Post(path, body.dump(), "application/json");
    ASSERT_TRUE(refused) << path;
    EXPECT_EQ(refused->status, 403) << path;
    EXPECT_NE(refused->body.find("client certificate"), std::string::npos) << refused->body;
  }
  EXPECT_TRUE(cluster_.posts().empty()) << "nothing was bound or written";

  httplib::SSLClient scheduler_client("127.0.0.1", (*service)->port(),
                                      (dir_.path() / "client.crt").string(),
                                      (dir_.path() / "client.key").string());
  scheduler_client.set_ca_cert_path((dir_.path() / "ca.crt").c_str());
  scheduler_client.enable_server_certificate_verification(true);
  auto filtered = scheduler_client.Post("/filter", args.dump(), "application/json");
  ASSERT_TRUE(filtered);
  EXPECT_EQ(filtered->status, 200);
  EXPECT_EQ(json::parse(filtered->body)["NodeNames"], json::array({"n1"}));
  (*service)->Stop();
  runner.join();
}

// A client cannot make the extender hold more than the body limit (32 MiB: ExtenderArgs of 5,000
// whole Nodes): a longer body is refused from its Content-Length and the verbs keep serving.
TEST_F(ServiceTest, ABodyOverTheLimitIsRefusedAndTheServiceKeepsServing) {
  auto service = Service::Create(Options());
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  std::thread runner([&] { (*service)->Run(); });
  std::unique_ptr<httplib::SSLClient> client = Client((*service)->port());
  ASSERT_TRUE(kvgpu::testing::Eventually([&] {
    auto ready = client->Get("/readyz");
    return ready && ready->status == 200;
  }));
  // The server answers 413 and closes while the client still writes: that write must fail, not
  // end the test process.
  std::signal(SIGPIPE, SIG_IGN);
  auto big = client->Post("/preempt", std::string((32u << 20) + 1, ' '), "application/json");
  if (big) {  // else the server closed before the body was all sent
    EXPECT_EQ(big->status, 413);
  }
  std::unique_ptr<httplib::SSLClient> next = Client((*service)->port());
  const json preempt = {{"Pod", Train()}, {"NodeNameToMetaVictims", json::object()}};
  auto answered = next->Post("/preempt", preempt.dump(), "application/json");
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->status, 200);
  EXPECT_EQ(json::parse(answered->body), json::parse(R"({"NodeNameToMetaVictims":{}})"));
  (*service)->Stop();
  runner.join();
}

// With --scheduler-config, a node advertising a vGPU resource kube-scheduler does not send to the
// extender gets a Warning Event (posted to the API server off the watch's thread).
TEST_F(ServiceTest, ANodeAdvertisingAnUnmanagedResourceGetsAnEvent) {
  Write(dir_.path() / "scheduler.yaml",
        "extenders:\n- urlPrefix: https://x\n  managedResources:\n  - name: " + std::string(k222) +
            "\n");
  json node = WholeNode("n3", NodeOf({T4("a")}, UnixNowMs()));
  node["status"]["allocatable"] = {{k222, "16"}, {"tencent.com/vgpu-999", "4"}};
  QuietCluster cluster(json::array({node}), json::array());
  ServiceOptions options = Options();
  options.api = &cluster;
  options.scheduler_config = (dir_.path() / "scheduler.yaml").string();
  auto service = Service::Create(options);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  std::thread runner([&] { (*service)->Run(); });
  EXPECT_TRUE(kvgpu::testing::Eventually([&] {
    const auto posts = cluster.posts();
    return std::count(posts.begin(), posts.end(), "/api/v1/namespaces/default/events") == 1;
  })) << "one Event for n3's vgpu-999";
  (*service)->Stop();
  runner.join();
}

// The Event as the API server stores it: a core/v1 Event about the Node, in "default" (where
// kubelet puts Node Events), that `kubectl describe node` shows.
TEST(CoverageEventTest, TheEventReachesTheApiServerAsACoreV1EventOnTheNode) {
  kvgpu::testing::FakeApiServer server;
  ASSERT_TRUE(server.Start());
  auto api = kube::ApiClient::Create(server.ClientConfig());
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  kube::ApiEventRecorder events(**api, "kvgpu-scheduler-extender", "extender-0");
  prometheus::Registry registry;
  Coverage coverage({k222}, "tencent.com/vgpu-", registry, &events);
  coverage.SyncNodes({{{"metadata", {{"name", "gpu-1"}}},
                       {"status", {{"allocatable", {{"tencent.com/vgpu-999", "4"}}}}}}});
  const std::vector<json> stored = server.events();
  ASSERT_EQ(stored.size(), 1u);
  const json& event = stored[0];
  EXPECT_EQ(event["metadata"]["namespace"], "default");
  EXPECT_EQ(event["involvedObject"]["kind"], "Node");
  EXPECT_EQ(event["involvedObject"]["name"], "gpu-1");
  EXPECT_EQ(event["reason"], "VgpuResourceBypassesExtender");
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_NE(event["message"].get<std::string>().find("tencent.com/vgpu-999"), std::string::npos);
}

TEST_F(ServiceTest, AStartWithoutUsableTlsFilesFailsWithTheReason) {
  ServiceOptions options = Options();
  options.tls_key_file = (dir_.path() / "missing.key").string();
  auto service = Service::Create(options);
  ASSERT_FALSE(service.ok());
  EXPECT_NE(service.status().message().find("missing.key"), std::string::npos)
      << service.status().message();
  options = Options();
  options.tls_cert_file.clear();
  EXPECT_NE(Service::Create(options).status().message().find("--tls-cert-file"), std::string::npos);
  options = Options();
  options.listen = "nowhere";
  EXPECT_NE(Service::Create(options).status().message().find("--listen"), std::string::npos);
}

}  // namespace
}  // namespace kvgpu::extender
