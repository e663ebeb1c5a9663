#include "common/background_worker.h"

#include <utility>

namespace kvgpu {

bool BackgroundWorker::Handle::WaitUntil(Clock::time_point deadline) {
  std::unique_lock lock(worker_.mutex_);
  auto done = [this] { return worker_.stopping_ || worker_.woken_; };
  if (deadline == Clock::time_point::max()) {
    worker_.wake_.wait(lock, done);
  } else {
    worker_.wake_.wait_until(lock, deadline, done);
  }
  worker_.woken_ = false;
  return !worker_.stopping_;
}

bool BackgroundWorker::Handle::WaitFor(std::chrono::milliseconds delay) {
  return WaitUntil(Clock::now() + delay);
}

bool BackgroundWorker::Handle::SleepUntil(Clock::time_point deadline) {
  std::unique_lock lock(worker_.mutex_);
  worker_.wake_.wait_until(lock, deadline, [this] { return worker_.stopping_; });
  return !worker_.stopping_;
}

bool BackgroundWorker::Handle::SleepFor(std::chrono::milliseconds delay) {
  return SleepUntil(Clock::now() + delay);
}

bool BackgroundWorker::Handle::stopping() const {
  return worker_.stopping();
}

BackgroundWorker::~BackgroundWorker() {
  Stop();
}

void BackgroundWorker::Start(Body body, std::function<void()> on_stop) {
  std::lock_guard control(control_mutex_);
  StopLocked();
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
    woken_ = false;
    running_ = true;
    on_stop_ = std::move(on_stop);
  }
  thread_ = std::thread([this, body = std::move(body)] {
    Handle handle(*this);
    body(handle);
  });
}

void BackgroundWorker::Wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  wake_.notify_all();
}

void BackgroundWorker::RequestStop() {
  std::function<void()> on_stop;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    on_stop = std::exchange(on_stop_, nullptr);
  }
  wake_.notify_all();
  if (on_stop) on_stop();
}

void BackgroundWorker::Stop() {
  std::lock_guard control(control_mutex_);
  StopLocked();
}

void BackgroundWorker::StopLocked() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  running_ = false;
}

bool BackgroundWorker::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

bool BackgroundWorker::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

}  // namespace kvgpu
