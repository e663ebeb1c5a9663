// The SysfsIo side of the model: reads go straight to the tree, writes are checked the way
// kernfs checks an open(2) and then handed to the driver rules (kernel_model.cpp). Every call
// takes the model's lock and may meet an injected fault first.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "sim/kernel_model.h"

namespace kvgpu::sim {

Status KernelModel::TakeFault(Op op, const fs::path& path) {
  const std::string text = path.string();
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (it->op != op || text.size() < it->suffix.size() ||
        text.compare(text.size() - it->suffix.size(), it->suffix.size(), it->suffix) != 0) {
      continue;
    }
    int err = it->err;
    if (it->times > 0 && --it->times == 0) faults_.erase(it);
    return Status::FromErrno(err, "injected fault on " + text);
  }
  return Status::Ok();
}

Status KernelModel::CheckOpenLocked(const fs::path& path, bool for_write, fs::path* real) const {
  const char* mode = for_write ? " for writing" : "";
  Result<fs::path> resolved = mdev::ResolvePath(path);
  if (!resolved.ok()) {
    return Status::FromErrno(resolved.status().sys_errno(), "cannot open " + path.string() + mode);
  }
  *real = std::move(*resolved);
  std::error_code ec;
  auto attr = attributes_.find(*real);
  if (!for_write) {
    // kernfs refuses to open an attribute without show() for reading.
    if (attr != attributes_.end() && attr->second.action != Action::kCurrentType) {
      return Status::FromErrno(EACCES, "cannot open " + path.string() + ": write-only attribute");
    }
    return Status::Ok();
  }
  if (fs::is_directory(*real, ec))
    return Status::FromErrno(EISDIR, "cannot open " + path.string() + mode);
  // kernfs: an attribute without store() cannot be opened for writing, not even by root.
  if (attr == attributes_.end()) {
    return Status::FromErrno(EACCES,
                             "cannot open " + path.string() + mode + ": read-only attribute");
  }
  return Status::Ok();
}

Status KernelModel::CheckOpen(const fs::path& path, bool for_write) {
  std::lock_guard lock(mutex_);
  fs::path real;
  return CheckOpenLocked(path, for_write, &real);
}

Result<std::string> KernelModel::ReadFile(const fs::path& path) {
  std::lock_guard lock(mutex_);
  if (Status s = TakeFault(Op::kRead, path); !s.ok()) return s;
  fs::path real;
  if (Status s = CheckOpenLocked(path, false, &real); !s.ok()) return s;
  if (auto output = outputs_.find(real); output != outputs_.end()) {
    return ReadOutput(output->second);
  }
  // The backing file holds exactly what the attribute shows: read it as the library would.
  return mdev::PosixSysfsIo().ReadFile(real);
}

Status KernelModel::WriteFile(const fs::path& path, std::string_view data) {
  std::lock_guard lock(mutex_);
  if (Status s = TakeFault(Op::kWrite, path); !s.ok()) return s;
  fs::path real;
  if (Status s = CheckOpenLocked(path, true, &real); !s.ok()) return s;
  Attribute attr = attributes_.at(real);
  switch (attr.action) {
    case Action::kCreate:
      return WriteCreate(attr, path, data);
    case Action::kRemove:
      return WriteRemove(attr, path, data);
    case Action::kCurrentType:
      return WriteCurrentType(attr, path, data);
  }
  return Status::FromErrno(EACCES, "cannot write " + path.string());
}

Result<std::vector<std::string>> KernelModel::ListDir(const fs::path& path) {
  std::lock_guard lock(mutex_);
  if (Status s = TakeFault(Op::kList, path); !s.ok()) return s;
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot list " + path.string());
  std::vector<std::string> names;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) return Status::FromErrno(ec.value(), "cannot list " + path.string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<fs::path> KernelModel::ReadLink(const fs::path& path) {
  std::lock_guard lock(mutex_);
  if (Status s = TakeFault(Op::kReadLink, path); !s.ok()) return s;
  std::error_code ec;
  fs::path target = fs::read_symlink(path, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot read link " + path.string());
  return target;
}

Result<fs::path> KernelModel::Canonical(const fs::path& path) {
  std::lock_guard lock(mutex_);
  if (Status s = TakeFault(Op::kReadLink, path); !s.ok()) return s;
  return mdev::ResolvePath(path);
}

bool KernelModel::Exists(const fs::path& path) {
  std::lock_guard lock(mutex_);
  std::error_code ec;
  return fs::exists(path, ec);
}

bool KernelModel::IsDirectory(const fs::path& path) {
  std::lock_guard lock(mutex_);
  std::error_code ec;
  return fs::is_directory(path, ec);
}

}  // namespace kvgpu::sim
