// The claim checkpoint (deviceplugin/dra/prepared_store.h): what is written is read back after a
// restart, a failed save changes nothing, and a corrupt file is refused rather than read as empty.
#include "deviceplugin/dra/prepared_store.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fakes/common/temp_dir.h"

namespace kvgpu::deviceplugin::dra {
namespace {

PreparedClaim PreparedFor(const std::string& uid, bool prepared) {
  PreparedDevice d{{"gpu"},
                   "node-a",
                   "0000-3b-00-0-nvidia-222-0",
                   "x/vgpu-222",
                   "0000:3b:00.0-nvidia-222-0",
                   prepared ? "uuid-1" : "",
                   {}};
  if (prepared) d.cdi_device_ids = {"x/vgpu-222=0000:3b:00.0-nvidia-222-0"};
  return {uid, "ns", "c-" + uid, prepared, {d}};
}

TEST(DraPreparedStore, WhatIsPutIsReadBackByANewStore) {
  testing::TempDir dir;
  PreparedStore store(dir.path());
  ASSERT_TRUE(store.Load().ok());
  ASSERT_TRUE(store.Put(PreparedFor("u1", false)).ok());
  ASSERT_TRUE(store.Put(PreparedFor("u2", true)).ok());
  PreparedStore again(dir.path());
  ASSERT_TRUE(again.Load().ok());
  EXPECT_EQ(again.Find("u1"), PreparedFor("u1", false));
  EXPECT_EQ(again.Find("u2"), PreparedFor("u2", true));
  EXPECT_EQ(again.ClaimOfDevice("0000:3b:00.0-nvidia-222-0")->uid, "u1");
  ASSERT_TRUE(again.Erase("u1").ok());
  PreparedStore third(dir.path());
  ASSERT_TRUE(third.Load().ok());
  EXPECT_FALSE(third.Find("u1"));
  EXPECT_TRUE(third.Find("u2"));
}

TEST(DraPreparedStore, AbsentFileIsEmpty) {
  testing::TempDir dir;
  PreparedStore store(dir.path() / "not-yet");
  ASSERT_TRUE(store.Load().ok());
  EXPECT_TRUE(store.All().empty());
}

TEST(DraPreparedStore, CorruptFileIsAnError) {
  testing::TempDir dir;
  PreparedStore store(dir.path());
  std::ofstream(store.file()) << "{\"version\":1,\"claims\":[{\"uid\":\"u\"}]}";
  EXPECT_FALSE(store.Load().ok());
  std::ofstream(store.file()) << "{\"version\":2,\"claims\":[]}";
  EXPECT_FALSE(store.Load().ok());
  std::ofstream(store.file()) << "not json";
  EXPECT_FALSE(store.Load().ok());
}

TEST(DraPreparedStore, RepeatedUidIsCorrupt) {
  std::string one = EncodePreparedClaims({{"u", PreparedFor("u", true)}});
  auto decoded = DecodePreparedClaims(one);
  ASSERT_TRUE(decoded.ok());
  nlohmann::json j = nlohmann::json::parse(one);
  j["claims"].push_back(j["claims"][0]);
  EXPECT_FALSE(DecodePreparedClaims(j.dump()).ok());
}

TEST(DraPreparedStore, AFailedSaveKeepsTheOldEntry) {
  testing::TempDir dir;
  PreparedStore store(dir.path());
  ASSERT_TRUE(store.Load().ok());
  ASSERT_TRUE(store.Put(PreparedFor("u1", false)).ok());
  // A directory where the file is: the rename of every later save fails (also for root).
  std::filesystem::remove(store.file());
  std::filesystem::create_directories(store.file() / "x");
  EXPECT_FALSE(store.Put(PreparedFor("u1", true)).ok());
  EXPECT_FALSE(store.Put(PreparedFor("u2", false)).ok());
  EXPECT_FALSE(store.Erase("u1").ok());
  EXPECT_EQ(store.Find("u1"), PreparedFor("u1", false));
  EXPECT_FALSE(store.Find("u2"));
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
