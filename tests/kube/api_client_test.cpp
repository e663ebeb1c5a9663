// The HTTPS client against the fake API server: who it trusts, how it authenticates, what its
// errors say, and that a blocked stream can be broken.
#include "kube/api_client.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "fakes/apiserver/fake_apiserver.h"
#include "fakes/common/eventually.h"
#include "fakes/common/temp_dir.h"
#include "kube/events.h"

namespace kvgpu::kube {
namespace {

using kvgpu::testing::FakeApiServer;
using kvgpu::testing::MakePod;
using kvgpu::testing::TempDir;
using kvgpu::testing::TestAuthority;

std::string Base64(const std::string& data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(data.data()),
                                static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

class ApiClientTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.Start()); }

  Config GoodConfig() const {
    Config config = server_.ClientConfig();
    return config;
  }

  std::unique_ptr<ApiClient> Client(const Config& config, ClientOptions options = {}) {
    auto client = ApiClient::Create(config, options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client.value()) : nullptr;
  }

  FakeApiServer server_;
};

TEST_F(ApiClientTest, ListsPodsWithTokenAndCa) {
  server_.AddPod(MakePod("ml", "a", "node-a"));
  auto client = Client(GoodConfig());
  auto list = client->Get("/api/v1/pods");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list.value()["items"].size(), 1u);
  EXPECT_FALSE(list.value()["metadata"]["resourceVersion"].get<std::string>().empty());
}

TEST_F(ApiClientTest, RefusalsAreTypedErrors) {
  TestAuthority stranger("some-other-ca");
  struct Case {
    std::string description;
    std::function<void(Config&)> change;
    ErrorCode kind;
    int status;
    std::string in_message;
  };
  const std::vector<Case> cases = {
      {"no token", [](Config& c) { c.token.clear(); }, ErrorCode::kHttp, 401, "Unauthorized"},
      {"wrong token", [](Config& c) { c.token = "nope"; }, ErrorCode::kHttp, 401, "Unauthorized"},
      {"server signed by another CA", [&](Config& c) { c.ca_pem = stranger.cert_pem(); },
       ErrorCode::kTransport, 0, "GET /api/v1/pods"},
      {"nothing listening", [](Config& c) { c.server = "https://127.0.0.1:1"; },
       ErrorCode::kTransport, 0, "Connection"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Config config = GoodConfig();
    c.change(config);
    auto client = Client(config);
    ASSERT_NE(client, nullptr);
    auto list = client->Get("/api/v1/pods");
    ASSERT_FALSE(list.ok());
    EXPECT_EQ(list.status().code(), c.kind) << list.status().ToString();
    EXPECT_EQ(list.status().http_status(), c.status);
    EXPECT_NE(list.status().message().find(c.in_message), std::string::npos)
        << list.status().message();
  }
}

TEST_F(ApiClientTest, TheSystemTrustStoreIsNotConsultedWhenACaIsGiven) {
  // Make the server's CA a "system" CA (OpenSSL's default verify file honours SSL_CERT_FILE),
  // then configure a different CA: only the configured one may count.
  TempDir dir;
  const auto system_cas = dir.path() / "system-cas.pem";
  std::ofstream(system_cas) << server_.ca_pem();
  const char* old = std::getenv("SSL_CERT_FILE");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("SSL_CERT_FILE", system_cas.c_str(), 1);
  TestAuthority stranger("some-other-ca");
  Config config = GoodConfig();
  config.ca_pem = stranger.cert_pem();
  auto client = Client(config);
  auto list = client->Get("/api/v1/pods");
  Config no_ca = GoodConfig();
  no_ca.ca_pem.clear();
  auto system_only = Client(no_ca)->Get("/api/v1/pods");
  if (old != nullptr) {
    ::setenv("SSL_CERT_FILE", saved.c_str(), 1);
  } else {
    ::unsetenv("SSL_CERT_FILE");
  }
  EXPECT_FALSE(list.ok());
  EXPECT_TRUE(system_only.ok()) << "without a CA the system store is the trust: "
                                << system_only.status().ToString();
}

TEST_F(ApiClientTest, InsecureSkipTrustsAnyServer) {
  TestAuthority stranger("some-other-ca");
  Config config = GoodConfig();
  config.ca_pem = stranger.cert_pem();
  config.insecure_skip_tls_verify = true;
  auto client = Client(config);
  EXPECT_TRUE(client->Get("/api/v1/pods").ok());
}

TEST_F(ApiClientTest, BadConfigIsRefusedBeforeAnyRequest) {
  struct Case {
    std::string description;
    std::function<void(Config&)> change;
  };
  const std::vector<Case> cases = {
      {"not a URL", [](Config& c) { c.server = "127.0.0.1:6443"; }},
      {"bad port", [](Config& c) { c.server = "https://127.0.0.1:99999"; }},
      {"CA without a certificate", [](Config& c) { c.ca_pem = "not pem"; }},
      {"client cert without a valid key",
       [](Config& c) {
         c.client_cert_pem = "x";
         c.client_key_pem = "y";
       }},
      {"token file missing", [](Config& c) { c.token_file = "/no/such/token"; }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    Config config = GoodConfig();
    c.change(config);
    auto client = ApiClient::Create(config);
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), ErrorCode::kConfig);
  }
}

