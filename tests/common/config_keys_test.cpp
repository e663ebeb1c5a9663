// The unknown-key rule of both configs: the first unknown key named with where it was and what
// is known there; nothing said when every key is known.
#include "common/config_keys.h"

#include <gtest/gtest.h>

namespace kvgpu {
namespace {

TEST(ConfigKeys, TheFirstUnknownKeyIsNamedWithWhatIsKnownThere) {
  EXPECT_EQ(UnknownKeyMessage({"dir", "enable", "x"}, {"dir", "enabled"}, "cdi"),
            "unknown key 'enable' in cdi (known here: dir, enabled)");
  EXPECT_EQ(UnknownKeyMessage({"dir", "enabled"}, {"dir", "enabled"}, "cdi"), "");
  EXPECT_EQ(UnknownKeyMessage({}, {}, "the config"), "");
}

}  // namespace
}  // namespace kvgpu
