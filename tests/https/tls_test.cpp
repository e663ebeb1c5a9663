// Server-side TLS (https/tls.h) on its own: a credential pair loaded from PEM files or refused with
// a message that names the file and the fault, and a server context that keeps TLS 1.2 as its
// floor, picks the store's current pair at every handshake, never resumes a session and checks
// client certificates when asked. Handshakes run in memory (a BIO pair), no socket.
#include "https/tls.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <ctime>
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

struct CtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using Ctx = std::unique_ptr<SSL_CTX, CtxFree>;

std::string CertPem(X509* cert) {
  if (cert == nullptr) return "";
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(size));
  BIO_free(bio);
  return out;
}

// Installs a PEM certificate and key on a client context.
bool UsePair(SSL_CTX* ctx, const CertAndKey& pair) {
  BIO* cert_bio = BIO_new_mem_buf(pair.cert_pem.data(), static_cast<int>(pair.cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(pair.key_pem.data(), static_cast<int>(pair.key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  const bool ok = cert != nullptr && key != nullptr && SSL_CTX_use_certificate(ctx, cert) == 1 &&
                  SSL_CTX_use_PrivateKey(ctx, key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  return ok;
}

struct ClientSide {
  int version = 0;  // 0: any from TLS 1.2 up; else exactly this one
  const CertAndKey* certificate = nullptr;
  SSL_SESSION* resume = nullptr;
};

struct Shaken {
  bool ok = false;
  std::string server_certificate;  // PEM, as the client saw it
  bool resumed = false;
  bool client_certificate_seen = false;  // the server got one and it verified
  std::shared_ptr<SSL_SESSION> session;  // the client's, to offer next time
};

// One handshake between a server on `server_ctx` and a client, through a BIO pair.
Shaken ShakeHands(SSL_CTX* server_ctx, const ClientSide& side = {}) {
  Ctx client_ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_min_proto_version(client_ctx.get(),
                                side.version != 0 ? side.version : TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(client_ctx.get(), side.version);
  if (side.certificate != nullptr) {
    EXPECT_TRUE(UsePair(client_ctx.get(), *side.certificate));
  }
  SSL* client = SSL_new(client_ctx.get());
  SSL* server = SSL_new(server_ctx);
  BIO* client_io = nullptr;
  BIO* server_io = nullptr;
  BIO_new_bio_pair(&client_io, 0, &server_io, 0);
  SSL_set_bio(client, client_io, client_io);
  SSL_set_bio(server, server_io, server_io);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);
  if (side.resume != nullptr) SSL_set_session(client, side.resume);
  Shaken out;
  bool client_done = false;
  bool server_done = false;
  bool failed = false;
  // Each round moves the handshake on by at least one flight while it can go on.
  for (int round = 0; round < 50 && !failed && !(client_done && server_done); ++round) {
    for (auto [ssl, done] : {std::pair{client, &client_done}, std::pair{server, &server_done}}) {
      if (*done || failed) continue;
      const int result = SSL_do_handshake(ssl);
      if (result == 1) {
        *done = true;
        continue;
      }
      const int error = SSL_get_error(ssl, result);
      failed = error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE;
    }
  }
  ERR_clear_error();
  out.ok = !failed && client_done && server_done;
  if (out.ok) {
    X509* seen = SSL_get1_peer_certificate(client);
    out.server_certificate = CertPem(seen);
    X509_free(seen);
    out.resumed = SSL_session_reused(client) == 1;
    out.client_certificate_seen =
        SSL_get0_peer_certificate(server) != nullptr && SSL_get_verify_result(server) == X509_V_OK;
    // A TLS 1.3 session comes with a ticket after the handshake; a TLS 1.2 one is there now.
    out.session.reset(SSL_get1_session(client), SSL_SESSION_free);
  }
  SSL_free(client);
  SSL_free(server);
  return out;
}

class TlsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return (dir_.path() / name).string(); }

  // Writes `pair` as <name>.crt and <name>.key.
  void Install(const std::string& name, const CertAndKey& pair) {
    WriteFileAtomically(Path(name + ".crt"), pair.cert_pem);
    WriteFileAtomically(Path(name + ".key"), pair.key_pem);
  }
  std::shared_ptr<const TlsCredentials> LoadOk(const std::string& name,
                                               const std::string& client_ca = "") {
    auto loaded = TlsCredentials::Load(Path(name + ".crt"), Path(name + ".key"), client_ca);
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    return loaded.ok() ? loaded.value() : nullptr;
  }
  Ctx ServerContext(TlsCredentialStore& store, bool verify_clients) {
    Ctx ctx(SSL_CTX_new(TLS_server_method()));
    EXPECT_TRUE(ConfigureServerContext(*ctx, &store, verify_clients));
    return ctx;
  }

  TestAuthority ca_{"kvgpu-tls-test-ca"};
  TempDir dir_;
};

TEST_F(TlsTest, APairLoadsAndTellsWhenItExpires) {
  Install("server", ca_.Issue("server.example", true, 3600));
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto credentials = LoadOk("server");
  ASSERT_NE(credentials, nullptr);
  // Issued for an hour from the moment it was made: the window only allows for clock steps.
  EXPECT_GE(credentials->NotAfterUnixSeconds(), now + 3600 - 300);
  EXPECT_LE(credentials->NotAfterUnixSeconds(), now + 3600 + 300);
  EXPECT_EQ(credentials->Describe().rfind("certificate valid until ", 0), 0u)
      << credentials->Describe();
  EXPECT_NE(credentials->Describe().find("GMT"), std::string::npos) << credentials->Describe();
}

TEST_F(TlsTest, EachFaultOfThePairIsRefusedWithTheFileItIsIn) {
  const CertAndKey pair = ca_.Issue("server.example", true);
  const CertAndKey other = ca_.Issue("other.example", true);
  WriteFileAtomically(Path("good.crt"), pair.cert_pem);
  WriteFileAtomically(Path("good.key"), pair.key_pem);
  WriteFileAtomically(Path("other.key"), other.key_pem);
  WriteFileAtomically(Path("text.crt"), "not a certificate\n");
  WriteFileAtomically(Path("text.key"), "not a key\n");
  WriteFileAtomically(Path("bad-ca.pem"), "not a bundle\n");
  struct Case {
    std::string description;
    std::string cert, key, ca;
    std::string says;
  };
  const Case cases[] = {
      {"no certificate file", "missing.crt", "good.key", "", "cannot open TLS certificate"},
      {"no PEM in the certificate file", "text.crt", "good.key", "", "no PEM certificate in"},
      {"no key file", "good.crt", "missing.key", "", "cannot open TLS key"},
      {"no PEM in the key file", "good.crt", "text.key", "", "no PEM private key in"},
      {"a key of another certificate (a rotation half written)", "good.crt", "other.key", "",
       "does not belong to certificate"},
      {"a client CA bundle that does not load", "good.crt", "good.key", "bad-ca.pem",
       "cannot load client CA bundle"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    auto loaded = TlsCredentials::Load(Path(c.cert), Path(c.key), c.ca.empty() ? "" : Path(c.ca));
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), ErrorCode::kInvalid);
    EXPECT_NE(loaded.status().message().find(c.says), std::string::npos)
        << loaded.status().message();
  }
}

TEST_F(TlsTest, CertificatesAfterTheLeafAreServedAsItsChain) {
  const CertAndKey pair = ca_.Issue("server.example", true);
  WriteFileAtomically(Path("chain.crt"), pair.cert_pem + ca_.cert_pem());
  WriteFileAtomically(Path("chain.key"), pair.key_pem);
  auto credentials = LoadOk("chain");
  ASSERT_NE(credentials, nullptr);
  Ctx ctx(SSL_CTX_new(TLS_server_method()));
  SSL* ssl = SSL_new(ctx.get());
  ASSERT_TRUE(credentials->Apply(ssl));
  EXPECT_EQ(Fingerprint(CertPem(SSL_get_certificate(ssl))), Fingerprint(pair.cert_pem));
  STACK_OF(X509)* chain = nullptr;
  ASSERT_EQ(SSL_get0_chain_certs(ssl, &chain), 1);
  ASSERT_NE(chain, nullptr);
  ASSERT_EQ(sk_X509_num(chain), 1);
  EXPECT_EQ(Fingerprint(CertPem(sk_X509_value(chain, 0))), Fingerprint(ca_.cert_pem()));
  SSL_free(ssl);
}

TEST_F(TlsTest, TheServerContextKeepsTls12AsItsFloorAndNoSessionState) {
  Install("server", ca_.Issue("server.example", true));
  TlsCredentialStore store(LoadOk("server"));
  Ctx ctx = ServerContext(store, false);
  EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx.get()), TLS1_2_VERSION);
  EXPECT_EQ(SSL_CTX_get_session_cache_mode(ctx.get()), SSL_SESS_CACHE_OFF);
  EXPECT_NE(SSL_CTX_get_options(ctx.get()) & SSL_OP_NO_TICKET, 0u);
  EXPECT_EQ(SSL_CTX_get_num_tickets(ctx.get()), 0u);
  EXPECT_EQ(SSL_CTX_get_verify_mode(ctx.get()), SSL_VERIFY_NONE);
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    SCOPED_TRACE(version);
    EXPECT_TRUE(ShakeHands(ctx.get(), {version}).ok);
  }
}

