// Configuration: kubeconfig contexts and credentials as kubectl reads them, the in-cluster
// service account, and a token that rotates on disk.
#include "kube/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "fakes/common/temp_dir.h"

namespace kvgpu::kube {
namespace {

using kvgpu::testing::TempDir;

void Write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(Base64Test, DecodesWhatKubeconfigDataFieldsHold) {
  struct Case {
    std::string description;
    std::string input;
    bool ok;
    std::string output;
  };
  const std::vector<Case> cases = {
      {"no padding", "YWJj", true, "abc"},
      {"one pad", "YWI=", true, "ab"},
      {"two pads", "YQ==", true, "a"},
      {"line-wrapped", "YWJj\nZGVm\n", true, "abcdef"},
      {"empty", "", true, ""},
      {"bad character", "YW*j", false, ""},
      {"truncated", "YWJ", false, ""},
      {"data after padding", "YQ==YQ==", false, ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    auto decoded = DecodeBase64(c.input);
    ASSERT_EQ(decoded.ok(), c.ok) << (decoded.ok() ? "" : decoded.status().message());
    if (c.ok) {
      EXPECT_EQ(decoded.value(), c.output);
    }
  }
}

constexpr const char* kKubeconfig = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: prod-cluster
  cluster:
    server: https://prod.example:6443
    certificate-authority-data: UFJPRC1DQQ==
- name: dev-cluster
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.pem
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: gpu}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
users:
- name: dev-user
  user:
    token: dev-token
- name: prod-user
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
)";

TEST(KubeconfigTest, CurrentContextPicksClusterUserAndNamespace) {
  TempDir dir;
  Write(dir.path() / "ca.pem", "DEV-CA");
  Write(dir.path() / "config", kKubeconfig);
  auto config = LoadKubeconfig(dir.path() / "config");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://127.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "DEV-CA") << "relative CA path is taken from the kubeconfig's dir";
  EXPECT_EQ(config->token, "dev-token");
  EXPECT_EQ(config->namespace_name, "gpu");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST(KubeconfigTest, NamedContextWithInlineClientCertificate) {
  auto config = ParseKubeconfig(kKubeconfig, "/nowhere", "prod");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://prod.example:6443");
  EXPECT_EQ(config->ca_pem, "PROD-CA");
  EXPECT_EQ(config->client_cert_pem, "CERT");
  EXPECT_EQ(config->client_key_pem, "KEY");
  EXPECT_TRUE(config->token.empty());
}

TEST(KubeconfigTest, BadConfigurationsSayWhatIsWrong) {
  struct Case {
    std::string description;
    std::string text;
    std::string context;
    std::string expected_in_message;
  };
  const std::string cluster = "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n";
  const std::string ctx = "contexts:\n- name: x\n  context: {cluster: c, user: u}\n";
  const std::vector<Case> cases = {
      {"not yaml", "{{{", "", "YAML"},
      {"no context at all", cluster, "", "current-context"},
      {"unknown context", cluster + ctx, "y", "context \"y\" not found"},
      {"unknown cluster", "contexts:\n- name: x\n  context: {cluster: nope, user: u}\n", "x",
       "cluster \"nope\""},
      {"unknown user", cluster + ctx, "x", "user \"u\" not found"},
      {"server not a URL",
       "clusters:\n- name: c\n  cluster:\n    server: h:1\n" + ctx +
           "users:\n- name: u\n  user: {token: t}\n",
       "x", "not an http(s) URL"},
      {"both CA file and data",
       "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
       "    certificate-authority: a\n    certificate-authority-data: YQ==\n" +
           ctx + "users:\n- name: u\n  user: {token: t}\n",
       "x", "both certificate-authority and certificate-authority-data"},
      {"CA data not base64",
       "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
       "    certificate-authority-data: '!!'\n" +
           ctx + "users:\n- name: u\n  user: {token: t}\n",
       "x", "certificate-authority-data"},
      {"missing CA file",
       "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
       "    certificate-authority: /no/such/ca\n" +
           ctx + "users:\n- name: u\n  user: {token: t}\n",
       "x", "/no/such/ca"},
      {"certificate without key",
       cluster + ctx + "users:\n- name: u\n  user: {client-certificate-data: YQ==}\n", "x",
       "needs its key"},
      {"exec plugin", cluster + ctx + "users:\n- name: u\n  user:\n    exec: {command: aws}\n", "x",
       "exec and auth-provider"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    auto config = ParseKubeconfig(c.text, "/nowhere", c.context);
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), ErrorCode::kConfig);
    EXPECT_NE(config.status().message().find(c.expected_in_message), std::string::npos)
        << config.status().message();
  }
}

TEST(KubeconfigTest, InsecureSkipAndTokenFile) {
  const std::string text =
      "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
      "    insecure-skip-tls-verify: true\ncontexts:\n- name: x\n  context: {cluster: c, user: "
      "u}\nusers:\n- name: u\n  user: {tokenFile: tok}\n";
  auto config = ParseKubeconfig(text, "/etc/k");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->token_file, std::filesystem::path("/etc/k/tok"));
}

