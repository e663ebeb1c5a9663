#include "webhook/http_parse.h"

#include <algorithm>
#include <cctype>

namespace kvgpu::webhook {
namespace {

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

}  // namespace

ParseResult ParseHttpRequest(std::string_view in, size_t max_body, ParsedRequest& out) {
  size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (in.size() > kMaxHeaderBytes) {
      out.error_status = 431;
      out.error = "request headers exceed 64 KiB";
      return ParseResult::kError;
    }
    return ParseResult::kIncomplete;
  }
  std::string_view head(in.data(), end);
  size_t line_end = head.find("\r\n");
  std::string_view line = head.substr(0, line_end);
  size_t sp1 = line.find(' ');
  size_t sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1 || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
    out.error_status = 400;
    out.error = "malformed HTTP request line";
    return ParseResult::kError;
  }
  out.request.method = std::string(line.substr(0, sp1));
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  out.request.path = std::string(target.substr(0, target.find('?')));
  out.keep_alive = line.substr(sp2 + 1) != "HTTP/1.0";

  bool has_length = false;
  std::string_view rest = line_end == std::string_view::npos ? "" : head.substr(line_end + 2);
  while (!rest.empty()) {
    size_t eol = rest.find("\r\n");
    std::string_view header = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? "" : rest.substr(eol + 2);
    size_t colon = header.find(':');
    if (colon == std::string_view::npos) {
      out.error_status = 400;
      out.error = "malformed HTTP header line";
      return ParseResult::kError;
    }
    std::string_view name = header.substr(0, colon);
    std::string_view value = Trim(header.substr(colon + 1));
    if (EqualsNoCase(name, "Content-Length")) {
      if (value.empty() || value.size() > 12 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          (has_length && std::stoull(std::string(value)) != out.body_length)) {
        out.error_status = 400;
        out.error = "invalid Content-Length";
        return ParseResult::kError;
      }
      has_length = true;
      out.body_length = std::stoull(std::string(value));
    } else if (EqualsNoCase(name, "Content-Type")) {
      out.request.content_type = std::string(value);
    } else if (EqualsNoCase(name, "Connection")) {
      if (EqualsNoCase(value, "close")) out.keep_alive = false;
      if (EqualsNoCase(value, "keep-alive")) out.keep_alive = true;
    } else if (EqualsNoCase(name, "Transfer-Encoding")) {
      out.error_status = 411;
      out.error = "chunked request bodies are not supported; send Content-Length";
      return ParseResult::kError;
    } else if (EqualsNoCase(name, "Expect")) {
      out.expect_continue = EqualsNoCase(value, "100-continue");
    }
  }
  out.header_length = end + 4;
  if (out.body_length > max_body) {
    out.error_status = 400;
    out.error = "bad AdmissionReview request: body of " + std::to_string(out.body_length) +
                " bytes exceeds the 3 MiB limit";
    return ParseResult::kError;
  }
  if (in.size() < out.header_length + out.body_length) return ParseResult::kIncomplete;
  out.request.body = std::string(in.substr(out.header_length, out.body_length));
  out.consumed = out.header_length + out.body_length;
  return ParseResult::kRequest;
}

}  // namespace kvgpu::webhook