TEST_F(TlsTest, EachHandshakeTakesTheStoresCurrentPair) {
  const CertAndKey first = ca_.Issue("server.example", true);
  const CertAndKey second = ca_.Issue("server.example", true);
  Install("first", first);
  Install("second", second);
  TlsCredentialStore store(LoadOk("first"));
  Ctx ctx = ServerContext(store, false);
  Shaken before = ShakeHands(ctx.get());
  ASSERT_TRUE(before.ok);
  EXPECT_EQ(Fingerprint(before.server_certificate), Fingerprint(first.cert_pem));
  store.Replace(LoadOk("second"));
  Shaken after = ShakeHands(ctx.get());
  ASSERT_TRUE(after.ok);
  EXPECT_EQ(Fingerprint(after.server_certificate), Fingerprint(second.cert_pem))
      << "the same context serves the replaced pair from the next handshake on";
}

TEST_F(TlsTest, WithoutAPairEveryHandshakeFails) {
  TlsCredentialStore store(nullptr);
  Ctx ctx = ServerContext(store, false);
  EXPECT_FALSE(ShakeHands(ctx.get()).ok);
}

TEST_F(TlsTest, ASessionIsNeverResumed) {
  Install("server", ca_.Issue("server.example", true));
  TlsCredentialStore store(LoadOk("server"));
  Ctx ctx = ServerContext(store, false);
  Shaken first = ShakeHands(ctx.get(), {TLS1_2_VERSION});
  ASSERT_TRUE(first.ok);
  ASSERT_NE(first.session, nullptr);
  Shaken again = ShakeHands(ctx.get(), {TLS1_2_VERSION, nullptr, first.session.get()});
  ASSERT_TRUE(again.ok);
  EXPECT_FALSE(again.resumed) << "a resumed session would skip the client certificate check";
}