TEST(InClusterTest, ReadsTheServiceAccountMount) {
  TempDir dir;
  Write(dir.path() / "ca.crt", "CLUSTER-CA");
  Write(dir.path() / "token", "sa-token\n");
  Write(dir.path() / "namespace", "kube-system");
  auto config = LoadInCluster({"10.96.0.1", "443", dir.path()});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->ca_pem, "CLUSTER-CA");
  EXPECT_EQ(config->token_file, dir.path() / "token");
  EXPECT_EQ(config->namespace_name, "kube-system");
  TokenSource token(config.value());
  EXPECT_EQ(token.Get().value(), "sa-token");
}

TEST(InClusterTest, Ipv6ServiceAddressIsBracketed) {
  TempDir dir;
  Write(dir.path() / "ca.crt", "CA");
  Write(dir.path() / "token", "t");
  auto config = LoadInCluster({"fd00::1", "443", dir.path()});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://[fd00::1]:443");
}

TEST(InClusterTest, MissingPiecesAreClearErrors) {
  TempDir dir;
  struct Case {
    std::string description;
    InClusterSource source;
    std::string expected_in_message;
  };
  const std::vector<Case> cases = {
      {"no service env", {"", "", dir.path()}, "KUBERNETES_SERVICE_HOST"},
      {"no CA file", {"h", "1", dir.path()}, "ca.crt"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    auto config = LoadInCluster(c.source);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find(c.expected_in_message), std::string::npos)
        << config.status().message();
  }
  Write(dir.path() / "ca.crt", "CA");
  Write(dir.path() / "token", "  \n");
  auto empty_token = LoadInCluster({"h", "1", dir.path()});
  ASSERT_FALSE(empty_token.ok());
  EXPECT_NE(empty_token.status().message().find("empty"), std::string::npos);
}

TEST(TokenSourceTest, RotatedTokenIsPickedUpAndALostFileKeepsTheLastOne) {
  TempDir dir;
  const auto path = dir.path() / "token";
  Write(path, "first");
  Config config;
  config.token_file = path;
  TokenSource token(config);
  EXPECT_EQ(token.Get().value(), "first");
  // kubelet swaps the projected volume's files atomically; a new file has a new mtime.
  Write(dir.path() / "token.new", "second-longer");
  std::filesystem::rename(dir.path() / "token.new", path);
  EXPECT_EQ(token.Get().value(), "second-longer");
  std::filesystem::remove(path);
  EXPECT_EQ(token.Get().value(), "second-longer");
}

TEST(TokenSourceTest, NoTokenFileAtStartIsAnError) {
  Config config;
  config.token_file = "/no/such/token";
  TokenSource token(config);
  EXPECT_FALSE(token.Get().ok());
}

}  // namespace
}  // namespace kvgpu::kube
