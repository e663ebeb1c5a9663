// Resource names: the default and profile styles, and the checks kubelet applies.
#include "deviceplugin/model/resource_naming.h"

#include <gtest/gtest.h>

#include "mdev/nvidia.h"

namespace kvgpu::deviceplugin {
namespace {

mdev::VgpuType Type(std::string id, std::optional<std::string> name = std::nullopt) {
  mdev::VgpuType type;
  type.id = std::move(id);
  type.name = name;
  if (name) type.profile = mdev::ParseNvidiaProfile(*name);
  return type;
}

TEST(ResourceNamingTest, ResourceNameFollowsTheTypeAndTheStyle) {
  struct Case {
    std::string description;
    NamingOptions options;
    mdev::VgpuType type;
    std::string expected;  // empty: refused
  };
  const NamingOptions type_style;
  const NamingOptions profile_style{"tencent.com", NamingStyle::kProfile};
  const std::vector<Case> cases = {
      {"nvidia-<N> -> vgpu-<N>", type_style, Type("nvidia-222", "GRID T4-1B"),
       "tencent.com/vgpu-222"},
      {"vendor VFIO id <N> -> vgpu-<N>", type_style, Type("1414", "NVIDIA H200X-1-18C"),
       "tencent.com/vgpu-1414"},
      {"other drivers keep the type id", type_style, Type("mtty-2", "Dual port serial"),
       "tencent.com/vgpu-mtty-2"},
      {"i915 GVT-g type id with upper case and underscores", type_style, Type("i915-GVTg_V5_4"),
       "tencent.com/vgpu-i915-GVTg_V5_4"},
      {"profile style lower-cases the profile", profile_style, Type("nvidia-230", "GRID T4-1Q"),
       "tencent.com/vgpu-t4-1q"},
      {"profile style with a MIG-backed profile", profile_style, Type("1414", "NVIDIA H200X-1-18C"),
       "tencent.com/vgpu-h200x-1-18c"},
      {"profile style falls back for types without an NVIDIA name", profile_style,
       Type("mtty-1", "Single port serial"), "tencent.com/vgpu-mtty-1"},
      {"another domain",
       {"gpu.example.org", NamingStyle::kType},
       Type("nvidia-11"),
       "gpu.example.org/vgpu-11"},
      {"a type id with characters a resource name cannot hold", type_style, Type("bad type!"), ""},
      {"a type id too long for the 63-character name part", type_style, Type(std::string(60, 'a')),
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    Result<std::string> name = ResourceNameFor(c.options, c.type);
    if (c.expected.empty()) {
      ASSERT_FALSE(name.ok());
      EXPECT_NE(name.status().message().find(c.type.id), std::string::npos)
          << "the error names the type: " << name.status().message();
    } else {
      ASSERT_TRUE(name.ok()) << name.status().ToString();
      EXPECT_EQ(*name, c.expected);
    }
  }
}

TEST(ResourceNamingTest, DomainsAndNamesAreCheckedAsKubeletDoes) {
  struct Case {
    std::string description;
    std::string name;
    bool valid;
  };
  const std::vector<Case> cases = {
      {"plain", "tencent.com/vgpu-222", true},
      {"no domain", "vgpu-222", false},
      {"two slashes", "a.com/b/c", false},
      {"upper-case domain", "Tencent.com/vgpu-222", false},
      {"kubernetes.io is reserved", "kubernetes.io/vgpu-222", false},
      {"subdomains of kubernetes.io too", "gpu.kubernetes.io/vgpu-222", false},
      {"a domain merely ending in the letters is fine", "notkubernetes.io/vgpu", true},
      {"name part must start alphanumeric", "tencent.com/-vgpu", false},
      {"name part may hold dots and underscores", "tencent.com/vgpu_1.q", true},
      {"empty name part", "tencent.com/", false},
      {"63 characters is the limit", "tencent.com/" + std::string(63, 'a'), true},
      {"64 is too many", "tencent.com/" + std::string(64, 'a'), false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    EXPECT_EQ(ValidateExtendedResourceName(c.name).ok(), c.valid);
  }
}

TEST(ResourceNamingTest, SocketNamesAreDerivedFromTheNamePart) {
  EXPECT_EQ(SocketNameFor("tencent.com/vgpu-222"), "kata-vgpu-vgpu-222.sock");
  EXPECT_EQ(ParseNamingStyle("profile").value(), NamingStyle::kProfile);
  EXPECT_FALSE(ParseNamingStyle("fancy").ok());
}

}  // namespace
}  // namespace kvgpu::deviceplugin
