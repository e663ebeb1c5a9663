#include "common/background_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>

#include "fakes/common/eventually.h"

namespace kvgpu {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using testing::Eventually;
using testing::kEventDeadline;

// Runs `call` on another thread; true when it returned within the deadline. A call that hangs
// (a stop that does not wake an hour-long wait) ends the test with that said, instead of hanging
// it until CTest's timeout.
template <typename Call>
bool ReturnsInTime(Call call) {
  auto done = std::async(std::launch::async, std::move(call));
  if (done.wait_for(kEventDeadline) == std::future_status::ready) return true;
  std::fprintf(stderr, "the call did not return within %lld ms\n",
               static_cast<long long>(kEventDeadline.count()));
  std::abort();  // the future's destructor would wait for the hung call
}

TEST(BackgroundWorkerTest, StopWakesAWaitOfAnHour) {
  BackgroundWorker worker;
  std::atomic<bool> waiting{false};
  std::atomic<int> returned{-1};
  worker.Start([&](BackgroundWorker::Handle& handle) {
    waiting = true;
    returned = handle.WaitFor(hours(1)) ? 1 : 0;
  });
  ASSERT_TRUE(Eventually([&] { return waiting.load(); }));
  EXPECT_TRUE(worker.running());
  ASSERT_TRUE(ReturnsInTime([&] { worker.Stop(); }));
  EXPECT_EQ(returned.load(), 0);  // the wait said: stop
  EXPECT_FALSE(worker.running());
  EXPECT_TRUE(worker.stopping());
}

TEST(BackgroundWorkerTest, WakeRunsTheBodyAgainBeforeItsPeriod) {
  BackgroundWorker worker;
  std::atomic<int> passes{0};
  worker.Start([&](BackgroundWorker::Handle& handle) {
    do {
      ++passes;
    } while (handle.WaitFor(hours(1)));
  });
  ASSERT_TRUE(Eventually([&] { return passes.load() == 1; }));
  worker.Wake();
  EXPECT_TRUE(Eventually([&] { return passes.load() == 2; }));
  worker.Wake();
  EXPECT_TRUE(Eventually([&] { return passes.load() == 3; }));
}

TEST(BackgroundWorkerTest, AWakeWhileTheBodyIsBusyIsKeptForItsNextWait) {
  BackgroundWorker worker;
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<int> passes{0};
  worker.Start([&](BackgroundWorker::Handle& handle) {
    do {
      if (++passes == 1) opened.wait();
    } while (handle.Wait());
  });
  ASSERT_TRUE(Eventually([&] { return passes.load() == 1; }));
  worker.Wake();  // the body is busy in its first pass, not waiting
  gate.set_value();
  EXPECT_TRUE(Eventually([&] { return passes.load() == 2; }));
}

TEST(BackgroundWorkerTest, SleepForIsNotCutShortByAWakeButKeepsIt) {
  BackgroundWorker worker;
  std::atomic<bool> done{false};
  std::atomic<bool> slept{false};
  std::atomic<bool> woken{false};
  milliseconds took{0};
  worker.Start([&](BackgroundWorker::Handle& handle) {
    const auto start = BackgroundWorker::Clock::now();
    slept = handle.SleepFor(milliseconds(200));
    took = std::chrono::duration_cast<milliseconds>(BackgroundWorker::Clock::now() - start);
    woken = handle.WaitFor(hours(1));  // the wake given during the sleep
    done = true;
  });
  worker.Wake();
  ASSERT_TRUE(Eventually([&] { return done.load(); }));
  EXPECT_TRUE(slept.load());
  EXPECT_TRUE(woken.load());
  EXPECT_GE(took, milliseconds(200));  // a lower bound: a slow machine only sleeps longer
}

TEST(BackgroundWorkerTest, StopTwiceFromSeveralThreadsAndWithoutStartIsSafe) {
  BackgroundWorker never_started;
  never_started.Stop();
  never_started.Stop();
  EXPECT_FALSE(never_started.running());

  BackgroundWorker worker;
  worker.Start([](BackgroundWorker::Handle& handle) {
    while (handle.Wait()) {
    }
  });
  ASSERT_TRUE(ReturnsInTime([&] {
    std::thread other([&] { worker.Stop(); });
    worker.Stop();
    other.join();
    worker.Stop();
  }));
  EXPECT_FALSE(worker.running());
}

TEST(BackgroundWorkerTest, TheDestructorStops) {
  auto worker = std::make_unique<BackgroundWorker>();
  std::atomic<bool> returned{false};
  std::atomic<bool> waiting{false};
  worker->Start([&](BackgroundWorker::Handle& handle) {
    waiting = true;
    while (handle.WaitFor(hours(1))) {
    }
    returned = true;
  });
  ASSERT_TRUE(Eventually([&] { return waiting.load(); }));
  ASSERT_TRUE(ReturnsInTime([&] { worker.reset(); }));
  EXPECT_TRUE(returned.load());
}

TEST(BackgroundWorkerTest, TheOnStopHookBreaksWhatTheBodyBlocksInOnceAfterTheFlagIsUp) {
  BackgroundWorker worker;
  std::promise<void> cancel;  // stands for an HTTP stream only cancelling ends
  std::future<void> cancelled = cancel.get_future();
  std::atomic<bool> blocked{false};
  std::atomic<bool> returned{false};
  std::atomic<int> hooks{0};
  std::atomic<bool> hook_saw_stopping{false};
  worker.Start(
      [&](BackgroundWorker::Handle& handle) {
        blocked = true;
        cancelled.wait();
        returned = handle.stopping();
      },
      [&] {
        hook_saw_stopping = worker.stopping();
        ++hooks;
        cancel.set_value();
      });
  ASSERT_TRUE(Eventually([&] { return blocked.load(); }));
  ASSERT_TRUE(ReturnsInTime([&] {
    worker.Stop();
    worker.Stop();
  }));
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(hooks.load(), 1);
  EXPECT_TRUE(hook_saw_stopping.load());
}

TEST(BackgroundWorkerTest, StartsAgainAfterStopAndAStartStopsTheRunInProgress) {
  BackgroundWorker worker;
  std::atomic<int> runs{0};
  std::atomic<int> ended{0};
  auto body = [&](BackgroundWorker::Handle& handle) {
    ++runs;
    while (handle.Wait()) {
    }
    ++ended;
  };
  worker.Start(body);
  ASSERT_TRUE(Eventually([&] { return runs.load() == 1; }));
  ASSERT_TRUE(ReturnsInTime([&] { worker.Stop(); }));
  EXPECT_EQ(ended.load(), 1);

  worker.Start(body);
  EXPECT_FALSE(worker.stopping());
  EXPECT_TRUE(worker.running());
  ASSERT_TRUE(Eventually([&] { return runs.load() == 2; }));
  ASSERT_TRUE(ReturnsInTime([&] { worker.Start(body); }));
  EXPECT_EQ(ended.load(), 2);
  ASSERT_TRUE(Eventually([&] { return runs.load() == 3; }));
}

TEST(BackgroundWorkerTest, AStopAskedBeforeTheWaitEndsItAtOnce) {
  BackgroundWorker worker;
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<int> returned{-1};
  worker.Start([&](BackgroundWorker::Handle& handle) {
    opened.wait();
    returned = handle.WaitFor(hours(1)) ? 1 : 0;
  });
  worker.RequestStop();  // returns at once, the body still held at the gate
  EXPECT_TRUE(worker.stopping());
  gate.set_value();
  ASSERT_TRUE(ReturnsInTime([&] { worker.Stop(); }));
  EXPECT_EQ(returned.load(), 0);
}

}  // namespace
}  // namespace kvgpu
