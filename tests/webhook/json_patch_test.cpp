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

// The paths go out through common/json_string.h: whatever bytes a path holds, the patch is JSON
// (bytes that are not UTF-8 become U+FFFD; before, they went out as they were and the API server
// refused the whole patch).
TEST(JsonPatch, AnyPathKeepsThePatchJson) {
  PatchBuilder patch;
  patch.Add(std::string("/a\"b\\c\n\x01", 8), 1);
  patch.Add("/bad\xff\xc3", 2);
  patch.Add("/caf\xc3\xa9", 3);
  const auto ops = nlohmann::json::parse(patch.Text(), nullptr, false);
  ASSERT_FALSE(ops.is_discarded()) << patch.Text();
  EXPECT_EQ(ops[0]["path"], std::string("/a\"b\\c\n\x01", 8));
  EXPECT_EQ(ops[1]["path"], "/bad\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(ops[2]["path"], "/caf\xc3\xa9");
}

}  // namespace
}  // namespace kvgpu::webhook
