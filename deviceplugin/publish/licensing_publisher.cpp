#include "deviceplugin/publish/licensing_publisher.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "deviceplugin/model/state_store.h"

namespace kvgpu::deviceplugin {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConfigName = "gridd.conf";
constexpr const char* kTokenDir = "ClientConfigToken";
// Root only: the token lets anyone who holds it lease licences on the cluster's account.
constexpr ::mode_t kFileMode = 0600;
constexpr fs::perms kDirPerms = fs::perms::owner_all;

// The names a ConfigMap or Secret key may have ([-._a-zA-Z0-9]+), without the hidden entries of
// kubelet's atomic writer (..data, ..<timestamp>) and our own temp files.
bool IsPublishableName(const std::string& name) {
  if (name.empty() || name[0] == '.' || name.ends_with(".tmp")) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Result<std::string> ReadSmallFile(const fs::path& path) {
  std::error_code ec;
  uintmax_t size = fs::file_size(path, ec);
  if (ec)
    return Status::Error(ErrorCode::kIo, "cannot stat " + path.string() + ": " + ec.message());
  if (size > LicensingPublisher::kMaxFileBytes) {
    return Status::Error(ErrorCode::kInvalid,
                         path.string() + " is " + std::to_string(size) +
                             " bytes; a licensing file is at most " +
                             std::to_string(LicensingPublisher::kMaxFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(ErrorCode::kPermission, "cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::Error(ErrorCode::kIo, "cannot read " + path.string());
  return text.str();
}

// Hidden entries are kubelet's; everything else must be a file we can publish.
Result<std::map<std::string, std::string>> ReadSource(const fs::path& source) {
  std::error_code ec;
  if (!fs::is_directory(source, ec)) {
    return Status::Error(ErrorCode::kGone,
                         "licensing source " + source.string() +
                             " is not a directory (is the licensing volume mounted?)");
  }
  std::map<std::string, std::string> files;
  fs::directory_iterator it(source, ec);
  if (ec)
    return Status::Error(ErrorCode::kPermission,
                         "cannot list " + source.string() + ": " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') continue;
    if (!IsPublishableName(name)) {
      return Status::Error(ErrorCode::kInvalid, "licensing source entry '" + name +
                                                    "' is not a ConfigMap or Secret key name");
    }
    // A symlink is followed (kubelet's entries all are): its target must be a regular file.
    if (!fs::is_regular_file(it->path(), ec)) {
      return Status::Error(ErrorCode::kInvalid, "licensing source entry " + it->path().string() +
                                                    " is not a regular file");
    }
    if (files.size() == LicensingPublisher::kMaxFiles) {
      return Status::Error(ErrorCode::kInvalid,
                           "licensing source " + source.string() + " has more than " +
                               std::to_string(LicensingPublisher::kMaxFiles) + " files");
    }
    Result<std::string> content = ReadSmallFile(it->path());
    if (!content.ok()) return content.status();
    files.emplace(name, std::move(*content));
  }
  if (ec)
    return Status::Error(ErrorCode::kIo, "cannot list " + source.string() + ": " + ec.message());
  return files;
}

Status EnsurePrivateDir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return Status::Error(ErrorCode::kIo, "cannot create directory " + dir.string() +
                                             (ec ? ": " + ec.message() : ": a file is in the way"));
  }
  fs::permissions(dir, kDirPerms, fs::perm_options::replace, ec);
  if (ec) return Status::Error(ErrorCode::kPermission, "cannot chmod 0700 " + dir.string());
  return Status::Ok();
}

// Writes when the content or mode differs; counts what it did.
Status Publish(const fs::path& path, const std::string& content, size_t& changed) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == kFileMode) {
    Result<std::string> current = ReadSmallFile(path);
    if (current.ok() && *current == content) return Status::Ok();
  }
  Status written = WriteFileAtomically(path, content, kFileMode);
  if (written.ok()) ++changed;
  return written;
}

Status Unpublish(const fs::path& path, size_t& changed) {
  std::error_code ec;
  if (fs::remove(path, ec)) ++changed;
  if (ec)
    return Status::Error(ErrorCode::kIo, "cannot remove " + path.string() + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

LicensingPublisher::LicensingPublisher(fs::path source, fs::path target)
    : source_(std::move(source)), target_(std::move(target)) {}

Result<LicensingSync> LicensingPublisher::Sync() {
  Result<std::map<std::string, std::string>> source = ReadSource(source_);
  if (!source.ok()) return source.status();
  const fs::path tokens = target_ / kTokenDir;
  for (const fs::path& dir : {target_, tokens}) {
    Status made = EnsurePrivateDir(dir);
    if (!made.ok()) return made;
  }
  LicensingSync sync;
  std::set<std::string> wanted_tokens;
  for (const auto& [name, content] : *source) {
    Status done = Status::Ok();
    if (name == kConfigName) {
      sync.config = true;
      done = Publish(target_ / kConfigName, content, sync.changed);
    } else {
      wanted_tokens.insert(name);
      ++sync.tokens;
      done = Publish(tokens / name, content, sync.changed);
    }
    if (!done.ok()) return done;
  }
  if (!sync.config) {
    Status removed = Unpublish(target_ / kConfigName, sync.changed);
    if (!removed.ok()) return removed;
  }
  // Tokens that left the source (rotation) go; so does anything else in the token directory.
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(tokens, ec)) {
    if (!wanted_tokens.contains(entry.path().filename().string())) stale.push_back(entry.path());
  }
  if (ec)
    return Status::Error(ErrorCode::kIo, "cannot list " + tokens.string() + ": " + ec.message());
  for (const fs::path& path : stale) {
    Status removed = Unpublish(path, sync.changed);
    if (!removed.ok()) return removed;
  }
  return sync;
}

LicensingLoop::LicensingLoop(LicensingPublisher publisher, std::chrono::milliseconds interval,
                             Observer on_sync)
    : publisher_(std::move(publisher)), interval_(interval), on_sync_(std::move(on_sync)) {
  // The first sync on the caller's thread: the daemon starts this before it registers with
  // kubelet, so a node offers vGPUs only once the files their pods mount are there.
  Result<LicensingSync> first = publisher_.Sync();
  if (on_sync_) on_sync_(first);
  worker_.Start([this](BackgroundWorker::Handle& worker) { Run(worker); });
}

LicensingLoop::~LicensingLoop() {
  worker_.Stop();
}

void LicensingLoop::Run(BackgroundWorker::Handle& worker) {
  while (worker.SleepFor(interval_)) {
    Result<LicensingSync> result = publisher_.Sync();
    if (on_sync_) on_sync_(result);
  }
}

LicensingLoop::Observer LicensingReporter(prometheus::Registry& registry,
                                          const LicensingPublisher& publisher) {
  auto& files = prometheus::BuildGauge()
                    .Name("kvgpu_licensing_published_files")
                    .Help(
                        "Licensing files published to the node for nvidia-gridd, by kind "
                        "(config: gridd.conf, token: client configuration tokens)")
                    .Register(registry);
  auto& failures =
      prometheus::BuildCounter()
          .Name("kvgpu_licensing_sync_failures_total")
          .Help("Licensing syncs that failed and left the published files as they were")
          .Register(registry);
  auto& success = prometheus::BuildGauge()
                      .Name("kvgpu_licensing_last_success_timestamp_seconds")
                      .Help("Unix time of the last licensing sync that succeeded")
                      .Register(registry);
  struct Seen {
    std::string error;
    std::optional<LicensingSync> last;
  };
  auto seen = std::make_shared<Seen>();
  std::string from = publisher.source().string();
  std::string to = publisher.target().string();
  prometheus::Gauge* config_files = &files.Add({{"kind", "config"}});
  prometheus::Gauge* token_files = &files.Add({{"kind", "token"}});
  prometheus::Counter* failed = &failures.Add({});
  prometheus::Gauge* succeeded = &success.Add({});
  return [=](const Result<LicensingSync>& result) {
    if (!result.ok()) {
      failed->Increment();
      if (seen->error != result.status().message()) {
        spdlog::error("licensing not published ({}); the files on the node stay as they were",
                      result.status().ToString());
        seen->error = result.status().message();
      }
      return;
    }
    if (!seen->error.empty()) spdlog::info("licensing sync works again");
    seen->error.clear();
    config_files->Set(result->config ? 1 : 0);
    token_files->Set(static_cast<double>(result->tokens));
    succeeded->SetToCurrentTime();
    bool first = !seen->last.has_value();
    if (first || result->changed > 0) {
      spdlog::info(
          "licensing published from {} to {}: gridd.conf {}, {} token file(s), {} change(s)", from,
          to, result->config ? "present" : "ABSENT", result->tokens, result->changed);
    }
    if ((first || seen->last->tokens > 0) && result->tokens == 0) {
      spdlog::warn(
          "no licence token in {}: vGPU pods on this node stay unlicensed (put the token "
          "in the kvgpu-client-token Secret, docs/install.md)",
          from);
    }
    seen->last = *result;
  };
}

}  // namespace kvgpu::deviceplugin
