// An API transport that answers lists and watches from a script, without HTTP: for the tests of
// the list+watch loop (kube/list_watch.h) and of the pod watcher over it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kube/api_client.h"

namespace kvgpu::kube::testing {

struct StreamScript {
  Status end;  // how the stream ends after its lines
  std::vector<std::string> lines;
  bool opened = true;  // the server answered 200 before the lines
};

// Answers lists and watches from queues; a watch with nothing scripted stays open until cancelled.
class ScriptedTransport : public ApiTransport {
 public:
  std::deque<Result<nlohmann::json>> lists;
  std::deque<StreamScript> streams;

  Result<nlohmann::json> Get(const std::string& path, Canceller*) override {
    std::lock_guard lock(mutex_);
    paths_.push_back(path);
    if (lists.empty()) return Status::Error(ErrorCode::kTransport, "nothing scripted");
    auto answer = lists.front();
    lists.pop_front();
    return answer;
  }
  Result<nlohmann::json> Post(const std::string&, const nlohmann::json&, Canceller*) override {
    return Status::Error(ErrorCode::kHttp, "unused");
  }
  Result<nlohmann::json> Patch(const std::string&, const nlohmann::json&, const std::string&,
                               Canceller*) override {
    return Status::Error(ErrorCode::kHttp, "unused");
  }
  Status Stream(const std::string& path, std::chrono::milliseconds,
                const std::function<void()>& on_open,
                const std::function<bool(std::string_view)>& on_line, Canceller* cancel) override {
    std::optional<StreamScript> script;
    {
      std::lock_guard lock(mutex_);
      paths_.push_back(path);
      if (!streams.empty()) {
        script = streams.front();
        streams.pop_front();
      }
    }
    if (script) {
      if (script->opened) on_open();
      for (const auto& line : script->lines) {
        if (!on_line(line)) return Status();
      }
      return script->end;
    }
    on_open();
    std::unique_lock lock(mutex_);
    bool woken = false;
    if (!cancel->Arm([&] {
          std::lock_guard inner(mutex_);
          woken = true;
          idle_.notify_all();
        })) {
      return Status::Error(ErrorCode::kCancelled, "cancelled");
    }
    idle_.wait(lock, [&] { return woken; });
    lock.unlock();
    cancel->Disarm();
    return Status::Error(ErrorCode::kCancelled, "cancelled");
  }

  std::vector<std::string> paths() const {
    std::lock_guard lock(mutex_);
    return paths_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::vector<std::string> paths_;
};

}  // namespace kvgpu::kube::testing
