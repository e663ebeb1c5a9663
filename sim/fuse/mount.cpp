#define FUSE_USE_VERSION 314  // Debian 12: libfuse 3.14
#include "sim/fuse/mount.h"

#include <fcntl.h>
#include <fuse3/fuse.h>
#include <fuse3/fuse_lowlevel.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include "sim/fuse/sim_fs.h"
#include "sim/kernel_model.h"

namespace kvgpu::sim {

namespace fs = std::filesystem;

namespace {

struct Context {
  SimFs* fs;
  double cache_seconds;
};

SimFs& Fs() {
  return *static_cast<Context*>(fuse_get_context()->private_data)->fs;
}

void* Init(fuse_conn_info* /*conn*/, fuse_config* config) {
  auto* context = static_cast<Context*>(fuse_get_context()->private_data);
  // What the kernel may cache, and why it stays true:
  // - names and attributes, for cache_seconds: a create only adds names (and no absence is
  //   cached, negative_timeout 0), attribute sizes and modes never change, and every entry a
  //   write removes is invalidated before that write returns (SimFs::SetInvalidate);
  // - no content: the model rewrites attribute files behind the kernel's back (direct_io).
  config->entry_timeout = context->cache_seconds;
  config->attr_timeout = context->cache_seconds;
  config->negative_timeout = 0;
  config->direct_io = 1;
  config->kernel_cache = 0;
  return context;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info* /*fi*/) {
  return Fs().GetAttr(path, st);
}

int ReadLink(const char* path, char* buf, size_t size) {
  std::string target;
  if (int rc = Fs().ReadLink(path, &target); rc != 0) return rc;
  if (size == 0) return -EINVAL;
  // FUSE wants a NUL-terminated target, truncated to the buffer as readlink(2) truncates.
  size_t n = std::min(target.size(), size - 1);
  std::memcpy(buf, target.data(), n);
  buf[n] = '\0';
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t filler, off_t /*offset*/,
            fuse_file_info* /*fi*/, fuse_readdir_flags /*flags*/) {
  std::vector<SimFs::DirEntry> entries;
  if (int rc = Fs().ReadDir(path, &entries); rc != 0) return rc;
  filler(buf, ".", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  filler(buf, "..", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  for (const auto& entry : entries) {
    struct stat st {};
    st.st_mode = entry.type;
    if (filler(buf, entry.name.c_str(), &st, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) break;
  }
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  uint64_t handle = 0;
  if (int rc = Fs().Open(path, fi->flags, &handle); rc != 0) return rc;
  fi->fh = handle;
  // Content changes without the kernel knowing: every read and write must reach the model, and
  // the 4096-byte size sysfs reports must not make the kernel pad or cut what is read.
  fi->direct_io = 1;
  fi->keep_cache = 0;
  return 0;
}

int Read(const char* /*path*/, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  return Fs().Read(fi->fh, offset, size, buf);
}

int Write(const char* /*path*/, const char* buf, size_t size, off_t /*offset*/,
          fuse_file_info* fi) {
  return Fs().Write(fi->fh, std::string_view(buf, size));
}

int Release(const char* /*path*/, fuse_file_info* fi) {
  Fs().Release(fi->fh);
  return 0;
}

int Truncate(const char* path, off_t /*size*/, fuse_file_info* /*fi*/) {
  return Fs().Truncate(path);
}

// What sysfs answers to attempts to change its shape: kernfs directories have no create,
// mkdir, unlink, rmdir, symlink, link or rename for userspace.
int Create(const char* /*path*/, mode_t /*mode*/, fuse_file_info* /*fi*/) {
  return -EACCES;
}
int Mkdir(const char* /*path*/, mode_t /*mode*/) {
  return -EPERM;
}
int Unlink(const char* /*path*/) {
  return -EPERM;
}
int Symlink(const char* /*from*/, const char* /*to*/) {
  return -EPERM;
}
int Rename(const char* /*from*/, const char* /*to*/, unsigned int /*flags*/) {
  return -EPERM;
}
int Link(const char* /*from*/, const char* /*to*/) {
  return -EPERM;
}
int Chmod(const char* /*path*/, mode_t /*mode*/, fuse_file_info* /*fi*/) {
  return -EPERM;
}
int Chown(const char* /*path*/, uid_t /*uid*/, gid_t /*gid*/, fuse_file_info* /*fi*/) {
  return -EPERM;
}
// `touch` on an attribute succeeds on sysfs and changes nothing that matters here.
int Utimens(const char* path, const struct timespec* /*tv*/, fuse_file_info* /*fi*/) {
  struct stat st;
  return Fs().GetAttr(path, &st);
}

fuse_operations Operations() {
  fuse_operations ops{};
  ops.init = Init;
  ops.getattr = GetAttr;
  ops.readlink = ReadLink;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  ops.write = Write;
  ops.release = Release;
  ops.truncate = Truncate;
  ops.create = Create;
  ops.mkdir = Mkdir;
  ops.unlink = Unlink;
  ops.rmdir = Unlink;
  ops.symlink = Symlink;
  ops.rename = Rename;
  ops.link = Link;
  ops.chmod = Chmod;
  ops.chown = Chown;
  ops.utimens = Utimens;
  return ops;
}

// FUSE needs the device before anything is laid out or mounted; say what to do without it.
bool CheckFuseDevice(const fs::path& device, std::ostream& err) {
  int fd = ::open(device.c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  int e = errno;
  err << "kvgpu-sim: cannot open " << device.string() << ": " << std::strerror(e) << "\n";
  if (e == ENOENT || e == ENODEV || e == ENXIO) {
    err << "kvgpu-sim: this kernel or container offers no FUSE: load the module (modprobe fuse), "
           "or start the container with --device /dev/fuse --cap-add SYS_ADMIN\n";
  } else if (e == EACCES || e == EPERM) {
    err << "kvgpu-sim: no permission to use FUSE: run as root, or give this user read-write "
           "access to "
        << device.string() << " (it is usually 0666, with fusermount3 doing the mount)\n";
  }
  return false;
}

// Whether a kvgpu-sim already serves `mountpoint` (a resolved path): a second one would hide it.
bool ServedBySimulator(const fs::path& mountpoint) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) {
    // "<id> <parent> <major:minor> <root> <mount point> <options> [tags] - <type> ..."
    std::istringstream fields(line);
    std::string id, parent, devices, root, point;
    fields >> id >> parent >> devices >> root >> point;
    if (point != mountpoint.string()) continue;
    for (std::string field; fields >> field;) {
      if (field == "-" && fields >> field && field == "fuse.kvgpu-sim") return true;
    }
  }
  return false;
}

bool PrepareMountpoint(const fs::path& mountpoint, std::ostream& err) {
  // statfs, not stat: the kernel may answer stat from its cache for a server that died, but
  // always asks the server for statfs, so a dead mount shows as ENOTCONN.
  struct statvfs vfs;
  if (::statvfs(mountpoint.c_str(), &vfs) != 0) {
    int e = errno;
    if (e == ENOTCONN) {
      err << "kvgpu-sim: " << mountpoint.string()
          << " is a dead FUSE mount (its server exited without unmounting); run `fusermount3 -u "
          << mountpoint.string() << "` (or `umount -l`) first\n";
      return false;
    }
    if (e != ENOENT) {
      err << "kvgpu-sim: cannot use " << mountpoint.string() << ": " << std::strerror(e) << "\n";
      return false;
    }
    std::error_code ec;
    fs::create_directories(mountpoint, ec);
    if (ec) {
      err << "kvgpu-sim: cannot create mount point " << mountpoint.string() << ": " << ec.message()
          << "\n";
      return false;
    }
    return true;
  }
  std::error_code ec;
  if (!fs::is_directory(mountpoint, ec)) {
    err << "kvgpu-sim: mount point " << mountpoint.string() << " is not a directory\n";
    return false;
  }
  fs::path resolved = fs::canonical(mountpoint, ec);
  if (!ec && ServedBySimulator(resolved)) {
    err << "kvgpu-sim: another kvgpu-sim already serves " << mountpoint.string()
        << "; stop it (or `fusermount3 -u " << mountpoint.string() << "`) first\n";
    return false;
  }
  return true;
}

fs::path FreshBacking(std::ostream& err) {
  fs::path base = "/dev/shm";
  std::error_code ec;
  if (::access(base.c_str(), W_OK) != 0 || !fs::is_directory(base, ec)) {
    base = fs::temp_directory_path(ec);
  }
  std::string pattern = (base / "kvgpu-sim-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    err << "kvgpu-sim: cannot create a backing directory under " << base.string() << ": "
        << std::strerror(errno) << "\n";
    return {};
  }
  return pattern;
}

fuse_session* stopping_session = nullptr;

void Stop(int /*signal*/) {
  if (stopping_session != nullptr) fuse_session_exit(stopping_session);
}

// Not fuse_set_signal_handlers(): it leaves alone a signal that is ignored, and a shell starts
// background commands with SIGINT ignored, so `kvgpu-sim ... & kill -INT $!` would not stop it.
// No SA_RESTART: the signal must interrupt the loop's blocking read or wait to be noticed.
bool InstallStopHandlers(fuse_session* session) {
  stopping_session = session;
  struct sigaction action {};
  action.sa_handler = Stop;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (::sigaction(sig, &action, nullptr) != 0) return false;
  }
  action.sa_handler = SIG_IGN;
  return ::sigaction(SIGPIPE, &action, nullptr) == 0;
}

void RemoveStopHandlers() {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
  stopping_session = nullptr;
}

// The model speaks of its backing files; whoever reads the log knows the mount.
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size()) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

struct FuseDeleter {
  void operator()(fuse* f) const { fuse_destroy(f); }
};

int Serve(KernelModel& model, const MountOptions& options, std::ostream& out, std::ostream& err) {
  SimFs::Log log;
  if (!options.quiet) {
    log = [from = model.root().string(),
           to = options.mountpoint.string()](const std::string& line) {
      std::string text = "kvgpu-sim: " + ReplaceAll(line, from, to) + "\n";
      std::fputs(text.c_str(), stderr);
    };
  }
  SimFs simfs(model, log);

  std::string mount_options = "fsname=kvgpu-sim,subtype=kvgpu-sim,default_permissions";
  // As on sysfs, every user may look; the mode bits (checked by the kernel) decide the rest.
  // Only root may ask for this without user_allow_other in /etc/fuse.conf.
  if (::geteuid() == 0) mount_options += ",allow_other";
  std::vector<std::string> argv_store = {"kvgpu-sim", "-o", mount_options};
  if (options.debug) argv_store.push_back("-d");
  std::vector<char*> argv;
  for (auto& arg : argv_store) argv.push_back(arg.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  fuse_operations ops = Operations();
  Context context{&simfs, options.cache_seconds};
  std::unique_ptr<fuse, FuseDeleter> f(fuse_new(&args, &ops, sizeof ops, &context));
  fuse_opt_free_args(&args);  // fuse_new may have copied our arguments into its own list
  if (!f) {
    err << "kvgpu-sim: libfuse refused the mount options (see its message above)\n";
    return kExitFailed;
  }
  if (options.cache_seconds > 0) {
    simfs.SetInvalidate(
        [raw = f.get()](const std::string& path) { fuse_invalidate_path(raw, path.c_str()); });
  }
  if (fuse_mount(f.get(), options.mountpoint.c_str()) != 0) {
    err << "kvgpu-sim: cannot mount at " << options.mountpoint.string()
        << " (see libfuse's message above; mounting needs root or fusermount3)\n";
    return kExitFailed;
  }
  fuse_session* session = fuse_get_session(f.get());
  if (!InstallStopHandlers(session)) {
    err << "kvgpu-sim: cannot install signal handlers: " << std::strerror(errno) << "\n";
    RemoveStopHandlers();
    fuse_unmount(f.get());
    return kExitFailed;
  }
  out << "kvgpu-sim: profile " << model.profile().name << " mounted at "
      << options.mountpoint.string() << " (vgpuctl --sysfs-root " << options.mountpoint.string()
      << "; control: " << (options.mountpoint / kControlDir / "control").string() << ")"
      << std::endl;
  if (options.background && fuse_daemonize(0) != 0) {
    err << "kvgpu-sim: cannot detach\n";
    RemoveStopHandlers();
    fuse_unmount(f.get());
    return kExitFailed;
  }

  int rc = fuse_loop_mt(f.get(), nullptr);
  RemoveStopHandlers();
  fuse_unmount(f.get());
  if (rc != 0) {
    err << "kvgpu-sim: the FUSE loop failed (" << rc << ")\n";
    return kExitFailed;
  }
  return kExitOk;
}

int Run(const MountOptions& options, NodeProfile profile, std::ostream& out, std::ostream& err) {
  if (!PrepareMountpoint(options.mountpoint, err)) return kExitFailed;

  bool own_backing = options.backing.empty();
  fs::path backing = own_backing ? FreshBacking(err) : options.backing;
  if (backing.empty()) return kExitFailed;
  int rc = kExitFailed;
  {
    auto model = KernelModel::Create(backing, std::move(profile));
    if (!model.ok()) {
      err << "kvgpu-sim: " << model.status().message() << "\n";
    } else {
      rc = Serve(*model.value(), options, out, err);
    }
  }
  if (own_backing) {
    std::error_code ec;
    fs::remove_all(backing, ec);
  }
  return rc;
}

}  // namespace

int RunSimulator(const MountOptions& options, std::ostream& out, std::ostream& err) {
  if (!(options.cache_seconds >= 0 && options.cache_seconds <= 3600)) {
    err << "kvgpu-sim: the cache time must be between 0 and 3600 seconds\n";
    return kExitUsage;
  }
  auto profile = ProfileByName(options.profile);
  if (!profile.ok()) {
    err << "kvgpu-sim: " << profile.status().message() << "\n";
    return kExitUsage;
  }
  if (options.mountpoint.empty()) {
    err << "kvgpu-sim: --mount is required\n";
    return kExitUsage;
  }
  if (!CheckFuseDevice(options.fuse_device, err)) return kExitNoFuse;
  // Absolute paths: --background changes to / after mounting, and the unmount, the model and
  // the log must still find their directories.
  MountOptions absolute = options;
  std::error_code ec;
  absolute.mountpoint = fs::absolute(options.mountpoint, ec).lexically_normal();
  if (!absolute.mountpoint.has_filename() &&
      absolute.mountpoint != absolute.mountpoint.root_path()) {
    absolute.mountpoint = absolute.mountpoint.parent_path();  // "node/" -> "node"
  }
  if (!options.backing.empty()) absolute.backing = fs::absolute(options.backing, ec);
  if (ec) {
    err << "kvgpu-sim: cannot resolve " << options.mountpoint.string() << ": " << ec.message()
        << "\n";
    return kExitFailed;
  }
  return Run(absolute, std::move(profile).value(), out, err);
}

}  // namespace kvgpu::sim
