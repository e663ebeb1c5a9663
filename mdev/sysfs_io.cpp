#include "mdev/sysfs_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <system_error>

namespace kvgpu::mdev {

namespace {

// sysfs attributes are at most a page; a little more room catches a surprise without looping.
constexpr size_t kMaxAttribute = 64 * 1024;

}  // namespace

Result<std::string> PosixSysfsIo::ReadFile(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot open " + path.string());
  std::string content;
  char buf[4096];
  while (content.size() < kMaxAttribute) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "cannot read " + path.string());
    }
    if (n == 0) break;
    content.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return content;
}

Status PosixSysfsIo::WriteFile(const fs::path& path, std::string_view data) {
  // No O_CREAT: sysfs attributes exist or the device is gone; creating a file would hide that.
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot open " + path.string() + " for writing");
  ssize_t n;
  do {
    n = ::write(fd, data.data(), data.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  // A sysfs store() reports its error from write(); close() can report a deferred one elsewhere.
  int close_rc = ::close(fd);
  if (n < 0) return Status::FromErrno(err, "writing to " + path.string() + " failed");
  if (static_cast<size_t>(n) != data.size()) {
    return Status::Error(ErrorCode::kIo, "short write to " + path.string());
  }
  if (close_rc != 0) return Status::FromErrno(errno, "closing " + path.string() + " failed");
  return Status::Ok();
}

Result<std::vector<std::string>> PosixSysfsIo::ListDir(const fs::path& path) {
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot list " + path.string());
  std::vector<std::string> names;
  for (const auto& entry : it) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<fs::path> PosixSysfsIo::ReadLink(const fs::path& path) {
  std::error_code ec;
  fs::path target = fs::read_symlink(path, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot read link " + path.string());
  return target;
}

Result<fs::path> PosixSysfsIo::Canonical(const fs::path& path) {
  return ResolvePath(path);
}

Result<fs::path> ResolvePath(const fs::path& path) {
  int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot resolve " + path.string());
  char proc[32];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  char target[PATH_MAX];
  ssize_t n = ::readlink(proc, target, sizeof target);
  ::close(fd);
  // The kernel marks a name it cannot give as it stands: a leading character other than '/' (a
  // path outside this process's root), " (deleted)" at the end (unlinked since the open). Those,
  // and a name longer than PATH_MAX, go the slow way.
  constexpr std::string_view kDeleted = " (deleted)";
  if (n > 0 && static_cast<size_t>(n) < sizeof target && target[0] == '/') {
    std::string name(target, static_cast<size_t>(n));
    if (!name.ends_with(kDeleted)) return fs::path(std::move(name));
  }
  std::error_code ec;
  fs::path resolved = fs::canonical(path, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot resolve " + path.string());
  return resolved;
}

bool PosixSysfsIo::Exists(const fs::path& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool PosixSysfsIo::IsDirectory(const fs::path& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<std::string> LinkName(SysfsIo& io, const fs::path& link) {
  auto target = io.ReadLink(link);
  if (!target.ok()) return target.status();
  std::string name = target->filename().string();
  if (name.empty()) {
    return Status::Error(ErrorCode::kInvalid, "link " + link.string() + " has an empty target");
  }
  return name;
}

Result<std::string> ReadAttribute(SysfsIo& io, const fs::path& path) {
  auto content = io.ReadFile(path);
  if (!content.ok()) return content.status();
  std::string& s = *content;
  auto is_blank = [](char c) { return c == '\n' || c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && is_blank(s.back())) s.pop_back();
  size_t start = 0;
  while (start < s.size() && is_blank(s[start])) ++start;
  return s.substr(start);
}

}  // namespace kvgpu::mdev
