// The API server's rules the webhook's config is held to: what it accepts is accepted here, what
// it refuses is refused (names, keys, env names, paths, quantities).
#include "webhook/api_rules.h"

#include <gtest/gtest.h>

namespace kvgpu::webhook {
namespace {

using nlohmann::json;

TEST(ApiRules, DnsLabelsAreLowerCaseAlphanumericWithInnerDashesUpTo63) {
  EXPECT_TRUE(IsDnsLabel("nvidia-gridd"));
  EXPECT_TRUE(IsDnsLabel("a1"));
  EXPECT_TRUE(IsDnsLabel(std::string(63, 'a')));
  EXPECT_FALSE(IsDnsLabel("-a"));
  EXPECT_FALSE(IsDnsLabel("a-"));
  EXPECT_FALSE(IsDnsLabel("A"));
  EXPECT_FALSE(IsDnsLabel("a.b"));
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a')));
  EXPECT_FALSE(IsDnsLabel(""));
}

TEST(ApiRules, SubdomainsAreDotSeparatedLabelsUpTo253) {
  EXPECT_TRUE(IsDnsSubdomain("tencent.com"));
  EXPECT_FALSE(IsDnsSubdomain("tencent..com"));
  EXPECT_FALSE(IsDnsSubdomain(".tencent.com"));
  std::string long_name;
  while (long_name.size() < 254) long_name += "abcdefgh.";
  EXPECT_FALSE(IsDnsSubdomain(long_name.substr(0, 254)));
}

TEST(ApiRules, QualifiedNamesTakeAnOptionalSubdomainPrefix) {
  EXPECT_TRUE(IsQualifiedName("kata-vgpu.tencent.com/injected"));
  EXPECT_TRUE(IsQualifiedName("Injected_1.x"));
  EXPECT_FALSE(IsQualifiedName("Tencent.com/x")) << "the prefix is a lower-case subdomain";
  EXPECT_FALSE(IsQualifiedName("tencent.com/"));
  EXPECT_FALSE(IsQualifiedName("tencent.com/-x"));
  EXPECT_FALSE(IsQualifiedName("a/" + std::string(64, 'b')));
}

TEST(ApiRules, EnvNamesFollowTheApiServersCharacterRule) {
  EXPECT_TRUE(IsEnvName("NVIDIA_VISIBLE_DEVICES"));
  EXPECT_TRUE(IsEnvName("my.var-1"));
  EXPECT_FALSE(IsEnvName("1ABC"));
  EXPECT_FALSE(IsEnvName("A B"));
  EXPECT_FALSE(IsEnvName(""));
}

TEST(ApiRules, OnlyAbsolutePathStringsAreAbsolutePaths) {
  EXPECT_TRUE(IsAbsolutePath(json("/usr/local/nvidia")));
  EXPECT_FALSE(IsAbsolutePath(json("usr/local")));
  EXPECT_FALSE(IsAbsolutePath(json("")));
  EXPECT_FALSE(IsAbsolutePath(json(7)));
}

TEST(ApiRules, QuantitiesParseWithEverySuffixKindAndRefuseTheRest) {
  EXPECT_DOUBLE_EQ(static_cast<double>(*QuantityValue(json("100m"))), 0.1);
  EXPECT_DOUBLE_EQ(static_cast<double>(*QuantityValue(json("64Mi"))), 64.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(static_cast<double>(*QuantityValue(json("1.5G"))), 1.5e9);
  EXPECT_DOUBLE_EQ(static_cast<double>(*QuantityValue(json("2e3"))), 2000.0);
  EXPECT_DOUBLE_EQ(static_cast<double>(*QuantityValue(json(".5"))), 0.5);
  EXPECT_DOUBLE_EQ(static_cast<double>(*QuantityValue(json(3))), 3.0);
  for (const char* bad : {"", "Mi", "1Qi", "1.2.3", "1e", "1e99999", "one"}) {
    EXPECT_FALSE(QuantityValue(json(bad))) << bad;
  }
  EXPECT_FALSE(QuantityValue(json::array()));
}

}  // namespace
}  // namespace kvgpu::webhook
