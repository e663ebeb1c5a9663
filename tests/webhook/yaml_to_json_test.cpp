// The config's YAML as JSON: YAML 1.2 core-schema typing for plain scalars, quoted scalars kept
// as text, and a user's file laid over the defaults key by key.
#include "webhook/yaml_to_json.h"

#include <gtest/gtest.h>

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

TEST(YamlToJson, PlainScalarsAreTypedQuotedOnesStayText) {
  auto parsed = ParseYamlMapping(
      "a: true\nb: ~\nc: 42\nd: -1.5e3\ne: '42'\nf: text\ng: 99999999999999999999\n", "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const json& j = *parsed;
  EXPECT_EQ(j["a"], true);
  EXPECT_TRUE(j["b"].is_null());
  EXPECT_EQ(j["c"], 42);
  EXPECT_DOUBLE_EQ(j["d"].get<double>(), -1500.0);
  EXPECT_EQ(j["e"], "42");
  EXPECT_EQ(j["f"], "text");
  EXPECT_EQ(j["g"], "99999999999999999999") << "too large for an integer: kept as text";
}

TEST(YamlToJson, EmptyTextIsAnEmptyMappingAndNonMappingsAreConfigErrors) {
  auto empty = ParseYamlMapping("", "test");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, json::object());
  auto list = ParseYamlMapping("- a\n- b\n", "the webhook config");
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), ErrorCode::kConfig);
  EXPECT_NE(list.status().message().find("the webhook config must be a YAML mapping"),
            std::string::npos);
  auto broken = ParseYamlMapping("a: [unclosed\n", "x");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("not valid YAML"), std::string::npos);
}

TEST(YamlToJson, MappingsMergeKeyByKeyAndEverythingElseReplacesWhole) {
  json base = {{"driverInit", {{"image", "a"}, {"command", {"load"}}}}, {"list", {1, 2}}};
  MergeOver(base, {{"driverInit", {{"image", "b"}}}, {"list", {3}}});
  EXPECT_EQ(base["driverInit"]["image"], "b");
  EXPECT_EQ(base["driverInit"]["command"], json({"load"})) << "the default command is kept";
  EXPECT_EQ(base["list"], json({3}));
}

}  // namespace
}  // namespace kvgpu::webhook
