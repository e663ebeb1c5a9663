// Licence once per cluster: the NVIDIA licensing files (gridd.conf and the NLS client
// configuration token) live in the kata-vgpu namespace only, mounted into this DaemonSet, and the
// daemon publishes them to a root-only directory on the node that the webhook's nvidia-gridd
// sidecar mounts read-only. Tenants never copy the token, and a rotated token reaches every node
// without touching tenant namespaces.
//
// Layout. Source (a projected volume of the ConfigMap and the Secret, kubelet's atomic-writer
// layout: entries are symlinks into a hidden `..data` directory): `gridd.conf` and any number of
// token files. Target:
//   <target>/gridd.conf
//   <target>/ClientConfigToken/<each token file>
// gridd.conf's ClientConfigTokenPath names the token directory, as NVIDIA's default layout does.
//
// A sync is all or nothing: the whole source is read and checked first, so an unreadable,
// oversized or oddly named entry leaves the published files as they were. Every write is a
// rename, so gridd never reads half a file; files that left the source (an old token after a
// rotation) are removed.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "common/background_worker.h"
#include "common/status.h"

namespace prometheus {
class Registry;
}

namespace kvgpu::deviceplugin {

struct LicensingSync {
  bool config = false;  // gridd.conf is published
  size_t tokens = 0;    // token files published
  size_t changed = 0;   // files written or removed by this sync
};

class LicensingPublisher {
 public:
  static constexpr size_t kMaxFileBytes = 1 << 20;  // a token is a few KiB; gridd.conf less
  static constexpr size_t kMaxFiles = 64;

  LicensingPublisher(std::filesystem::path source, std::filesystem::path target);

  Result<LicensingSync> Sync();

  const std::filesystem::path& source() const { return source_; }
  const std::filesystem::path& target() const { return target_; }

 private:
  std::filesystem::path source_;
  std::filesystem::path target_;
};

// Runs Sync once in the constructor, then every `interval` on its own worker until destroyed;
// `on_sync` hears every outcome (logs and metrics).
class LicensingLoop {
 public:
  using Observer = std::function<void(const Result<LicensingSync>&)>;
  LicensingLoop(LicensingPublisher publisher, std::chrono::milliseconds interval, Observer on_sync);
  ~LicensingLoop();
  LicensingLoop(const LicensingLoop&) = delete;
  LicensingLoop& operator=(const LicensingLoop&) = delete;

 private:
  void Run(BackgroundWorker::Handle& worker);

  LicensingPublisher publisher_;
  std::chrono::milliseconds interval_;
  Observer on_sync_;
  BackgroundWorker worker_;  // last: stopped before the members its body uses go
};

// The daemon's observer: logs a change or a new error once (not every interval) and keeps
// kvgpu_licensing_published_files{kind}, kvgpu_licensing_sync_failures_total and
// kvgpu_licensing_last_success_timestamp_seconds in `registry`.
LicensingLoop::Observer LicensingReporter(prometheus::Registry& registry,
                                          const LicensingPublisher& publisher);

}  // namespace kvgpu::deviceplugin
