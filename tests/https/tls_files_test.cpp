// A TLS pair read from files that are replaced while the server runs (https/tls_files.h): a
// replaced pair is loaded into the store the handshakes read, a half-written rotation keeps the
// pair in use, is said once and is retried until the files make a pair again.
#include "https/tls_files.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>

#include <filesystem>
#include <memory>
#include <string>

#include "fakes/common/temp_dir.h"
#include "fakes/common/test_pki.h"

namespace kvgpu::https {
namespace {

using kvgpu::testing::CertAndKey;
using kvgpu::testing::Fingerprint;
using kvgpu::testing::TempDir;
using kvgpu::testing::TestAuthority;
using kvgpu::testing::WriteFileAtomically;

// The leaf certificate the store's current pair puts on a connection, as PEM.
std::string CurrentLeaf(const TlsFiles& files) {
  std::shared_ptr<const TlsCredentials> current = files.store().Current();
  if (!current) return "";
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  SSL* ssl = SSL_new(ctx);
  std::string out;
  if (current->Apply(ssl)) {
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(bio, SSL_get_certificate(ssl));
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    out.assign(data, static_cast<size_t>(size));
    BIO_free(bio);
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return out;
}

class TlsFilesTest : public ::testing::Test {
 protected:
  std::string Cert() const { return (dir_.path() / "tls.crt").string(); }
  std::string Key() const { return (dir_.path() / "tls.key").string(); }
  std::string Ca() const { return (dir_.path() / "ca.crt").string(); }

  CertAndKey Install() {
    CertAndKey pair = ca_.Issue("server.example", true);
    WriteFileAtomically(Key(), pair.key_pem);
    WriteFileAtomically(Cert(), pair.cert_pem);
    return pair;
  }
  std::unique_ptr<TlsFiles> LoadOk(const std::string& ca = "") {
    auto files = TlsFiles::Load(Cert(), Key(), ca);
    EXPECT_TRUE(files.ok()) << files.status().message();
    return files.ok() ? std::move(files).value() : nullptr;
  }

  TestAuthority ca_{"kvgpu-tls-files-test-ca"};
  TempDir dir_;
};

TEST_F(TlsFilesTest, LoadsThePairAndSeesNoChangeUntilAFileChanges) {
  const CertAndKey pair = Install();
  auto files = LoadOk();
  ASSERT_NE(files, nullptr);
  EXPECT_EQ(Fingerprint(CurrentLeaf(*files)), Fingerprint(pair.cert_pem));
  std::string error = "untouched";
  EXPECT_EQ(files->CheckFiles(&error), TlsFiles::Change::kNone);
  EXPECT_EQ(files->CheckFiles(&error), TlsFiles::Change::kNone);
  EXPECT_EQ(error, "untouched");
}

TEST_F(TlsFilesTest, FilesThatDoNotMakeAPairAreNotLoaded) {
  WriteFileAtomically(Cert(), ca_.Issue("server.example", true).cert_pem);
  WriteFileAtomically(Key(), ca_.Issue("server.example", true).key_pem);
  auto files = TlsFiles::Load(Cert(), Key(), "");
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find("does not belong to certificate"), std::string::npos)
      << files.status().message();
}

TEST_F(TlsFilesTest, AReplacedPairGoesIntoTheStoreTheHandshakesRead) {
  Install();
  auto files = LoadOk();
  ASSERT_NE(files, nullptr);
  const auto before = files->store().Current();
  const CertAndKey next = Install();  // as kubelet swaps a Secret's files
  EXPECT_EQ(files->CheckFiles(), TlsFiles::Change::kReloaded);
  EXPECT_NE(files->store().Current(), before);
  EXPECT_EQ(Fingerprint(CurrentLeaf(*files)), Fingerprint(next.cert_pem));
  EXPECT_EQ(files->CheckFiles(), TlsFiles::Change::kNone) << "loaded once";
}

TEST_F(TlsFilesTest, AHalfWrittenRotationKeepsTheOldPairSaysSoOnceAndIsRetried) {
  const CertAndKey first = Install();
  auto files = LoadOk();
  ASSERT_NE(files, nullptr);
  // The new certificate is there, its key not yet.
  const CertAndKey next = ca_.Issue("server.example", true);
  WriteFileAtomically(Cert(), next.cert_pem);
  std::string error;
  EXPECT_EQ(files->CheckFiles(&error), TlsFiles::Change::kFailed);
  EXPECT_NE(error.find("does not belong to certificate"), std::string::npos) << error;
  EXPECT_EQ(Fingerprint(CurrentLeaf(*files)), Fingerprint(first.cert_pem))
      << "connections keep being served with the pair that loaded";
  error.clear();
  EXPECT_EQ(files->CheckFiles(&error), TlsFiles::Change::kNone) << "said once per change";
  EXPECT_EQ(error, "");
  EXPECT_EQ(Fingerprint(CurrentLeaf(*files)), Fingerprint(first.cert_pem));
  // The key arrives: the next look loads the pair, though the certificate did not change again.
  WriteFileAtomically(Key(), next.key_pem);
  EXPECT_EQ(files->CheckFiles(), TlsFiles::Change::kReloaded);
  EXPECT_EQ(Fingerprint(CurrentLeaf(*files)), Fingerprint(next.cert_pem));
}

TEST_F(TlsFilesTest, AReplacedClientCaIsAChangeToo) {
  Install();
  WriteFileAtomically(Ca(), ca_.cert_pem());
  auto files = LoadOk(Ca());
  ASSERT_NE(files, nullptr);
  const auto before = files->store().Current();
  TestAuthority other("another-client-ca");
  WriteFileAtomically(Ca(), other.cert_pem());
  EXPECT_EQ(files->CheckFiles(), TlsFiles::Change::kReloaded);
  EXPECT_NE(files->store().Current(), before);
}

TEST_F(TlsFilesTest, TheServerContextAsksForClientCertificatesOnlyWithACa) {
  Install();
  WriteFileAtomically(Ca(), ca_.cert_pem());
  for (bool with_ca : {false, true}) {
    SCOPED_TRACE(with_ca ? "with a client CA" : "without one");
    auto files = LoadOk(with_ca ? Ca() : "");
    ASSERT_NE(files, nullptr);
    std::string error;
    SSL_CTX* ctx = files->NewServerContext(&error);
    ASSERT_NE(ctx, nullptr) << error;
    EXPECT_EQ(SSL_CTX_get_verify_mode(ctx), with_ca ? SSL_VERIFY_PEER : SSL_VERIFY_NONE);
    EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx), TLS1_2_VERSION);
    SSL_CTX_free(ctx);
  }
}

}  // namespace
}  // namespace kvgpu::https
