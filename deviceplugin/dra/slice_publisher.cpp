#include "deviceplugin/dra/slice_publisher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "common/backoff.h"

namespace kvgpu::deviceplugin::dra {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string NameOf(const json& object) {
  return object.contains("metadata") ? object["metadata"].value("name", "") : "";
}

int64_t GenerationOf(const json& slice) {
  const json& pool = slice["spec"]["pool"];
  return pool.contains("generation") && pool["generation"].is_number_integer()
             ? pool["generation"].get<int64_t>()
             : 0;
}

bool OwnedBy(const json& slice, const json& owner) {
  const json refs = slice["metadata"].value("ownerReferences", json::array());
  return std::any_of(refs.begin(), refs.end(),
                     [&](const json& ref) { return ref.value("uid", "") == owner["uid"]; });
}

// Whether any device of `slice` declares compatibility groups.
bool DeclaresGroups(const json& slice) {
  if (!slice.contains("spec") || !slice["spec"].contains("devices")) return false;
  for (const json& device : slice["spec"]["devices"]) {
    for (const json& use : device.value("consumesCounters", json::array())) {
      if (!use.value("compatibilityGroups", json::array()).empty()) return true;
    }
  }
  return false;
}

}  // namespace

SlicePublisher::SlicePublisher(kube::ApiTransport& api, Source source,
                               SlicePublisherOptions options, Observer observer)
    : api_(api),
      source_(std::move(source)),
      options_(std::move(options)),
      observer_(std::move(observer)) {}

SlicePublisher::~SlicePublisher() {
  Stop();
}

int64_t SlicePublisher::generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

bool SlicePublisher::compatibility_groups() const {
  std::lock_guard lock(mutex_);
  return with_groups_;
}

Result<bool> SlicePublisher::WithCompatibilityGroups(int64_t generation) {
  if (!options_.compatibility_groups) return false;
  const auto now = Clock::now();
  if (groups_kept_ && now < next_probe_) return *groups_kept_;
  Result<std::vector<json>> slices = source_(generation, true);
  if (!slices.ok()) return slices.status();
  auto probe = std::find_if(slices->begin(), slices->end(), DeclaresGroups);
  // No device declares one (free mixed-size or MIG GPUs only): nothing to ask, nothing differs.
  if (probe == slices->end()) return groups_kept_.value_or(false);
  // One of the pool's own slices under a name the server makes up; with dryRun=All it runs the
  // create's defaulting, field dropping and validation and stores nothing.
  json body = *probe;
  body["metadata"] = {{"generateName", "kata-vgpu-compatibility-probe-"}};
  Result<json> answer = api_.Post(std::string(kCollection) + "?dryRun=All", body, &cancel_);
  bool kept = false;
  std::string why;
  if (answer.ok()) {
    kept = DeclaresGroups(*answer);
    why =
        kept ? "kept" : "dropped (an API server before 1.37, or DRADeviceCompatibilityGroups off)";
  } else if (answer.status().http_status() == 400 || answer.status().http_status() == 422) {
    why = "refused: " + answer.status().message();
  } else {
    return answer.status();
  }
  if (!groups_kept_ || *groups_kept_ != kept) {
    spdlog::log(
        kept ? spdlog::level::info : spdlog::level::warn,
        "ResourceSlices of node {}: the API server {} devices' compatibilityGroups; "
        "publishing {} them{}",
        options_.node_name, why, kept ? "with" : "without",
        kept ? "" : " (one type or size per GPU rests on binding conditions and narrowing)");
  }
  groups_kept_ = kept;
  next_probe_ = now + options_.probe_interval;
  return kept;
}

