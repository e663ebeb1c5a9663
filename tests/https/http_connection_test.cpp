// One connection of the HTTPS server (https/http_connection.cpp) over real TLS on loopback: the
// request handed to the handler, keep-alive and pipelining, `Expect: 100-continue`, the refusals
// decided from the head, a handler that throws, the idle and request timeouts; and the request
// framing the fuzzer drives (FrameRequestForFuzzing).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "https/http_server.h"
#include "tests/https/https_server_harness.h"

namespace kvgpu::https::testing {
namespace {

std::string Post(const std::string& path, const std::string& body) {
  return "POST " + path +
         " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST_F(HttpsServerTest, TheHandlerGetsTheRequestWithoutItsQueryAndTheConnectionStaysOpen) {
  ASSERT_NO_FATAL_FAILURE(Serve(Echo, {}));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  auto first = connection->Request("POST", "/mutate?timeout=10s", R"({"a":1})");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, R"(POST /mutate|application/json|{"a":1})");
  auto second = connection->Request("GET", "/healthz", "", "");
  ASSERT_TRUE(second.has_value()) << "keep-alive: the same connection serves the next request";
  EXPECT_EQ(second->body, "GET /healthz||");
}

TEST_F(HttpsServerTest, PipelinedRequestsAreAnsweredInTheirOrder) {
  ASSERT_NO_FATAL_FAILURE(Serve(Echo, {}));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  ASSERT_TRUE(connection->Send(Post("/one", "1") + Post("/two", "22") + Post("/three", "333")));
  for (const char* expected : {"POST /one|application/json|1", "POST /two|application/json|22",
                               "POST /three|application/json|333"}) {
    auto answer = connection->Receive();
    ASSERT_TRUE(answer.has_value()) << expected;
    EXPECT_EQ(answer->body, expected);
  }
}

TEST_F(HttpsServerTest, ExpectContinueIsAnsweredBeforeTheBodyIsSent) {
  ASSERT_NO_FATAL_FAILURE(Serve(Echo, {}));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  ASSERT_TRUE(
      connection->Send("POST /mutate HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
                       "Content-Length: 5\r\n\r\n"));
  auto interim = connection->Receive();
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(connection->Send("hello"));
  auto answer = connection->Receive();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, "POST /mutate||hello");
}

TEST_F(HttpsServerTest, RequestsRefusedFromTheHeadAreAnsweredAndTheConnectionEnds) {
  HttpsServerOptions options;
  options.max_header_bytes = 1024;
  options.max_body_bytes = 1 << 20;  // 1 MiB
  std::atomic<int> handled{0};
  ASSERT_NO_FATAL_FAILURE(Serve(
      [&](const HttpRequest& request) {
        ++handled;
        return Echo(request);
      },
      options));
  struct Case {
    std::string description;
    std::string head;
    int status;
    std::string says;
  };
  const Case cases[] = {
      {"a head past the header limit",
       "GET / HTTP/1.1\r\nHost: localhost\r\nX-Padding: " + std::string(4096, 'x') + "\r\n\r\n",
       431, ""},
      {"a declared body past the body limit, refused before it is sent",
       "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2097152\r\n\r\n", 413,
       "the body is more than the 1 MiB"},
      {"a chunked body", "POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n",
       411, "a Content-Length body is required"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    auto connection = Connect();
    ASSERT_NE(connection, nullptr);
    ASSERT_TRUE(connection->Send(c.head));
    auto answer = connection->Receive();
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->status, c.status);
    EXPECT_NE(answer->body.find(c.says), std::string::npos) << answer->body;
    EXPECT_FALSE(connection->Receive().has_value()) << "the server closes after a refusal";
  }
  EXPECT_EQ(handled.load(), 0) << "no refused request reaches the handler";
}