// A GET, then the token file rotated (as kubelet rotates projected tokens) and the server taking
// only the new one, then a second GET, whose result is returned.
Result<nlohmann::json> GetAcrossATokenRotation(
    FakeApiServer& server, const Config& base,
    const std::function<std::unique_ptr<ApiClient>(const Config&)>& make) {
  TempDir dir;
  const auto token_path = dir.path() / "token";
  std::ofstream(token_path) << "old-token";
  server.SetTokens({"old-token"});
  Config config = base;
  config.token.clear();
  config.token_file = token_path;
  auto client = make(config);
  if (auto first = client->Get("/api/v1/pods"); !first.ok()) return first.status();
  std::ofstream(dir.path() / "next") << "new-token-rotated";
  std::filesystem::rename(dir.path() / "next", token_path);
  server.SetTokens({"new-token-rotated"});
  return client->Get("/api/v1/pods");
}

TEST_F(ApiClientTest, RotatedTokenFileIsUsedOnTheNextRequest) {
  auto after =
      GetAcrossATokenRotation(server_, GoodConfig(), [&](const Config& c) { return Client(c); });
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

TEST_F(ApiClientTest, KubeconfigWithInlineCaReachesTheServer) {
  TempDir dir;
  const std::string text =
      "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n"
      "  cluster:\n    server: " +
      server_.url() + "\n    certificate-authority-data: " + Base64(server_.ca_pem()) +
      "\ncontexts:\n- name: t\n  context: {cluster: c, user: u}\nusers:\n"
      "- name: u\n  user: {token: " +
      FakeApiServer::kToken + "}\n";
  std::ofstream(dir.path() / "kubeconfig") << text;
  auto config = LoadKubeconfig(dir.path() / "kubeconfig");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto client = Client(config.value());
  EXPECT_TRUE(client->Get("/api/v1/pods").ok());
}

TEST(ApiClientCertificateTest, KubeconfigClientCertificateFilesAuthenticate) {
  FakeApiServer server(/*client_certificates=*/true);
  ASSERT_TRUE(server.Start());
  server.AddPod(MakePod("ml", "a", "node-a"));
  // Like /etc/kubernetes/kubelet.conf: certificate and key as files next to the kubeconfig.
  TempDir dir;
  const auto pair = server.IssueClientCertificate("system:node:node-a");
  std::ofstream(dir.path() / "ca.crt") << server.ca_pem();
  std::ofstream(dir.path() / "client.crt") << pair.cert_pem;
  std::ofstream(dir.path() / "client.key") << pair.key_pem;
  std::ofstream(dir.path() / "kubeconfig")
      << "current-context: n\nclusters:\n- name: c\n  cluster:\n    server: " << server.url()
      << "\n    certificate-authority: ca.crt\ncontexts:\n- name: n\n  context: {cluster: c, "
         "user: u}\nusers:\n- name: u\n  user:\n    client-certificate: client.crt\n"
         "    client-key: client.key\n";
  auto config = LoadKubeconfig(dir.path() / "kubeconfig");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto client = ApiClient::Create(config.value());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto list = client.value()->Get("/api/v1/pods");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list.value()["items"].size(), 1u);

  Config without = config.value();
  without.client_cert_pem.clear();
  without.client_key_pem.clear();
  auto refused = ApiClient::Create(without).value()->Get("/api/v1/pods");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kTransport) << refused.status().ToString();
}