TEST_F(TlsTest, ClientCertificatesAreCheckedAgainstTheCaWhenAsked) {
  Install("server", ca_.Issue("server.example", true));
  WriteFileAtomically(Path("clients.pem"), ca_.cert_pem());
  TlsCredentialStore store(LoadOk("server", Path("clients.pem")));
  Ctx ctx = ServerContext(store, true);
  EXPECT_EQ(SSL_CTX_get_verify_mode(ctx.get()), SSL_VERIFY_PEER);

  const CertAndKey ours = ca_.Issue("kube-apiserver", false);
  Shaken certified = ShakeHands(ctx.get(), {0, &ours});
  ASSERT_TRUE(certified.ok);
  EXPECT_TRUE(certified.client_certificate_seen);

  // No certificate at all gets through (kubelet's probes); the server decides per path.
  Shaken anonymous = ShakeHands(ctx.get());
  ASSERT_TRUE(anonymous.ok);
  EXPECT_FALSE(anonymous.client_certificate_seen);

  TestAuthority stranger("someone-else-ca");
  const CertAndKey theirs = stranger.Issue("kube-apiserver", false);
  EXPECT_FALSE(ShakeHands(ctx.get(), {0, &theirs}).ok)
      << "a certificate that does not verify fails the handshake";
}

TEST(OpenSslErrorsTest, SaysWhatTheQueueHeldAndEmptiesIt) {
  ERR_clear_error();
  EXPECT_EQ(OpenSslErrors(), "no OpenSSL error recorded");
  // A failing call leaves its reason on the thread's queue.
  Ctx ctx(SSL_CTX_new(TLS_server_method()));
  EXPECT_EQ(SSL_CTX_use_certificate_file(ctx.get(), "/nonexistent/tls.crt", SSL_FILETYPE_PEM), 0);
  const std::string said = OpenSslErrors();
  EXPECT_NE(said, "no OpenSSL error recorded");
  EXPECT_FALSE(said.empty());
  EXPECT_EQ(ERR_peek_error(), 0u) << "read once, then gone";
}

}  // namespace
}  // namespace kvgpu::https