TEST_F(HttpsServerTest, AHandlerThatThrowsFailsItsRequestNotTheServer) {
  ASSERT_NO_FATAL_FAILURE(Serve(
      [](const HttpRequest& request) -> HttpResponse {
        if (request.path == "/boom") throw std::runtime_error("boom");
        return Echo(request);
      },
      {}));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  auto failed = connection->Request("POST", "/boom", "{}");
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->status, 500);
  EXPECT_EQ(failed->body, "internal error\n");
  EXPECT_FALSE(connection->Request("GET", "/healthz", "", "").has_value())
      << "an answer of 500 or more ends the connection";
  auto fresh = Connect();
  ASSERT_NE(fresh, nullptr);
  auto served = fresh->Request("GET", "/healthz", "", "");
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->status, 200);
}

TEST_F(HttpsServerTest, TheClientCertificateIsReportedOnlyWhenItVerified) {
  std::mutex mutex;
  std::vector<bool> seen;
  ASSERT_NO_FATAL_FAILURE(Serve(
      [&](const HttpRequest& request) {
        std::lock_guard lock(mutex);
        seen.push_back(request.client_certificate);
        return Echo(request);
      },
      {}, /*client_ca=*/true));
  const CertAndKey client = ca().Issue("kube-apiserver", false);
  for (bool present : {false, true}) {
    ClientOptions options;
    if (present) {
      options.cert_pem = client.cert_pem;
      options.key_pem = client.key_pem;
    }
    auto connection = Connect(options);
    ASSERT_NE(connection, nullptr);
    auto answer = connection->Request("GET", "/healthz", "", "");
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->status, 200);
  }
  std::lock_guard lock(mutex);
  EXPECT_EQ(seen, (std::vector<bool>{false, true}));
}

TEST_F(HttpsServerTest, AConnectionIdleBetweenRequestsIsClosedAfterTheIdleTimeout) {
  HttpsServerOptions options;
  options.idle_timeout = std::chrono::seconds(1);
  options.request_timeout = std::chrono::seconds(600);  // so only the idle timeout can close it
  ASSERT_NO_FATAL_FAILURE(Serve(Echo, options));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  ASSERT_TRUE(connection->Request("GET", "/healthz", "", "").has_value());
  EXPECT_TRUE(Eventually([&] { return server().connections() == 0; }))
      << server().connections() << " connection(s) still open";
}

TEST_F(HttpsServerTest, ARequestThatStopsComingIsCutOffByTheRequestTimeout) {
  HttpsServerOptions options;
  options.idle_timeout = std::chrono::seconds(600);  // so only the request timeout can close it
  // It also bounds the handshake: long enough for one on a loaded machine, far below the wait.
  options.request_timeout = std::chrono::seconds(5);
  ASSERT_NO_FATAL_FAILURE(Serve(Echo, options));
  auto connection = Connect();
  ASSERT_NE(connection, nullptr);
  ASSERT_TRUE(
      connection->Send("POST /mutate HTTP/1.1\r\nHost: localhost\r\n"
                       "Content-Length: 100\r\n\r\nonly ten.."));
  EXPECT_TRUE(Eventually([&] { return server().connections() == 0; }))
      << server().connections() << " connection(s) still open";
}

TEST(FrameRequestForFuzzingTest, AnswersWhatTheServerWouldForEachFraming) {
  const std::string head = "POST /mutate HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n";
  struct Case {
    std::string description;
    std::string bytes;
    int answer;  // 0: acceptable, -1: more bytes needed, else the status
  };
  const Case cases[] = {
      {"a complete request", head + "body", 0},
      {"a body still coming", head + "bo", -1},
      {"a head still coming", "POST /mutate HTTP/1.1\r\nHost:", -1},
      {"a head past the header limit",
       "GET / HTTP/1.1\r\nX: " + std::string(2048, 'x') + "\r\n\r\n", 431},
      {"a declared body past the body limit",
       "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4096\r\n\r\n", 413},
      {"a chunked body", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", 411},
      {"not HTTP", "\x01\x02 nonsense\r\n\r\n", 400},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    EXPECT_EQ(FrameRequestForFuzzing(c.bytes, 1024, 1024), c.answer);
  }
}

}  // namespace
}  // namespace kvgpu::https::testing
