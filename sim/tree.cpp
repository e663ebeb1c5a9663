#include "sim/tree.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>

namespace kvgpu::sim::tree {

namespace {

std::atomic<unsigned long> temp_counter{0};

Status WriteAll(int fd, std::string_view content, const fs::path& path) {
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "cannot write " + path.string());
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Status MakeDirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot create directory " + dir.string());
  return Status::Ok();
}

Status PutFile(const fs::path& file, std::string_view content, mode_t mode,
               const fs::path& scratch_dir) {
  fs::path temp = scratch_dir / ("put-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(temp_counter.fetch_add(1)));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "cannot create " + temp.string());
  Status status = WriteAll(fd, content, temp);
  // fchmod, not the open mode: the umask must not change what sysfs would show.
  if (status.ok() && ::fchmod(fd, mode) != 0) {
    status = Status::FromErrno(errno, "cannot chmod " + temp.string());
  }
  ::close(fd);
  if (status.ok() && ::rename(temp.c_str(), file.c_str()) != 0) {
    status = Status::FromErrno(errno, "cannot rename into " + file.string());
  }
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

Status Link(const fs::path& link, const fs::path& target) {
  fs::path relative = target.lexically_relative(link.parent_path());
  if (::symlink(relative.c_str(), link.c_str()) != 0) {
    return Status::FromErrno(errno, "cannot link " + link.string() + " -> " + relative.string());
  }
  return Status::Ok();
}

void RemoveAll(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace kvgpu::sim::tree
