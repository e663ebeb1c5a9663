// HTTP/1.1 request framing for webhook/https_server.h, apart so it can be tested and fuzzed on
// its own. Only what an AdmissionReview POST needs: request line, headers, Content-Length body.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "webhook/https_server.h"

namespace kvgpu::webhook {

inline constexpr size_t kMaxHeaderBytes = 64 * 1024;

enum class ParseResult { kIncomplete, kRequest, kError };

struct ParsedRequest {
  HttpRequest request;
  size_t consumed = 0;  // bytes of `in` the request took (head + body)
  bool keep_alive = true;
  bool expect_continue = false;
  size_t body_length = 0;
  size_t header_length = 0;  // 0 until the head is complete
  int error_status = 0;      // with kError: the HTTP status to answer
  std::string error;         // with kError: the message to answer
};

// Looks at the front of `in`: a complete request, not yet (kIncomplete; header_length and
// expect_continue are set once the head is there), or a request to refuse (kError).
ParseResult ParseHttpRequest(std::string_view in, size_t max_body, ParsedRequest& out);

}  // namespace kvgpu::webhook
