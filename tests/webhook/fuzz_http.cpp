// libFuzzer target for the HTTP framing of the webhook's server: never crash, never claim more
// bytes than given, and a request's body is exactly its Content-Length.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "webhook/http_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgpu::webhook;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ParsedRequest parsed;
  ParseResult result = ParseHttpRequest(in, 4096, parsed);
  if (result == ParseResult::kRequest) {
    if (parsed.consumed > size || parsed.request.body.size() != parsed.body_length ||
        parsed.body_length > 4096)
      std::abort();
  }
  if (result == ParseResult::kError && (parsed.error_status < 400 || parsed.error.empty()))
    std::abort();
  return 0;
}