TEST_F(ApiClientTest, EventsArePostedAboutThePod) {
  auto client = Client(GoodConfig());
  ApiEventRecorder recorder(*client, "kata-vgpu-device-plugin", "node-a");
  const Status error = recorder.Record({"ml", "train", "uid-1"}, EventType::kNormal, "VgpuCreated",
                                       "vGPU nvidia-492 created on 0000:3b:00.0");
  ASSERT_TRUE(error.ok()) << error.ToString();
  const auto events = server_.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["involvedObject"]["uid"], "uid-1");
  EXPECT_EQ(events[0]["reason"], "VgpuCreated");
  EXPECT_EQ(events[0]["metadata"]["namespace"], "ml");
}

TEST_F(ApiClientTest, MergePatchChangesThePod) {
  server_.AddPod(MakePod("ml", "a", "node-a"));
  auto client = Client(GoodConfig());
  auto patched = client->Patch("/api/v1/namespaces/ml/pods/a",
                               {{"metadata", {{"annotations", {{"kata-vgpu/uuid", "x"}}}}}},
                               "application/merge-patch+json");
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ(patched.value()["metadata"]["annotations"]["kata-vgpu/uuid"], "x");
  auto missing = client->Patch("/api/v1/namespaces/ml/pods/nope", nlohmann::json::object(),
                               "application/merge-patch+json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().http_status(), 404);
  EXPECT_NE(missing.status().message().find("not found"), std::string::npos);
}

TEST_F(ApiClientTest, SlowServerTimesOut) {
  server_.SetResponseDelay(std::chrono::milliseconds(1500));
  ClientOptions options;
  options.request_timeout = std::chrono::milliseconds(200);
  auto client = Client(GoodConfig(), options);
  auto list = client->Get("/api/v1/pods");
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), ErrorCode::kTransport) << list.status().ToString();
  server_.SetResponseDelay(std::chrono::milliseconds(0));
}

