// Who may call a daemon's HTTPS endpoints (https/client_auth.h): with a client CA, only requests
// that came with a certificate, and the probes without one; without a CA, everyone.
#include "https/client_auth.h"

#include <gtest/gtest.h>

#include <string>

namespace kvgpu::https {
namespace {

HttpRequest Request(const std::string& path, bool client_certificate) {
  HttpRequest request;
  request.method = "POST";
  request.path = path;
  request.client_certificate = client_certificate;
  return request;
}

TEST(ClientAuthTest, WithACaARequestWithoutACertificateIsRefused) {
  const auto refused = RefuseWithoutClientCertificate(Request("/mutate", false), true);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 403);
  EXPECT_NE(refused->body.find("--client-ca-file"), std::string::npos) << refused->body;
}

TEST(ClientAuthTest, WithACaACertifiedRequestGoesOn) {
  EXPECT_FALSE(RefuseWithoutClientCertificate(Request("/mutate", true), true).has_value());
}

TEST(ClientAuthTest, TheProbesAnswerWithoutACertificate) {
  for (const char* probe : {"/healthz", "/readyz"}) {
    EXPECT_FALSE(RefuseWithoutClientCertificate(Request(probe, false), true).has_value()) << probe;
  }
  EXPECT_TRUE(RefuseWithoutClientCertificate(Request("/healthz/x", false), true).has_value())
      << "only the probes themselves";
}

TEST(ClientAuthTest, WithoutACaNobodyIsAskedForOne) {
  EXPECT_FALSE(RefuseWithoutClientCertificate(Request("/mutate", false), false).has_value());
}

}  // namespace
}  // namespace kvgpu::https
