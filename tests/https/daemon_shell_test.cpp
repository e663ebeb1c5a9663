// The daemons' shared shell (https/daemon_shell.h) before it serves: its flags, declared once, and
// a start that fails on the flag it concerns. Serving, reloads and the metrics listener are shown
// through the daemons (docs/development.md, "Where each source file is tested").
#include "https/daemon_shell.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>

namespace kvgpu::https {
namespace {

TEST(DaemonShellFlagsTest, EveryShellFlagFillsItsOption) {
  CLI::App app;
  ShellOptions options;
  AddShellFlags(app, options, "kube-apiserver");
  app.parse(
      "--listen 0.0.0.0:8443 --tls-cert-file cert.pem --tls-key-file key.pem --client-ca-file "
      "ca.pem "
      "--metrics-addr 127.0.0.1:9090",
      false);
  EXPECT_EQ(options.listen, "0.0.0.0:8443");
  EXPECT_EQ(options.tls_cert_file, "cert.pem");
  EXPECT_EQ(options.tls_key_file, "key.pem");
  EXPECT_EQ(options.client_ca_file, "ca.pem");
  EXPECT_EQ(options.metrics_addr, "127.0.0.1:9090");
}

TEST(DaemonShellFlagsTest, TheTlsPairIsRequired) {
  CLI::App app;
  ShellOptions options;
  AddShellFlags(app, options, "kube-apiserver");
  EXPECT_THROW(app.parse("--tls-cert-file cert.pem", false), CLI::RequiredError);
}

TEST(DaemonShellStartTest, FailuresNameTheFlagTheyConcern) {
  ShellOptions options;
  options.listen = "no port";
  auto bad_listen = DaemonShell::Start(options, {}, {}, "the webhook serves HTTPS");
  ASSERT_FALSE(bad_listen.ok());
  EXPECT_NE(bad_listen.status().message().find("--listen"), std::string::npos)
      << bad_listen.status().ToString();

  options.listen = "127.0.0.1:0";
  auto no_tls = DaemonShell::Start(options, {}, {}, "the webhook serves HTTPS");
  ASSERT_FALSE(no_tls.ok());
  EXPECT_NE(no_tls.status().message().find("--tls-cert-file"), std::string::npos)
      << no_tls.status().ToString();
  EXPECT_NE(no_tls.status().message().find("the webhook serves HTTPS"), std::string::npos);
}

}  // namespace
}  // namespace kvgpu::https
