#include "common/json_string.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvgpu {
namespace {

using nlohmann::json;

// Valid UTF-8, quotes, backslashes and control characters: read back as the same string, written
// exactly as nlohmann writes it.
TEST(JsonStringTest, AnyUtf8TextReadsBackAsItself) {
  const std::vector<std::string> texts = {"gpu-node-1",
                                          "",
                                          "a\"b",
                                          "back\\slash",
                                          "tab\there",
                                          "nl\nand\rcr",
                                          std::string("nul\0x", 5),
                                          "\x01\x1f\x7f",
                                          "caf\xc3\xa9",
                                          "\xe2\x82\xac euro",
                                          "\xf0\x9f\x98\x80 emoji",
                                          "/slash/",
                                          "\xed\x9f\xbf last before surrogates",
                                          "\xf4\x8f\xbf\xbf highest"};
  for (const std::string& text : texts) {
    std::string out;
    AppendJsonString(out, text);
    EXPECT_EQ(json::parse(out), json(text)) << out;
    EXPECT_EQ(out, json(text).dump()) << "the very text nlohmann writes";
  }
}

TEST(JsonStringTest, QuotesBackslashesAndControlCharactersAreEscaped) {
  std::string out = "[";
  AppendJsonString(out, std::string("a\"b\\c\n\x01\x1f\t", 9));
  EXPECT_EQ(out, R"(["a\"b\\c\n\u0001\u001f\t")") << "appended, not replaced";
}

// Bytes that are not UTF-8 leave the answer JSON (each becomes U+FFFD); the valid text around them
// is kept as it is.
TEST(JsonStringTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  // A lone continuation byte, a truncated sequence, an overlong form, a surrogate,
  // above U+10FFFF, 0xff: each byte becomes U+FFFD, the rest is kept.
  const std::vector<std::pair<std::string, std::string>> broken = {
      {"a\x80"
       "b",
       "a\xef\xbf\xbd"
       "b"},
      {"x\xc3", "x\xef\xbf\xbd"},
      {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xff!", "\xef\xbf\xbd!"}};
  for (const auto& [text, read_back] : broken) {
    std::string out;
    AppendJsonString(out, text);
    const json parsed = json::parse(out, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << out;
    EXPECT_EQ(parsed, json(read_back)) << out;
  }

  std::string out;
  AppendJsonString(out, "caf\xc3\xa9 \xc3(");
  EXPECT_EQ(out, "\"caf\xc3\xa9 \\ufffd(\"");
}

}  // namespace
}  // namespace kvgpu
