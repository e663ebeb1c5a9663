#include "sim/fuse/sim_fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sim/fuse/control.h"
#include "sim/model_internal.h"

namespace kvgpu::sim {

namespace fs = std::filesystem;

namespace {

constexpr const char* kControlName = "control";
constexpr const char* kStateName = "state";

int Negative(const Status& status) {
  int err = status.sys_errno();
  return -(err != 0 ? err : EIO);
}

// kernfs answers ENODEV, not ENOENT, to a read or write on an open file whose device went away.
int NegativeOnOpenFile(const Status& status) {
  int err = Negative(status);
  return err == -ENOENT ? -ENODEV : err;
}

// "/sys/bus/pci" -> {"sys", "bus/pci"}; "/" -> {"", ""}.
std::pair<std::string_view, std::string_view> SplitFirst(std::string_view path) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  size_t slash = path.find('/');
  if (slash == std::string_view::npos) return {path, {}};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

// Mount paths of the entries the model removed during the current thread's write. The model
// calls its removal hook on the writing thread, under its lock; the kernel is told after the
// lock is released, but before the write returns.
thread_local std::vector<std::string> removed_paths;

}  // namespace

struct SimFs::OpenFile {
  Node node;
  fs::path backing;
  std::mutex mutex;  // FUSE may serve two reads of one handle at once
  std::string content;
  bool loaded = false;
};

SimFs::SimFs(KernelModel& model, Log log)
    : model_(model), log_(std::move(log)), uid_(::getuid()), gid_(::getgid()) {
  ::clock_gettime(CLOCK_REALTIME, &started_);
  model_.SetRemovalHook([root = model_.root()](const fs::path& relative) {
    // The whole subtree: the kernel may hold any of its entries.
    removed_paths.push_back("/" + relative.string());
    std::error_code ec;
    for (fs::recursive_directory_iterator it(root / relative, ec), end; !ec && it != end;
         it.increment(ec)) {
      removed_paths.push_back("/" + it->path().lexically_relative(root).string());
    }
  });
}

SimFs::~SimFs() {
  model_.SetRemovalHook({});
}

void SimFs::FlushRemoved() {
  std::vector<std::string> paths;
  paths.swap(removed_paths);
  if (!invalidate_) return;
  for (const std::string& path : paths) invalidate_(path);
}

SimFs::Node SimFs::Classify(std::string_view path, fs::path* backing) const {
  auto [first, rest] = SplitFirst(path);
  if (first == kScratchDir) return Node::kMissing;
  if (first == kControlDir) {
    if (rest.empty()) return Node::kSimDir;
    if (rest == kControlName) return Node::kSimControl;
    if (rest == kStateName) return Node::kSimState;
    return Node::kMissing;
  }
  *backing = model_.root();
  if (!first.empty()) *backing /= std::string(first);
  if (!rest.empty()) *backing /= std::string(rest);
  return Node::kModel;
}

void SimFs::VirtualAttr(mode_t mode, struct stat* st) const {
  std::memset(st, 0, sizeof *st);
  st->st_mode = mode;
  st->st_nlink = S_ISDIR(mode) ? 2 : 1;
  st->st_uid = uid_;
  st->st_gid = gid_;
  st->st_size = S_ISDIR(mode) ? 0 : kAttributeSize;
  st->st_atim = st->st_mtim = st->st_ctim = started_;
}

int SimFs::GetAttr(std::string_view path, struct stat* st) {
  fs::path backing;
  switch (Classify(path, &backing)) {
    case Node::kMissing:
      return -ENOENT;
    case Node::kSimDir:
      VirtualAttr(S_IFDIR | 0755, st);
      return 0;
    case Node::kSimControl:
      VirtualAttr(S_IFREG | 0200, st);
      return 0;
    case Node::kSimState:
      VirtualAttr(S_IFREG | 0444, st);
      return 0;
    case Node::kModel:
      break;
  }
  if (::lstat(backing.c_str(), st) != 0) return -errno;
  if (S_ISREG(st->st_mode)) {
    st->st_size = kAttributeSize;
    st->st_blocks = 0;
  }
  return 0;
}

int SimFs::ReadLink(std::string_view path, std::string* target) {
  fs::path backing;
  if (Classify(path, &backing) != Node::kModel) return -EINVAL;  // not a link
  auto link = model_.ReadLink(backing);
  if (!link.ok()) return Negative(link.status());
  *target = link->string();
  return 0;
}

int SimFs::ReadDir(std::string_view path, std::vector<DirEntry>* entries) {
  fs::path backing;
  switch (Classify(path, &backing)) {
    case Node::kMissing:
      return -ENOENT;
    case Node::kSimDir:
      *entries = {{kControlName, S_IFREG}, {kStateName, S_IFREG}};
      return 0;
    case Node::kSimControl:
    case Node::kSimState:
      return -ENOTDIR;
    case Node::kModel:
      break;
  }
  auto names = model_.ListDir(backing);
  if (!names.ok()) return Negative(names.status());
  bool top = SplitFirst(path).first.empty();
  entries->clear();
  for (const std::string& name : *names) {
    if (top && name == kScratchDir) continue;
    struct stat st;
    // An entry removed since the listing is left out, as a later readdir would.
    if (::lstat((backing / name).c_str(), &st) != 0) continue;
    entries->push_back({name, st.st_mode & S_IFMT});
  }
  if (top) entries->push_back({kControlDir, S_IFDIR});
  return 0;
}

int SimFs::Open(std::string_view path, int flags, uint64_t* handle) {
  fs::path backing;
  Node node = Classify(path, &backing);
  int access = flags & O_ACCMODE;
  switch (node) {
    case Node::kMissing:
      return -ENOENT;
    case Node::kSimDir:
      *handle = 0;
      return access == O_RDONLY ? 0 : -EISDIR;
    case Node::kSimControl:
      if (access != O_WRONLY) return -EACCES;
      break;
    case Node::kSimState:
      if (access != O_RDONLY) return -EACCES;
      break;
    case Node::kModel:
      // O_RDWR needs both show() and store(), as kernfs checks.
      if (access != O_WRONLY) {
        if (Status s = model_.CheckOpen(backing, false); !s.ok()) return Negative(s);
      }
      if (access != O_RDONLY) {
        if (Status s = model_.CheckOpen(backing, true); !s.ok()) return Negative(s);
      }
      break;
  }
  auto* file = new OpenFile;
  file->node = node;
  file->backing = std::move(backing);
  *handle = reinterpret_cast<uint64_t>(file);
  return 0;
}

int SimFs::Read(uint64_t handle, off_t offset, size_t size, char* buf) {
  auto* file = reinterpret_cast<OpenFile*>(handle);
  if (file == nullptr || offset < 0) return -EINVAL;
  std::lock_guard lock(file->mutex);
  if (!file->loaded || offset == 0) {
    if (file->node == Node::kSimState) {
      file->content = StateText(model_);
    } else {
      auto content = model_.ReadFile(file->backing);
      if (!content.ok()) return NegativeOnOpenFile(content.status());
      file->content = std::move(content).value();
    }
    file->loaded = true;
  }
  auto start = static_cast<size_t>(offset);
  if (start >= file->content.size()) return 0;
  size_t n = std::min(size, file->content.size() - start);
  std::memcpy(buf, file->content.data() + start, n);
  return static_cast<int>(n);
}

int SimFs::Write(uint64_t handle, std::string_view data) {
  auto* file = reinterpret_cast<OpenFile*>(handle);
  if (file == nullptr) return -EINVAL;
  Status status;
  if (file->node == Node::kSimControl) {
    status = ApplyControl(model_, data);
    FlushRemoved();
    std::string command(data);
    while (!command.empty() && command.back() == '\n') command.pop_back();
    if (log_) log_("control: " + command + (status.ok() ? "" : " -> " + status.message()));
    if (!status.ok()) return Negative(status);
  } else {
    status = model_.WriteFile(file->backing, data);
    FlushRemoved();
    if (!status.ok() && log_) log_(status.message());
  }
  if (!status.ok()) return NegativeOnOpenFile(status);
  return static_cast<int>(data.size());
}

void SimFs::Release(uint64_t handle) {
  delete reinterpret_cast<OpenFile*>(handle);
}

int SimFs::Truncate(std::string_view path) {
  struct stat st;
  if (int rc = GetAttr(path, &st); rc != 0) return rc;
  return S_ISDIR(st.st_mode) ? -EISDIR : 0;
}

}  // namespace kvgpu::sim
