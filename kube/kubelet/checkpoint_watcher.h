// Follows kubelet's device-manager checkpoint with inotify. kubelet replaces the file by
// rename, so the directory is watched, not the file. A missing, truncated or corrupt file never
// replaces the last good view: the view keeps it, says the file is not current, and why.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/background_worker.h"
#include "kube/kubelet/checkpoint.h"

namespace kvgpu::kubelet {

struct CheckpointView {
  std::shared_ptr<const Checkpoint> checkpoint;  // the last good read; null before the first
  bool current = false;                          // the file on disk is what `checkpoint` shows
  std::string problem;                           // why not current: missing, unreadable, corrupt
  std::uint64_t generation = 0;                  // bumps on every read, good or bad
  // When kubelet wrote what `checkpoint` shows (the file's mtime, taken before reading it, so the
  // content is at least this new); 0 when unknown. The kernel stamps files from a coarse clock,
  // so this may lag the writer's wall clock by a tick: it errs towards "older".
  std::int64_t written_unix_ms = 0;
};

class CheckpointWatcher {
 public:
  using Callback = std::function<void(const CheckpointView& view)>;

  // `kubelet_dir` is kubelet's root (/var/lib/kubelet); `retry` paces the watch setup while the
  // device-plugins directory does not exist (kubelet not started yet, or it was removed).
  explicit CheckpointWatcher(std::filesystem::path kubelet_dir,
                             std::chrono::milliseconds retry = std::chrono::seconds(1));
  ~CheckpointWatcher();
  CheckpointWatcher(const CheckpointWatcher&) = delete;
  CheckpointWatcher& operator=(const CheckpointWatcher&) = delete;

  // Reads the file once, then follows it; `on_change` runs on the watcher's thread after every
  // read (and once for the first).
  void Start(Callback on_change);
  void Stop();

  CheckpointView View() const;
  // Reads now, outside inotify's pace (e.g. right after an Allocate); returns the new view.
  CheckpointView Reload();

  const std::filesystem::path& path() const { return path_; }

 private:
  void Run();
  CheckpointView ReadLocked();

  std::filesystem::path dir_;
  std::filesystem::path path_;
  std::chrono::milliseconds retry_;
  Callback on_change_;
  int stop_fd_ = -1;  // the body polls it beside inotify; the worker's stop writes it

  mutable std::mutex mutex_;
  CheckpointView view_;
  BackgroundWorker worker_;  // last: stopped before the members its body uses go
};

}  // namespace kvgpu::kubelet
