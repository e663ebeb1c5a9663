// libFuzzer target for the server's request framing (Beast's parser with the server's limits):
// never crash, and every outcome is one the server can answer: a complete request, "more bytes",
// or a 4xx status.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "https/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  int status = kvgpu::https::FrameRequestForFuzzing(in, 1024, 4096);
  if (!(status == 0 || status == -1 || (status >= 400 && status < 500))) std::abort();
  return 0;
}
