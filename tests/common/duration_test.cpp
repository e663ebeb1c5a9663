// Durations as the configs and flags write them: a whole number with ms, s or m, and nothing
// else (no sign, no fractions, no other units, no more than nine digits).
#include "common/duration.h"

#include <gtest/gtest.h>

namespace kvgpu {
namespace {

TEST(DurationTest, MillisecondsSecondsAndMinutes) {
  EXPECT_EQ(*ParseDuration("500ms"), std::chrono::milliseconds(500));
  EXPECT_EQ(*ParseDuration("5s"), std::chrono::seconds(5));
  EXPECT_EQ(*ParseDuration("2m"), std::chrono::minutes(2));
  EXPECT_EQ(*ParseDuration("0s"), std::chrono::milliseconds(0));
}

TEST(DurationTest, AnythingElseIsRefusedQuotingTheText) {
  for (const char* text : {"", "5", "s", "-1s", "1.5s", "5h", "5 s", "1234567890ms", "5S"}) {
    Result<std::chrono::milliseconds> parsed = ParseDuration(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalid);
    EXPECT_NE(parsed.status().message().find(std::string("\"") + text + "\""), std::string::npos);
  }
}

}  // namespace
}  // namespace kvgpu