TEST_F(ApiClientTest, CancelBreaksAnOpenStream) {
  auto client = Client(GoodConfig());
  Canceller cancel;
  std::promise<void> opened;
  auto done = std::async(std::launch::async, [&] {
    return client->Stream(
        "/api/v1/pods?watch=1", std::chrono::seconds(30), [&] { opened.set_value(); },
        [](std::string_view) { return true; }, &cancel);
  });
  ASSERT_EQ(opened.get_future().wait_for(kvgpu::testing::kEventDeadline),
            std::future_status::ready);
  const auto start = std::chrono::steady_clock::now();
  cancel.Cancel();
  // Not cancelled, the stream would end at its 30 s idle timeout: the bound is far from it and
  // from the milliseconds a cancel takes.
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(done.get().code(), ErrorCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(ApiClientTest, StreamDeliversLinesAndReportsACut) {
  server_.AddPod(MakePod("ml", "a", "node-a"));
  auto client = Client(GoodConfig());
  std::vector<std::string> lines;
  std::promise<void> got_one;
  auto done = std::async(std::launch::async, [&] {
    return client->Stream(
        "/api/v1/pods?watch=1", std::chrono::seconds(30), nullptr,
        [&](std::string_view line) {
          lines.emplace_back(line);
          if (lines.size() == 1) got_one.set_value();
          return true;
        },
        nullptr);
  });
  ASSERT_EQ(got_one.get_future().wait_for(kvgpu::testing::kEventDeadline),
            std::future_status::ready);
  server_.DropWatches();
  // Far below the stream's 30 s idle timeout, which would end it too.
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const Status error = done.get();
  EXPECT_EQ(error.code(), ErrorCode::kTransport) << error.ToString();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["type"], "ADDED");
}

// A server that keeps connections open, as kube-apiserver does.
class ApiClientKeepAliveTest : public ApiClientTest {
 protected:
  void SetUp() override {
    server_.EnableKeepAlive();
    ApiClientTest::SetUp();
  }
};

TEST_F(ApiClientKeepAliveTest, PlainRequestsReuseOneConnectionInsteadOfAHandshakeEach) {
  server_.AddPod(MakePod("ml", "a", "node-a"));
  auto client = Client(GoodConfig());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(client->Get("/api/v1/pods").ok());
  auto patched = client->Patch("/api/v1/namespaces/ml/pods/a",
                               nlohmann::json{{"metadata", {{"labels", {{"x", "y"}}}}}},
                               "application/merge-patch+json");
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ(server_.connections_seen(), 1);
}

// The server closes a kept connection it has not heard from for a while (the fake after 1 s;
// kube-apiserver's idle timeout, or a load balancer's in front of it) while the client still
// holds it for reuse. A request that could not be written on it cannot have been acted on: it is
// sent again on a new connection, a write (PATCH, POST, DELETE) as well as a GET, as Go's
// transport retries a request on a reused connection that wrote nothing.
TEST_F(ApiClientKeepAliveTest, ARequestOnAConnectionTheServerClosedWhileIdleIsSentAgain) {
  server_.AddPod(MakePod("ml", "a", "node-a"));
  auto client = Client(GoodConfig());
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(client->Get("/api/v1/pods").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    auto patched = client->Patch("/api/v1/namespaces/ml/pods/a",
                                 nlohmann::json{{"metadata", {{"labels", {{"x", "y"}}}}}},
                                 "application/merge-patch+json");
    EXPECT_TRUE(patched.ok()) << "round " << round << ": " << patched.status().ToString();
  }
}

TEST_F(ApiClientKeepAliveTest, AConnectionIdleLongerThanAllowedIsNotReused) {
  ClientOptions options;
  options.max_idle_time = std::chrono::milliseconds(0);
  auto client = Client(GoodConfig(), options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->Get("/api/v1/pods").ok());
  EXPECT_EQ(server_.connections_seen(), 3);
}

TEST_F(ApiClientKeepAliveTest, WithoutIdleConnectionsEveryRequestConnects) {
  ClientOptions options;
  options.max_idle_connections = 0;
  auto client = Client(GoodConfig(), options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->Get("/api/v1/pods").ok());
  EXPECT_EQ(server_.connections_seen(), 3);
}

TEST_F(ApiClientKeepAliveTest, AReusedConnectionCarriesTheRotatedToken) {
  auto after =
      GetAcrossATokenRotation(server_, GoodConfig(), [&](const Config& c) { return Client(c); });
  EXPECT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(server_.connections_seen(), 1);
}

TEST_F(ApiClientKeepAliveTest, AGetAfterTheServerRestartedSucceedsOnANewConnection) {
  auto client = Client(GoodConfig());
  ASSERT_TRUE(client->Get("/api/v1/pods").ok());
  server_.Stop();
  ASSERT_TRUE(server_.Start());
  auto after = client->Get("/api/v1/pods");
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

TEST_F(ApiClientKeepAliveTest, ARequestAfterACancelledOneGetsAWorkingConnection) {
  // The answer is held far longer than the test waits for the request to arrive; Stop() at the
  // end releases it.
  server_.SetResponseDelay(std::chrono::milliseconds(20000));
  auto client = Client(GoodConfig());
  Canceller cancel;
  auto pending =
      std::async(std::launch::async, [&] { return client->Get("/api/v1/pods", &cancel); });
  // Cancelled only once the request is on its connection: cancelled before it connected (a busy
  // machine), it would never open the connection this test is about.
  ASSERT_TRUE(server_.WaitFor([&] { return server_.connections_seen() == 1; }));
  cancel.Cancel();
  auto result = pending.get();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), ErrorCode::kCancelled);
  server_.SetResponseDelay(std::chrono::milliseconds(0));
  ASSERT_TRUE(client->Get("/api/v1/pods").ok());
  EXPECT_EQ(server_.connections_seen(), 2);
}

}  // namespace
}  // namespace kvgpu::kube