Result<json> SlicePublisher::OwnerReference() {
  {
    std::lock_guard lock(mutex_);
    if (!owner_.is_null()) return owner_;
  }
  Result<json> node = api_.Get("/api/v1/nodes/" + options_.node_name, &cancel_);
  if (!node.ok()) return node.status();
  const std::string uid = (*node)["metadata"].value("uid", "");
  if (uid.empty()) {
    return Status::Error(ErrorCode::kDecode, "node " + options_.node_name + " has no uid");
  }
  // The Node owns the slices (so they go with it) but does not control them.
  json owner = {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", options_.node_name}, {"uid", uid}};
  std::lock_guard lock(mutex_);
  owner_ = owner;
  return owner;
}

std::string SlicePublisher::OursPath() const {
  const std::string selector =
      "spec.nodeName=" + options_.node_name + ",spec.driver=" + options_.driver;
  return std::string(kCollection) + "?fieldSelector=" + kube::QueryEscape(selector);
}

Result<std::vector<json>> SlicePublisher::ListOurs() {
  Result<json> list = api_.Get(OursPath(), &cancel_);
  if (!list.ok()) return list.status();
  if (!list->contains("items") || !(*list)["items"].is_array()) {
    return Status::Error(ErrorCode::kDecode, "the ResourceSlice list has no items");
  }
  std::vector<json> ours;
  for (const json& item : (*list)["items"]) {
    // The field selector is the server's; what is written or deleted is checked here too.
    if (!item.contains("spec") || item["spec"].value("nodeName", "") != options_.node_name ||
        item["spec"].value("driver", "") != options_.driver) {
      continue;
    }
    ours.push_back(item);
  }
  return ours;
}

Result<bool> SlicePublisher::Reconcile() {
  Result<json> owner = OwnerReference();
  if (!owner.ok()) return owner.status();
  Result<std::vector<json>> existing = ListOurs();
  if (!existing.ok()) return existing.status();

  int64_t known = generation();
  std::map<std::string, json> by_name;
  for (const json& slice : *existing) {
    known = std::max(known, GenerationOf(slice));
    by_name[NameOf(slice)] = slice;
  }
  Result<bool> with_groups = WithCompatibilityGroups(known);
  if (!with_groups.ok()) return with_groups.status();
  {
    std::lock_guard lock(mutex_);
    with_groups_ = *with_groups;
  }
  // Up to date: the same slices, all at the highest generation, all ours.
  Result<std::vector<json>> now = source_(known, *with_groups);
  if (!now.ok()) return now.status();
  bool same = now->size() == by_name.size();
  for (const json& slice : *now) {
    if (!same) break;
    auto found = by_name.find(NameOf(slice));
    same = found != by_name.end() && found->second["spec"] == slice["spec"] &&
           OwnedBy(found->second, *owner);
  }
  if (same) {
    std::lock_guard lock(mutex_);
    generation_ = known;
    return false;
  }

  const int64_t next = known + 1;
  Result<std::vector<json>> wanted = source_(next, *with_groups);
  if (!wanted.ok()) return wanted.status();
  {
    std::lock_guard lock(mutex_);
    generation_ = next;
  }
  for (json slice : *wanted) {
    slice["metadata"]["ownerReferences"] = json::array({*owner});
    const std::string name = NameOf(slice);
    auto found = by_name.find(name);
    Result<json> written = json();
    if (found == by_name.end()) {
      written = api_.Post(kCollection, slice, &cancel_);
    } else {
      // Replaces the spec and owners only if nobody changed the slice since it was listed.
      const json patch = json::array(
          {{{"op", "test"},
            {"path", "/metadata/resourceVersion"},
            {"value", found->second["metadata"].value("resourceVersion", "")}},
           {{"op", "add"}, {"path", "/metadata/ownerReferences"}, {"value", json::array({*owner})}},
           {{"op", "replace"}, {"path", "/spec"}, {"value", slice["spec"]}}});
      written = api_.Patch(std::string(kCollection) + "/" + name, patch,
                           "application/json-patch+json", &cancel_);
      by_name.erase(found);
    }
    if (!written.ok()) return written.status();
  }
  // What the new generation no longer has. Older-generation slices are already ignored by
  // readers once the new generation is complete; deleting them keeps the pool's count of objects
  // what it says.
  for (const auto& [name, slice] : by_name) {
    const bool still_wanted = std::any_of(wanted->begin(), wanted->end(),
                                          [&](const json& w) { return NameOf(w) == name; });
    if (still_wanted) continue;
    Result<json> deleted = api_.Delete(std::string(kCollection) + "/" + name, &cancel_);
    if (!deleted.ok() && deleted.status().http_status() != 404) return deleted.status();
  }
  return true;
}

void SlicePublisher::Trigger() {
  {
    std::lock_guard lock(mutex_);
    triggered_ = true;
  }
  worker_.Wake();
}

void SlicePublisher::Start() {
  Stop();
  {
    std::lock_guard lock(mutex_);
    triggered_ = true;
  }
  cancel_.Reset();
  worker_.Start([this](BackgroundWorker::Handle& worker) { Loop(worker); });
  if (!options_.watch_deletions) return;
  kube::ListWatchOptions watch;
  watch.path = OursPath();
  watch.what = "ResourceSlices of node " + options_.node_name;
  watcher_ = std::make_unique<kube::ListWatcher>(api_, std::move(watch));
  watcher_->Start({
      // A relist: slices may have gone while nobody watched; the pass finds out.
      .on_synced = [this](const std::vector<nlohmann::json>&) { Trigger(); },
      .on_event =
          [this](kube::WatchEventType type, const nlohmann::json&) {
            if (type != kube::WatchEventType::kDeleted) return;
            // Our own pass deletes the slices a new generation no longer has: the pass this
            // triggers then finds nothing to write.
            spdlog::debug("a ResourceSlice of node {} was deleted; checking the pool",
                          options_.node_name);
            Trigger();
          },
      .on_connection = nullptr,
  });
}

void SlicePublisher::Stop() {
  if (watcher_) {
    watcher_->Stop();
    watcher_.reset();
  }
  worker_.RequestStop();
  cancel_.Cancel();
  worker_.Stop();
}

void SlicePublisher::Loop(BackgroundWorker::Handle& worker) {
  Backoff backoff(options_.min_interval, std::max(options_.min_interval, options_.retry_max));
  bool failing = false;
  auto earliest = Clock::now();
  auto resync = Clock::now() + options_.resync;
  while (true) {
    // A trigger waits out the rate limit (or the backoff); a resync is due regardless. Every
    // trigger wakes the worker after raising the flag.
    while (true) {
      Clock::time_point until;
      {
        std::lock_guard lock(mutex_);
        const auto now = Clock::now();
        if (now >= resync || (triggered_ && now >= earliest)) break;
        until = triggered_ ? std::min(resync, earliest) : resync;
      }
      if (!worker.WaitUntil(until)) return;
    }
    {
      std::lock_guard lock(mutex_);
      if (worker.stopping()) return;
      triggered_ = false;
    }
    Result<bool> done = Reconcile();
    if (!done.ok() && done.status().code() == ErrorCode::kCancelled) return;
    if (observer_) observer_(done.ok(), done.ok() && *done);
    if (done.ok()) {
      if (failing) spdlog::info("ResourceSlices of node {} published again", options_.node_name);
      failing = false;
      backoff.Reset();
      earliest = Clock::now() + options_.min_interval;
      resync = Clock::now() + options_.resync;
      continue;
    }
    spdlog::log(failing ? spdlog::level::debug : spdlog::level::warn,
                "ResourceSlices of node {} not published: {}; retrying", options_.node_name,
                done.status().ToString());
    failing = true;
    earliest = Clock::now() + backoff.Next();
    std::lock_guard lock(mutex_);
    triggered_ = true;
  }
}

}  // namespace kvgpu::deviceplugin::dra
