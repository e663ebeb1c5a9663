// The bind ledger on a Node: what one replica's bind records is what another reads back; a
// malformed or other-version ledger is refused with the field named; entries end once the node's
// state shows the pod's vGPUs made, or once every watch has surely shown the bind.
#include "extender/bind_ledger.h"

#include <gtest/gtest.h>

namespace kvgpu::extender {
namespace {

using namespace std::chrono_literals;

const LedgerEntry kTrain{"uid-train", "ml/train", 1000, {{{"tencent.com/vgpu-222", 2}}}};
const LedgerEntry kInfer{
    "uid-infer", "ml/infer", 2000, {{{"tencent.com/vgpu-223", 1}}, {{"tencent.com/vgpu-223", 3}}}};

TEST(BindLedgerTest, WhatIsRenderedParsesBackTheSame) {
  Result<std::vector<LedgerEntry>> parsed = ParseBindLedger(RenderBindLedger({kTrain, kInfer}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(*parsed, (std::vector<LedgerEntry>{kTrain, kInfer}));
  EXPECT_TRUE(ParseBindLedger(RenderBindLedger({}))->empty());
}

TEST(BindLedgerTest, AnythingButTheDocumentedShapeIsRefusedNamingTheField) {
  struct Case {
    std::string description;
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"not JSON", "{", "not a JSON object"},
      {"another version", R"({"version": 2, "binds": []})", "version"},
      {"no binds", R"({"version": 1})", "binds: missing"},
      {"an entry without uid",
       R"({"version": 1, "binds": [{"pod": "a/b", "atUnixMs": 1, "demand": []}]})", "binds[0].uid"},
      {"a negative count",
       R"({"version": 1, "binds": [{"uid": "u", "pod": "a/b", "atUnixMs": 1,
           "demand": [{"tencent.com/vgpu-222": -1}]}]})",
       "not a count"},
      {"a time as text",
       R"({"version": 1, "binds": [{"uid": "u", "pod": "a/b", "atUnixMs": "1", "demand": []}]})",
       "atUnixMs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    Result<std::vector<LedgerEntry>> parsed = ParseBindLedger(c.text);
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.status().message().find(c.error), std::string::npos)
        << parsed.status().message();
  }
}

TEST(BindLedgerTest, AnEntryEndsWhenThePodsVgpusAreMadeOrWhenItIsOlderThanEveryWatchLag) {
  scheduling::NodeVgpuState state;
  state.holders = {"ml/train"};
  EXPECT_EQ(LiveEntries({kTrain, kInfer}, &state, 2000, 30s), std::vector<LedgerEntry>{kInfer});
  EXPECT_EQ(LiveEntries({kTrain, kInfer}, nullptr, 31'001, 30s), std::vector<LedgerEntry>{kInfer})
      << "an entry more than 30 s old is gone";
  EXPECT_EQ(LiveEntries({kTrain, kInfer}, nullptr, 31'000, 30s),
            (std::vector<LedgerEntry>{kTrain, kInfer}))
      << "one exactly 30 s old stays";
}

}  // namespace
}  // namespace kvgpu::extender
