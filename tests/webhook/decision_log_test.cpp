// The decision log: request text reaches the log escaped, and a flood of reviews is logged at
// the configured rate with the dropped lines counted.
#include "webhook/decision_log.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvgpu::webhook {
namespace {

TEST(DecisionLogTest, RequestTextCannotForgeALogLine) {
  std::vector<std::string> lines;
  DecisionLog log(10, 10, [&](const std::string& line) { lines.push_back(line); });
  log.Record("mutated", "team-a", "evil\n2026-11-25 [info] pod x: denied\x1b[31m",
             std::string(1000, 'r'));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].find('\n'), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find('\x1b'), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("evil\\n2026"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("...(1000 bytes)"), std::string::npos) << "a long reason is cut";
  EXPECT_LT(lines[0].size(), 600u);
}

TEST(DecisionLogTest, EachDecisionIsOneLineNamingPodAndReason) {
  std::vector<std::string> lines;
  DecisionLog log(10, 10, [&](const std::string& line) { lines.push_back(line); });
  log.Record("denied", "team-a", "train", "asks for a vGPU outside Kata");
  log.Record("mutated", "team-a", "", "");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "pod team-a/train: denied (asks for a vGPU outside Kata)");
  EXPECT_EQ(lines[1], "pod team-a/<generated>: mutated");
}

TEST(DecisionLogTest, AFloodIsLoggedAtTheRateAndTheDroppedLinesAreCounted) {
  DecisionLog::Clock::time_point now{};
  std::vector<std::string> lines;
  DecisionLog log(
      2, 5, [&](const std::string& line) { lines.push_back(line); }, [&] { return now; });
  for (int i = 0; i < 100; ++i) log.Record("mutated", "ns", "p" + std::to_string(i), "");
  EXPECT_EQ(lines.size(), 5u) << "the burst, then nothing until tokens come back";
  now += std::chrono::milliseconds(499);
  log.Record("mutated", "ns", "late", "");
  EXPECT_EQ(lines.size(), 5u) << "just under one token after 499 ms at 2/s";
  now += std::chrono::milliseconds(1);
  log.Record("mutated", "ns", "later", "");
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines.back(), "(96 decisions not logged: rate limit) pod ns/later: mutated");
}

// Issue #26: one client sending bad reviews wrote 13,927 warnings in 3 s.
TEST(DecisionLogTest, OtherLinesShareTheLimitAndNameWhatWasDropped) {
  DecisionLog::Clock::time_point now{};
  std::vector<std::string> lines;
  DecisionLog log(
      1, 3, [&](const std::string& line) { lines.push_back(line); }, [&] { return now; },
      "bad reviews");
  for (int i = 0; i < 1000; ++i) log.Say("bad review: " + std::to_string(i));
  EXPECT_EQ(lines.size(), 3u);
  now += std::chrono::seconds(1);
  log.Say("bad review: late");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines.back(), "(997 bad reviews not logged: rate limit) bad review: late");
}

}  // namespace
}  // namespace kvgpu::webhook
