// Following the checkpoint as kubelet rewrites it, and surviving a file that goes bad or away
// without losing the last good view.
#include "kube/kubelet/checkpoint_watcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "fakes/common/eventually.h"
#include "fakes/common/temp_dir.h"
#include "fakes/podresources/checkpoint_writer.h"

namespace kvgpu::kubelet {
namespace {

using kvgpu::testing::CheckpointRecord;
using kvgpu::testing::CheckpointWriter;
using kvgpu::testing::TempDir;

const std::string kResource = "tencent.com/vgpu-492";

// The views the watcher reported, for waiting on.
class Views {
 public:
  CheckpointWatcher::Callback Callback() {
    return [this](const CheckpointView& view) {
      std::lock_guard lock(mutex_);
      last_ = view;
      ++count_;
      changed_.notify_all();
    };
  }
  bool WaitFor(const std::function<bool(const CheckpointView&)>& done) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, ::kvgpu::testing::kEventDeadline, [&] { return done(last_); });
  }
  int count() {
    std::lock_guard lock(mutex_);
    return count_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  CheckpointView last_;
  int count_ = 0;
};

bool HasPod(const CheckpointView& view, const std::string& uid) {
  if (!view.checkpoint) return false;
  for (const auto& entry : view.checkpoint->entries) {
    if (entry.pod_uid == uid) return true;
  }
  return false;
}

TEST(CheckpointWatcherTest, FollowsRewritesInBothFormats) {
  for (auto format : {CheckpointWriter::Format::kList, CheckpointWriter::Format::kNumaMap}) {
    SCOPED_TRACE(format == CheckpointWriter::Format::kList ? "list" : "numa map");
    TempDir dir;
    CheckpointWriter writer(dir.path(), format);
    writer.Write({{"pod-1", "main", kResource, {"dev-0"}}});
    Views views;
    CheckpointWatcher watcher(dir.path());
    watcher.Start(views.Callback());
    ASSERT_TRUE(views.WaitFor([](const auto& v) { return v.current && HasPod(v, "pod-1"); }));
    writer.Write(
        {{"pod-1", "main", kResource, {"dev-0"}}, {"pod-2", "main", kResource, {"dev-1"}}});
    ASSERT_TRUE(views.WaitFor([](const auto& v) { return HasPod(v, "pod-2"); }));
    const auto view = watcher.View();
    EXPECT_EQ(view.checkpoint->format, format == CheckpointWriter::Format::kList
                                           ? CheckpointFormat::kList
                                           : CheckpointFormat::kNumaMap);
    EXPECT_EQ(view.checkpoint->EntriesWith(kResource, "dev-1").at(0)->pod_uid, "pod-2");
    watcher.Stop();
  }
}

TEST(CheckpointWatcherTest, DamageKeepsTheLastGoodViewAndSaysWhy) {
  TempDir dir;
  CheckpointWriter writer(dir.path());
  writer.Write({{"pod-1", "main", kResource, {"dev-0"}}});
  Views views;
  CheckpointWatcher watcher(dir.path());
  watcher.Start(views.Callback());
  ASSERT_TRUE(views.WaitFor([](const auto& v) { return v.current; }));

  struct Step {
    std::string description;
    std::function<void()> damage;
    std::string problem;
  };
  const std::vector<Step> steps = {
      {"truncated in place", [&] { writer.TruncateInPlace(20); }, "not valid JSON"},
      {"garbage by rename", [&] { writer.WriteRaw("\x01\x02garbage"); }, "not valid JSON"},
      {"removed", [&] { writer.Remove(); }, "does not exist"},
  };
  for (const auto& step : steps) {
    SCOPED_TRACE(step.description);
    writer.Write({{"pod-1", "main", kResource, {"dev-0"}}});
    ASSERT_TRUE(views.WaitFor([](const auto& v) { return v.current; }));
    step.damage();
    ASSERT_TRUE(views.WaitFor([&](const auto& v) {
      return !v.current && v.problem.find(step.problem) != std::string::npos;
    }));
    EXPECT_TRUE(HasPod(watcher.View(), "pod-1")) << "the last good view stays";
  }
  writer.Write({{"pod-3", "main", kResource, {"dev-2"}}});
  ASSERT_TRUE(views.WaitFor([](const auto& v) { return v.current && HasPod(v, "pod-3"); }));
  EXPECT_FALSE(HasPod(watcher.View(), "pod-1"));
}

TEST(CheckpointWatcherTest, DirectoryAppearingLaterIsPickedUp) {
  TempDir dir;
  Views views;
  CheckpointWatcher watcher(dir.path(), std::chrono::milliseconds(20));
  watcher.Start(views.Callback());
  ASSERT_TRUE(views.WaitFor([](const auto& v) { return !v.current && !v.problem.empty(); }));
  EXPECT_EQ(watcher.View().checkpoint, nullptr);
  CheckpointWriter writer(dir.path());  // kubelet starts: the directory and the file appear
  writer.Write({{"pod-1", "main", kResource, {"dev-0"}}});
  EXPECT_TRUE(views.WaitFor([](const auto& v) { return v.current && HasPod(v, "pod-1"); }));
}

TEST(CheckpointWatcherTest, ReloadReadsNow) {
  TempDir dir;
  CheckpointWriter writer(dir.path());
  writer.Write({});
  CheckpointWatcher watcher(dir.path());
  auto view = watcher.Reload();
  EXPECT_TRUE(view.current);
  writer.Write({{"pod-9", "main", kResource, {"dev-9"}}});
  view = watcher.Reload();
  EXPECT_TRUE(HasPod(view, "pod-9"));
  EXPECT_EQ(view.generation, 2u);
}

// The lifecycle tells a checkpoint that predates a vGPU from one written since by this time.
TEST(CheckpointWatcherTest, TheViewCarriesWhenKubeletWroteTheGoodFile) {
  TempDir dir;
  CheckpointWriter writer(dir.path());
  writer.Write({{"pod-1", "main", kResource, {"dev-0"}}});
  CheckpointWatcher watcher(dir.path());
  const auto set_written = [&](int64_t unix_ms) {
    std::filesystem::last_write_time(
        watcher.path(),
        std::chrono::file_clock::from_sys(
            std::chrono::sys_time<std::chrono::milliseconds>(std::chrono::milliseconds(unix_ms))));
  };
  set_written(1'700'000'000'123);
  EXPECT_EQ(watcher.Reload().written_unix_ms, 1'700'000'000'123);
  writer.TruncateInPlace(20);
  set_written(1'700'000'009'000);
  const auto damaged = watcher.Reload();
  EXPECT_FALSE(damaged.current);
  EXPECT_EQ(damaged.written_unix_ms, 1'700'000'000'123)
      << "the time of the view kept, not the file's";
}

}  // namespace
}  // namespace kvgpu::kubelet
