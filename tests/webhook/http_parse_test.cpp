// HTTP/1.1 framing of the webhook's own server: what a request is, when it is not complete yet,
// and which requests are refused with which status.
#include "webhook/http_parse.h"

#include <gtest/gtest.h>

namespace kvgpu::webhook {
namespace {

TEST(HttpParse, CompleteRequestsAreFramedByContentLength) {
  std::string in =
      "POST /mutate?timeout=10s HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}GET /healthz HTTP/1.1\r\n\r\n";
  ParsedRequest first;
  ASSERT_EQ(ParseHttpRequest(in, 1024, first), ParseResult::kRequest);
  EXPECT_EQ(first.request.method, "POST");
  EXPECT_EQ(first.request.path, "/mutate");
  EXPECT_EQ(first.request.content_type, "application/json");
  EXPECT_EQ(first.request.body, "{}");
  EXPECT_TRUE(first.keep_alive);
  // Pipelined: the next request starts right after the body.
  ParsedRequest second;
  ASSERT_EQ(ParseHttpRequest(std::string_view(in).substr(first.consumed), 1024, second),
            ParseResult::kRequest);
  EXPECT_EQ(second.request.path, "/healthz");
  EXPECT_EQ(second.request.body, "");
}

TEST(HttpParse, PartialRequestsWaitForMore) {
  std::string full =
      "POST /mutate HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello";
  for (size_t cut = 0; cut < full.size(); ++cut) {
    SCOPED_TRACE(cut);
    ParsedRequest parsed;
    EXPECT_EQ(ParseHttpRequest(full.substr(0, cut), 1024, parsed), ParseResult::kIncomplete);
    if (cut >= full.find("hello")) {
      EXPECT_TRUE(parsed.expect_continue);
    }
  }
  ParsedRequest parsed;
  EXPECT_EQ(ParseHttpRequest(full, 1024, parsed), ParseResult::kRequest);
}

TEST(HttpParse, ConnectionHandling) {
  struct Case {
    const char* description;
    const char* request;
    bool keep_alive;
  };
  for (const Case& c : std::vector<Case>{
           {"1.1 default", "GET / HTTP/1.1\r\n\r\n", true},
           {"1.1 close", "GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", false},
           {"1.0 default", "GET / HTTP/1.0\r\n\r\n", false},
           {"1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true}}) {
    SCOPED_TRACE(c.description);
    ParsedRequest parsed;
    ASSERT_EQ(ParseHttpRequest(c.request, 1024, parsed), ParseResult::kRequest);
    EXPECT_EQ(parsed.keep_alive, c.keep_alive);
  }
}

TEST(HttpParse, RefusedRequestsNameTheProblem) {
  struct Case {
    const char* description;
    std::string request;
    int status;
    const char* message_part;
  };
  std::vector<Case> table = {
      {"no version", "GET /\r\n\r\n", 400, "request line"},
      {"not HTTP", "HELLO\r\n\r\n", 400, "request line"},
      {"header without colon", "GET / HTTP/1.1\r\nbroken\r\n\r\n", 400, "header"},
      {"negative length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length"},
      {"huge length", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999\r\n\r\n", 400,
       "Content-Length"},
      {"two different lengths",
       "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400,
       "Content-Length"},
      {"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411, "chunked"},
      {"body over the limit", "POST / HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", 400, "3 MiB"},
      {"endless headers", "GET / HTTP/1.1\r\n" + std::string(70000, 'a'), 431, "64 KiB"},
  };
  for (const auto& c : table) {
    SCOPED_TRACE(c.description);
    ParsedRequest parsed;
    ASSERT_EQ(ParseHttpRequest(c.request, 1024, parsed), ParseResult::kError);
    EXPECT_EQ(parsed.error_status, c.status);
    EXPECT_NE(parsed.error.find(c.message_part), std::string::npos) << parsed.error;
  }
}

}  // namespace
}  // namespace kvgpu::webhook
