// The one error type: a caller decides by the code, never by parsing the message; the errno or
// HTTP status it came from stays attached; a Result holds a value or the reason it has none.
#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <set>
#include <string>

namespace kvgpu {
namespace {

TEST(StatusTest, SysfsErrnosMapToTheCodesCallersActOn) {
  const std::pair<int, ErrorCode> cases[] = {
      {EINVAL, ErrorCode::kInvalid},   {EEXIST, ErrorCode::kExists},
      {ENOSPC, ErrorCode::kNoRoom},    {EUSERS, ErrorCode::kNoRoom},
      {ENOENT, ErrorCode::kGone},      {ENODEV, ErrorCode::kGone},
      {EBUSY, ErrorCode::kBusy},       {EACCES, ErrorCode::kPermission},
      {EPERM, ErrorCode::kPermission}, {EROFS, ErrorCode::kPermission},
      {EIO, ErrorCode::kIo},
  };
  for (const auto& [err, code] : cases) {
    Status s = Status::FromErrno(err, "writing create");
    EXPECT_EQ(s.code(), code) << err;
    EXPECT_EQ(s.sys_errno(), err);
    EXPECT_NE(s.message().find("writing create ("), std::string::npos) << s.message();
  }
}

TEST(StatusTest, ARemoteAnswerKeepsItsHttpStatus) {
  Status s = Status::Remote(ErrorCode::kExpired, "resourceVersion too old", 410);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.http_status(), 410);
  EXPECT_EQ(s.sys_errno(), 0);
  EXPECT_EQ(s.ToString(), "expired: resourceVersion too old");
  EXPECT_EQ(Status::Error(ErrorCode::kTransport, "x").http_status(), 0) << "never answered";
}

TEST(StatusTest, EveryCodeHasItsOwnName) {
  std::set<std::string> names;
  for (int c = static_cast<int>(ErrorCode::kOk); c <= static_cast<int>(ErrorCode::kCancelled);
       ++c) {
    std::string name = ErrorCodeName(static_cast<ErrorCode>(c));
    EXPECT_NE(name, "unknown") << c;
    EXPECT_TRUE(names.insert(name).second) << "two codes named " << name;
  }
  EXPECT_EQ(Status::Ok().ToString(), "ok");
}

TEST(StatusTest, AResultHoldsAValueOrTheReason) {
  Result<int> value = 7;
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 7);
  Result<int> none = Status::Error(ErrorCode::kNoRoom, "no instance left");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kNoRoom);
}

}  // namespace
}  // namespace kvgpu
