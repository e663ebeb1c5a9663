// The one way production code runs a loop in the background (in the spirit of leveldb's
// Env::Schedule): the worker owns the thread, the stop flag and the wake-up; the owner gives it a
// body. The body waits through its Handle, which returns when the time is up, when the owner
// woke it (Wake: something changed, look again) or when it is to stop. A wake that comes while
// the body is busy is kept for its next wait, so none is lost: an owner changes its own state
// under its own lock, then calls Wake, and the body looks at that state after every wait.
// A body that blocks elsewhere (a watch stream, poll on a file descriptor) is broken out of by
// the on-stop hook given to Start, which Stop runs after raising the stop flag (cancel the HTTP
// call, write the eventfd).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace kvgpu {

class BackgroundWorker {
 public:
  using Clock = std::chrono::steady_clock;

  // What the body sees of its worker. Every wait returns true while the body is to go on and
  // false once it is to stop (at once when a stop is already asked).
  class Handle {
   public:
    // Waits until Wake(), a stop, or `deadline` (time_point::max(): no deadline).
    bool WaitUntil(Clock::time_point deadline);
    bool WaitFor(std::chrono::milliseconds delay);
    // Waits until Wake() or a stop.
    bool Wait() { return WaitUntil(Clock::time_point::max()); }
    // Waits until `deadline` unless a stop comes first; Wake() does not cut it short (a backoff,
    // a fixed period) but is kept for the next wait.
    bool SleepUntil(Clock::time_point deadline);
    bool SleepFor(std::chrono::milliseconds delay);
    bool stopping() const;

   private:
    friend class BackgroundWorker;
    explicit Handle(BackgroundWorker& worker) : worker_(worker) {}
    BackgroundWorker& worker_;
  };

  using Body = std::function<void(Handle& worker)>;

  BackgroundWorker() = default;
  // Stops.
  ~BackgroundWorker();
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  // Runs `body` on a new thread; a run still in progress is stopped first. `on_stop`, when set,
  // runs once on the stopping thread after the stop flag is raised and before the join: for
  // breaking what the body blocks in outside the Handle's waits.
  void Start(Body body, std::function<void()> on_stop = nullptr);
  // The body's next wait (or the one it is in) returns now.
  void Wake();
  // Raises the stop flag, wakes the body and runs the on-stop hook; returns at once.
  void RequestStop();
  // RequestStop, then waits for the body to return. Idempotent; safe to call without Start and
  // from several threads. Not from the body itself.
  void Stop();

  // A run is in progress: started and not yet joined by Stop.
  bool running() const;
  // The stop flag: raised by Stop/RequestStop (with or without a run), lowered by Start.
  bool stopping() const;

 private:
  void StopLocked();  // with control_mutex_ held

  mutable std::mutex mutex_;  // guards the flags below
  std::condition_variable wake_;
  bool stopping_ = false;
  bool woken_ = false;
  bool running_ = false;
  std::function<void()> on_stop_;  // taken by the first stop request of a run

  std::mutex control_mutex_;  // Start and Stop, one at a time: they join
  std::thread thread_;
};

}  // namespace kvgpu
