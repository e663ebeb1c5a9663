#include "common/backoff.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvgpu {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, DoublesUpToTheCapWithJitterBelowTheBase) {
  Backoff backoff(milliseconds(100), milliseconds(1000), 0.5, 7);
  const std::vector<int> bases = {100, 200, 400, 800, 1000, 1000, 1000};
  for (size_t i = 0; i < bases.size(); ++i) {
    SCOPED_TRACE(i);
    const auto delay = backoff.Next().count();
    EXPECT_LE(delay, bases[i]);
    EXPECT_GE(delay, bases[i] / 2);
  }
  backoff.Reset();
  EXPECT_LE(backoff.Next().count(), 100);
}

TEST(BackoffTest, JitterSpreadsDelays) {
  Backoff a(milliseconds(1000), milliseconds(1000), 0.5, 1);
  Backoff b(milliseconds(1000), milliseconds(1000), 0.5, 2);
  int differing = 0;
  for (int i = 0; i < 10; ++i) differing += a.Next() != b.Next() ? 1 : 0;
  EXPECT_GT(differing, 5);
}

TEST(BackoffTest, WithoutJitterTheDelaysAreExactAndTheCapHolds) {
  Backoff backoff(milliseconds(20), milliseconds(200));
  const std::vector<int> delays = {20, 40, 80, 160, 200, 200};
  for (int expected : delays) EXPECT_EQ(backoff.Next().count(), expected);
  EXPECT_EQ(backoff.failures(), 6);
  backoff.Reset();
  EXPECT_EQ(backoff.Next().count(), 20);
}

TEST(BackoffTest, ACapBelowTheInitialDelayIsRaisedToIt) {
  Backoff backoff(milliseconds(500), milliseconds(100));
  EXPECT_EQ(backoff.Next().count(), 500);
  EXPECT_EQ(backoff.Next().count(), 500);
}

}  // namespace
}  // namespace kvgpu
