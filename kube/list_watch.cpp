#include "kube/list_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace kvgpu::kube {

const char* WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
  }
  return "?";
}

ListWatcher::ListWatcher(ApiTransport& transport, ListWatchOptions options)
    : transport_(transport),
      options_(std::move(options)),
      backoff_(options_.initial_backoff, options_.max_backoff, options_.jitter, options_.seed) {}

ListWatcher::~ListWatcher() {
  Stop();
}

void ListWatcher::Start(ListWatchCallbacks callbacks) {
  Stop();
  callbacks_ = std::move(callbacks);
  cancel_.Reset();
  following_ = false;
  // A stop breaks the list or watch in flight.
  worker_.Start([this](BackgroundWorker::Handle& worker) { Run(worker); },
                [this] { cancel_.Cancel(); });
}

void ListWatcher::Stop() {
  worker_.Stop();
}

std::string ListWatcher::resource_version() const {
  std::lock_guard lock(mutex_);
  return resource_version_;
}

void ListWatcher::SetFollowing(bool following, const std::string& reason) {
  if (following == following_) return;
  following_ = following;
  if (following) {
    spdlog::info("kube: following {} again ({})", options_.what, reason);
  } else {
    spdlog::warn("kube: lost the watch of {}: {}", options_.what, reason);
  }
  if (callbacks_.on_connection) callbacks_.on_connection(following, reason);
}

void ListWatcher::Run(BackgroundWorker::Handle& worker) {
  bool need_list = true;
  bool just_listed = false;
  while (true) {
    if (worker.stopping()) return;
    if (need_list) {
      if (!List()) {
        if (cancel_.cancelled() || !worker.SleepFor(backoff_.Next())) return;
        continue;
      }
      need_list = false;
      just_listed = true;
    }
    const WatchEnd end = Watch();
    const bool progressed = watch_progressed_;
    switch (end) {
      case WatchEnd::kStopped:
        return;
      case WatchEnd::kTimedOut:
        // The server closed the watch as asked by timeoutSeconds: watch again at once.
        backoff_.Reset();
        break;
      case WatchEnd::kGone:
        spdlog::info("kube: resourceVersion {} is too old; listing {} again", resource_version(),
                     options_.what);
        need_list = true;
        // A fresh list's version cannot be too old; if it is, the server is confused: slow down.
        if (just_listed && !progressed && !worker.SleepFor(backoff_.Next())) return;
        break;
      case WatchEnd::kBroken:
        if (progressed) backoff_.Reset();
        if (!worker.SleepFor(backoff_.Next())) return;
        break;
    }
    just_listed = false;
  }
}

bool ListWatcher::List() {
  auto answer = transport_.Get(options_.path, &cancel_);
  if (!answer.ok()) {
    if (answer.status().code() != ErrorCode::kCancelled) {
      SetFollowing(false, "list failed: " + answer.status().ToString());
    }
    return false;
  }
  const auto& list = answer.value();
  std::string version;
  if (list.contains("metadata") && list["metadata"].is_object() &&
      list["metadata"].contains("resourceVersion") &&
      list["metadata"]["resourceVersion"].is_string()) {
    version = list["metadata"]["resourceVersion"].get<std::string>();
  }
  if (version.empty() || !list.contains("items") || !list["items"].is_array()) {
    SetFollowing(false, "list answer has no items or no resourceVersion");
    return false;
  }
  std::vector<nlohmann::json> objects;
  for (const auto& item : list["items"]) {
    if (item.is_object()) objects.push_back(item);
  }
  {
    std::lock_guard lock(mutex_);
    resource_version_ = version;
  }
  ++lists_;
  backoff_.Reset();
  if (callbacks_.on_synced) callbacks_.on_synced(objects);
  SetFollowing(true, "listed " + std::to_string(objects.size()) + " at " + version);
  return true;
}

ListWatcher::WatchEnd ListWatcher::Watch() {
  watch_progressed_ = false;
  const std::string path =
      options_.path + (options_.path.find('?') == std::string::npos ? "?" : "&") +
      "watch=1&resourceVersion=" + QueryEscape(resource_version()) + "&allowWatchBookmarks=true" +
      "&timeoutSeconds=" + std::to_string(options_.watch_timeout.count());
  ++watches_;
  WatchEnd end = WatchEnd::kTimedOut;
  bool ended_by_line = false;
  const Status error = transport_.Stream(
      path, options_.idle_timeout, [this] { SetFollowing(true, "watching"); },
      [&](std::string_view line) {
        if (HandleLine(line, &end)) return true;
        ended_by_line = true;
        return false;
      },
      &cancel_);
  if (error.code() == ErrorCode::kCancelled) return WatchEnd::kStopped;
  if (ended_by_line) return end;
  if (error.ok()) return WatchEnd::kTimedOut;
  if (error.code() == ErrorCode::kExpired) return WatchEnd::kGone;
  SetFollowing(false, "watch failed: " + error.ToString());
  return WatchEnd::kBroken;
}

bool ListWatcher::HandleLine(std::string_view line, WatchEnd* end) {
  const auto event = nlohmann::json::parse(line, nullptr, false);
  if (!event.is_object() || !event.contains("type") || !event["type"].is_string() ||
      !event.contains("object") || !event["object"].is_object()) {
    // Nothing of it was applied, so reconnecting from the last version loses nothing.
    SetFollowing(false, "watch sent something that is not a watch event");
    *end = WatchEnd::kBroken;
    return false;
  }
  const std::string type = event["type"].get<std::string>();
  const auto& object = event["object"];
  if (type == "ERROR") {
    const int code = object.contains("code") && object["code"].is_number_integer()
                         ? object["code"].get<int>()
                         : 0;
    const std::string reason = object.contains("reason") && object["reason"].is_string()
                                   ? object["reason"].get<std::string>()
                                   : "";
    if (code == 410 || reason == "Expired" || reason == "Gone") {
      *end = WatchEnd::kGone;
    } else {
      SetFollowing(false, "watch ERROR event: " + object.dump());
      *end = WatchEnd::kBroken;
    }
    return false;
  }
  std::string version;
  if (object.contains("metadata") && object["metadata"].is_object() &&
      object["metadata"].contains("resourceVersion") &&
      object["metadata"]["resourceVersion"].is_string()) {
    version = object["metadata"]["resourceVersion"].get<std::string>();
  }
  watch_progressed_ = true;
  if (type == "BOOKMARK") {
    // Bookmarks carry only the version: resuming from it skips what the server already filtered.
    if (!version.empty()) {
      std::lock_guard lock(mutex_);
      resource_version_ = version;
    }
    return true;
  }
  WatchEventType kind;
  if (type == "ADDED") {
    kind = WatchEventType::kAdded;
  } else if (type == "MODIFIED") {
    kind = WatchEventType::kModified;
  } else if (type == "DELETED") {
    kind = WatchEventType::kDeleted;
  } else {
    spdlog::warn("kube: ignoring a watch event of unknown type {}", type);
    return true;
  }
  if (!version.empty()) {
    std::lock_guard lock(mutex_);
    resource_version_ = version;
  }
  if (callbacks_.on_event) callbacks_.on_event(kind, object);
  return true;
}

}  // namespace kvgpu::kube
