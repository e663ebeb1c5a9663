// RFC 4648 base64 (the standard alphabet, '=' padding), the one codec of the project: the
// webhook's JSON Patch in an AdmissionReview, kubeconfig `*-data` fields, kubelet's checkpoint.
#pragma once

#include <string>
#include <string_view>

namespace kvgpu {

std::string Base64Encode(std::string_view bytes);
// Appends the encoding of `bytes` to `out` (the webhook writes its patch straight into the answer).
void Base64EncodeAppend(std::string& out, std::string_view bytes);

struct Base64Decoded {
  std::string bytes;
  std::string error;  // empty when the text decoded
  bool ok() const { return error.empty(); }
};

// Whitespace (as PEM-style line breaks in kubeconfigs) is skipped; anything else outside the
// alphabet, data after padding, or a length that is not a multiple of 4 is an error.
Base64Decoded Base64Decode(std::string_view text);

}  // namespace kvgpu
