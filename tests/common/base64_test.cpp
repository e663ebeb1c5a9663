// The one base64 codec: RFC 4648's test vectors both ways, binary bytes, and the malformed texts
// a kubeconfig or a checkpoint could hold refused with the reason.
#include "common/base64.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvgpu {
namespace {

struct Vector {
  std::string bytes;
  std::string text;
};

const std::vector<Vector> kRfc4648 = {{"", ""},
                                      {"f", "Zg=="},
                                      {"fo", "Zm8="},
                                      {"foo", "Zm9v"},
                                      {"foob", "Zm9vYg=="},
                                      {"fooba", "Zm9vYmE="},
                                      {"foobar", "Zm9vYmFy"},
                                      {std::string("\xff\xfe\x00", 3), "//4A"}};

TEST(Base64, EncodesRfc4648TestVectors) {
  for (const auto& v : kRfc4648) {
    SCOPED_TRACE(v.text);
    EXPECT_EQ(Base64Encode(v.bytes), v.text);
  }
}

TEST(Base64, DecodesRfc4648TestVectorsAndSkipsLineBreaks) {
  for (const auto& v : kRfc4648) {
    SCOPED_TRACE(v.text);
    Base64Decoded decoded = Base64Decode(v.text);
    ASSERT_TRUE(decoded.ok()) << decoded.error;
    EXPECT_EQ(decoded.bytes, v.bytes);
  }
  Base64Decoded wrapped = Base64Decode("Zm9v\nYmFy\r\n");
  ASSERT_TRUE(wrapped.ok());
  EXPECT_EQ(wrapped.bytes, "foobar");
}

TEST(Base64, MalformedTextIsRefusedWithTheReason) {
  struct Bad {
    const char* text;
    const char* reason;
  };
  for (const Bad& bad : {Bad{"Zm9v!", "unexpected character"}, Bad{"Zg==Zg==", "after padding"},
                         Bad{"Zm9", "multiple of 4"}, Bad{"Z===", "multiple of 4"},
                         Bad{"Zm9vY===", "multiple of 4"}}) {
    SCOPED_TRACE(bad.text);
    Base64Decoded decoded = Base64Decode(bad.text);
    EXPECT_FALSE(decoded.ok());
    EXPECT_NE(decoded.error.find(bad.reason), std::string::npos) << decoded.error;
    EXPECT_TRUE(decoded.bytes.empty()) << "nothing half-decoded is handed on";
  }
}

}  // namespace
}  // namespace kvgpu
