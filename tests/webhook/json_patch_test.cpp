#include "webhook/json_patch.h"

#include <gtest/gtest.h>

namespace kvgpu::webhook {
namespace {

TEST(JsonPatch, PointerTokensEscapeTildeBeforeSlash) {
  struct Case {
    const char* in;
    const char* out;
  };
  for (const Case& c : std::vector<Case>{{"plain", "plain"},
                                         {"a/b", "a~1b"},
                                         {"a~b", "a~0b"},
                                         {"~1", "~01"},  // not "~1" read back as "/"
                                         {"/~/", "~1~0~1"},
                                         {"", ""}}) {
    SCOPED_TRACE(c.in);
    EXPECT_EQ(EscapePointerToken(c.in), c.out);
    // nlohmann's own pointer parser reads it back to the same key.
    nlohmann::json doc = {{c.in, 1}};
    EXPECT_EQ(doc.at(nlohmann::json::json_pointer("/" + EscapePointerToken(c.in))), 1);
  }
}

TEST(JsonPatch, BuilderWritesOperationsInOrderAsValidJson) {
  PatchBuilder patch;
  EXPECT_EQ(patch.Text(), "[]");
  patch.Add("/a", 1);
  patch.AddJson("/b/-", R"({"k":"v"})");
  patch.Add("/metadata/annotations/" + EscapePointerToken("q\"uote\\/x"), "t");
  auto ops = nlohmann::json::parse(patch.Text());
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0], (nlohmann::json{{"op", "add"}, {"path", "/a"}, {"value", 1}}));
  EXPECT_EQ(ops[1]["value"]["k"], "v");
  EXPECT_EQ(ops[2]["path"], "/metadata/annotations/q\"uote\\~1x");
}

TEST(JsonPatch, JsonStringsEscapeQuotesBackslashesAndControls) {
  std::string out;
  AppendJsonString(out, std::string("a\"b\\c\n\x01", 7));
  EXPECT_EQ(out, R"("a\"b\\c\u000a\u0001")");
  EXPECT_EQ(nlohmann::json::parse(out), std::string("a\"b\\c\n\x01", 7));
}

}  // namespace
}  // namespace kvgpu::webhook
