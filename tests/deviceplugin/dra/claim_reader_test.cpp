// Reading a ResourceClaim's allocation (deviceplugin/dra/claim_reader.h): only our driver and
// pool, the UID must be the one kubelet named, and malformed or oversized statuses are errors.
#include "deviceplugin/dra/claim_reader.h"

#include <gtest/gtest.h>

namespace kvgpu::deviceplugin::dra {
namespace {

nlohmann::json Claim(const std::string& uid, nlohmann::json results) {
  return {{"metadata", {{"namespace", "ns"}, {"name", "c"}, {"uid", uid}}},
          {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}};
}

nlohmann::json Result(const std::string& driver, const std::string& pool,
                      const std::string& device) {
  return {{"request", "r"}, {"driver", driver}, {"pool", pool}, {"device", device}};
}

const ClaimRef kRef{"ns", "u1", "c"};

TEST(DraClaimReader, KeepsOnlyOurDriverAndPoolInOrder) {
  auto claim = Claim("u1", {Result("d", "p", "a"), Result("other", "p", "b"), Result("d", "q", "c"),
                            Result("d", "p", "e")});
  auto out = OurDevices(claim, kRef, "d", "p");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out.value().size(), 2u);
  EXPECT_EQ(out.value()[0].device, "a");
  EXPECT_EQ(out.value()[1].device, "e");
  EXPECT_EQ(out.value()[0].request, "r");
}

TEST(DraClaimReader, OtherUidIsGone) {
  auto out = OurDevices(Claim("u2", nlohmann::json::array()), kRef, "d", "p");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), ErrorCode::kGone);
}

TEST(DraClaimReader, UnallocatedClaimIsAnError) {
  nlohmann::json claim = {{"metadata", {{"uid", "u1"}}}, {"status", nlohmann::json::object()}};
  EXPECT_FALSE(OurDevices(claim, kRef, "d", "p").ok());
}

TEST(DraClaimReader, MoreResultsThanTheApiAllowsIsAnError) {
  nlohmann::json results = nlohmann::json::array();
  for (size_t i = 0; i <= kMaxAllocationResults; ++i) results.push_back(Result("d", "p", "x"));
  EXPECT_FALSE(OurDevices(Claim("u1", results), kRef, "d", "p").ok());
}

TEST(DraClaimReader, AResultWithoutDeviceIsAnError) {
  EXPECT_FALSE(OurDevices(Claim("u1", {Result("d", "p", "")}), kRef, "d", "p").ok());
  EXPECT_FALSE(OurDevices(Claim("u1", {42}), kRef, "d", "p").ok());
}

TEST(DraClaimReader, PathIsTheV1ResourceClaim) {
  EXPECT_EQ(ResourceClaimPath(kRef), "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c");
}

TEST(DraClaimReader, ClaimReferencesThatCannotNameAClaimAreRefused) {
  EXPECT_TRUE(CheckClaimRef({"ns", "u", "c.d-1"}).ok());
  EXPECT_FALSE(CheckClaimRef({"../x", "u", "c"}).ok());
  EXPECT_FALSE(CheckClaimRef({"ns", "u", "c/../../x"}).ok());
  EXPECT_FALSE(CheckClaimRef({"ns", "", "c"}).ok());
  EXPECT_FALSE(CheckClaimRef({"ns", "u u", "c"}).ok());
  EXPECT_FALSE(CheckClaimRef({"NS", "u", "c"}).ok());
}

}  // namespace
}  // namespace kvgpu::deviceplugin::dra
