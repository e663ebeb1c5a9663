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

TEST(JsonPatch, Base64MatchesRfc4648TestVectors) {
  struct Case {
    const char* in;
    const char* out;
  };
  for (const Case& c : std::vector<Case>{{"", ""},
                                         {"f", "Zg=="},
                                         {"fo", "Zm8="},
                                         {"foo", "Zm9v"},
                                         {"foob", "Zm9vYg=="},
                                         {"fooba", "Zm9vYmE="},
                                         {"foobar", "Zm9vYmFy"}}) {
    SCOPED_TRACE(c.in);
    EXPECT_EQ(Base64Encode(c.in), c.out);
  }
  EXPECT_EQ(Base64Encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(JsonPatch, BuilderKeepsOperationOrder) {
  PatchBuilder patch;
  patch.Add("/a", 1);
  patch.Add("/b/-", "x");
  ASSERT_EQ(patch.operations().size(), 2u);
  EXPECT_EQ(patch.operations()[0]["op"], "add");
  EXPECT_EQ(patch.operations()[1]["path"], "/b/-");
}

}  // namespace
}  // namespace kvgpu::webhook
