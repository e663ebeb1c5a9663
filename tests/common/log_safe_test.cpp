// Peer-supplied strings in logs and answers (#14 item 7): escaped so they cannot forge a line,
// capped so they cannot fill the log or the answer.
#include "common/log_safe.h"

#include <gtest/gtest.h>

namespace kvgpu {
namespace {

TEST(LogSafeTest, EscapesWhatCouldForgeALineAndCapsTheLength) {
  EXPECT_EQ(LogSafe("0000:3b:00.0-nvidia-222-0"), "0000:3b:00.0-nvidia-222-0");
  EXPECT_EQ(LogSafe("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(LogSafe("q\"\\"), "q\\\"\\\\");
  EXPECT_EQ(LogSafe(std::string("\x1b[31m\xff", 6)), "\\x1b[31m\\xff");
  std::string big(1 << 20, 'x');
  std::string shown = LogSafe(big);
  EXPECT_LT(shown.size(), 200u);
  EXPECT_NE(shown.find("(1048576 bytes)"), std::string::npos) << shown;
  EXPECT_EQ(LogSafe("abcdef", 3), "abc...(6 bytes)");
}

}  // namespace
}  // namespace kvgpu
