// The fake API server's ResourceSlices (fake_apiserver.h says what it serves).
#include <httplib.h>

#include "fakes/apiserver/api_answers.h"
#include "fakes/apiserver/fake_apiserver.h"

namespace kvgpu::testing {

namespace {

constexpr const char* kCollection = "/apis/resource.k8s.io/v1/resourceslices";

using api_answers::Answer;
using api_answers::Failure;

// "spec.nodeName=a,spec.driver=b" -> {field: value}; false for any other field.
bool ParseSelector(const std::string& text, std::map<std::string, std::string>& fields) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = text.find(',', start);
    const std::string term = text.substr(start, comma == std::string::npos ? comma : comma - start);
    const size_t eq = term.find('=');
    if (eq == std::string::npos) return false;
    const std::string field = term.substr(0, eq);
    if (field != "spec.nodeName" && field != "spec.driver") return false;
    fields[field] = term.substr(eq + 1);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

// What the API server keeps of a written slice: without the gate (or the field), the devices'
// compatibilityGroups go, as the real server's dropDisabledFields and unknown-field pruning do.
void DropCompatibilityGroups(nlohmann::json& slice) {
  if (!slice.contains("spec") || !slice["spec"].is_object()) return;
  auto devices = slice["spec"].find("devices");
  if (devices == slice["spec"].end() || !devices->is_array()) return;
  for (auto& device : *devices) {
    if (!device.is_object() || !device.contains("consumesCounters")) continue;
    for (auto& use : device["consumesCounters"]) {
      if (use.is_object()) use.erase("compatibilityGroups");
    }
  }
}

// Whether `slice` is selected by a fieldSelector of spec.nodeName and/or spec.driver.
bool SliceMatches(const nlohmann::json& slice, const std::map<std::string, std::string>& fields) {
  const auto spec = slice.find("spec");
  for (const auto& [field, value] : fields) {
    const char* key = field == "spec.nodeName" ? "nodeName" : "driver";
    if (spec == slice.end() || !spec->is_object() || spec->value(key, "") != value) return false;
  }
  return true;
}

std::string SliceEventLine(const std::string& type, const nlohmann::json& slice) {
  return nlohmann::json{{"type", type}, {"object", slice}}.dump() + "\n";
}

std::string NotFound(const std::string& name) {
  return "resourceslices.resource.k8s.io \"" + name + "\" not found";
}

}  // namespace

void FakeApiServer::RecordSlicesLocked(const std::string& type, const nlohmann::json& changed) {
  for (const auto& watch : slice_watches_) {
    if (SliceMatches(changed, watch->fields)) watch->lines.push_back(SliceEventLine(type, changed));
  }
  slice_changes_.push_back({version_, type, changed});
  if (!record_for_inspection_) {
    slice_changes_.clear();  // a long benchmark: no watch resumes from an old version there
    changed_.notify_all();
    return;
  }
  std::vector<nlohmann::json> now;
  for (const auto& [name, slice] : slices_) now.push_back(slice);
  slice_history_.push_back(std::move(now));
  changed_.notify_all();
}

std::vector<nlohmann::json> FakeApiServer::resource_slices() const {
  std::lock_guard lock(mutex_);
  std::vector<nlohmann::json> out;
  for (const auto& [name, slice] : slices_) out.push_back(slice);
  return out;
}

std::vector<std::vector<nlohmann::json>> FakeApiServer::resource_slice_history() const {
  std::lock_guard lock(mutex_);
  return slice_history_;
}

int FakeApiServer::resource_slice_writes() const {
  std::lock_guard lock(mutex_);
  return slice_writes_;
}

void FakeApiServer::ServeCompatibilityGroups(bool served) {
  std::lock_guard lock(mutex_);
  serves_compatibility_groups_ = served;
}

int FakeApiServer::resource_slice_dry_runs() const {
  std::lock_guard lock(mutex_);
  return slice_dry_runs_;
}

void FakeApiServer::PutResourceSlice(nlohmann::json slice) {
  std::lock_guard lock(mutex_);
  slice["metadata"]["resourceVersion"] = std::to_string(++version_);
  if (!slice["metadata"].contains("uid")) {
    slice["metadata"]["uid"] = "slice-uid-" + std::to_string(version_);
  }
  const bool existed = slices_.contains(slice["metadata"]["name"].get<std::string>());
  slices_[slice["metadata"]["name"].get<std::string>()] = slice;
  RecordSlicesLocked(existed ? "MODIFIED" : "ADDED", slice);
}

void FakeApiServer::RemoveResourceSlice(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = slices_.find(name);
  if (it == slices_.end()) return;
  nlohmann::json gone = std::move(it->second);
  slices_.erase(it);
  gone["metadata"]["resourceVersion"] = std::to_string(++version_);
  RecordSlicesLocked("DELETED", gone);
}

void FakeApiServer::RouteResourceSlices(httplib::Server& server) {
  server.Get(kCollection, [this](const httplib::Request& req, httplib::Response& res) {
    std::map<std::string, std::string> fields;
    if (!ParseSelector(req.get_param_value("fieldSelector"), fields)) {
      Answer(res, 400,
             Failure(400, "BadRequest",
                     "field label not supported: " + req.get_param_value("fieldSelector")));
      return;
    }
    std::unique_lock lock(mutex_);
    const std::string watch = req.get_param_value("watch");
    if (watch == "1" || watch == "true") {
      std::shared_ptr<Watch> w = OpenWatch(
          req, res,
          [&](std::deque<std::string>& lines) {
            for (const auto& [name, slice] : slices_) {
              if (SliceMatches(slice, fields)) lines.push_back(SliceEventLine("ADDED", slice));
            }
          },
          [&](std::uint64_t from, std::deque<std::string>& lines) {
            for (const auto& change : slice_changes_) {
              if (change.version > from && SliceMatches(change.claim, fields)) {
                lines.push_back(SliceEventLine(change.type, change.claim));
              }
            }
          });
      if (w == nullptr) return;
      w->fields = fields;
      slice_watches_.insert(w);
      lock.unlock();
      Notify();
      StreamWatch(res, w, &slice_watches_);
      return;
    }
    nlohmann::json items = nlohmann::json::array();
    for (const auto& [name, slice] : slices_) {
      if (SliceMatches(slice, fields)) items.push_back(slice);
    }
    Answer(res, 200,
           {{"kind", "ResourceSliceList"},
            {"apiVersion", "resource.k8s.io/v1"},
            {"metadata", {{"resourceVersion", std::to_string(version_)}}},
            {"items", items}});
  });

  server.Post(kCollection, [this](const httplib::Request& req, httplib::Response& res) {
    auto slice = nlohmann::json::parse(req.body, nullptr, false);
    const bool named =
        slice.is_object() && slice.contains("metadata") && slice["metadata"].is_object() &&
        (slice["metadata"].contains("name") || slice["metadata"].contains("generateName"));
    if (!named) {
      Answer(res, 400,
             Failure(400, "BadRequest", "a ResourceSlice needs metadata.name or generateName"));
      return;
    }
    const std::string dry_run = req.get_param_value("dryRun");
    if (!dry_run.empty() && dry_run != "All") {
      Answer(res, 400, Failure(400, "BadRequest", "dryRun: unsupported value \"" + dry_run + "\""));
      return;
    }
    std::lock_guard lock(mutex_);
    if (!slice["metadata"].contains("name")) {
      slice["metadata"]["name"] = slice["metadata"]["generateName"].get<std::string>() +
                                  std::to_string(100000 + version_ % 900000);
    }
    const std::string name = slice["metadata"]["name"].get<std::string>();
    if (slices_.contains(name)) {
      Answer(res, 409,
             Failure(409, "AlreadyExists",
                     "resourceslices.resource.k8s.io \"" + name + "\" already exists"));
      return;
    }
    if (!serves_compatibility_groups_) DropCompatibilityGroups(slice);
    if (!dry_run.empty()) {  // everything a create does, nothing stored
      ++slice_dry_runs_;
      Answer(res, 201, slice);
      return;
    }
    slice["metadata"]["resourceVersion"] = std::to_string(++version_);
    slice["metadata"]["uid"] = "slice-uid-" + std::to_string(version_);
    slices_[name] = slice;
    ++slice_writes_;
    RecordSlicesLocked("ADDED", slice);
    Answer(res, 201, slice);
  });

  const std::string one = std::string(kCollection) + "/([^/]+)";
  server.Get(one, [this](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex_);
    auto it = slices_.find(req.matches[1]);
    if (it == slices_.end()) {
      Answer(res, 404, Failure(404, "NotFound", NotFound(req.matches[1])));
      return;
    }
    Answer(res, 200, it->second);
  });

  server.Patch(one, [this](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Content-Type") != "application/json-patch+json") {
      Answer(res, 415,
             Failure(415, "UnsupportedMediaType", "this fake takes application/json-patch+json"));
      return;
    }
    auto patch = nlohmann::json::parse(req.body, nullptr, false);
    if (!patch.is_array()) {
      Answer(res, 400, Failure(400, "BadRequest", "a JSON patch is an array"));
      return;
    }
    std::lock_guard lock(mutex_);
    auto it = slices_.find(req.matches[1]);
    if (it == slices_.end()) {
      Answer(res, 404, Failure(404, "NotFound", NotFound(req.matches[1])));
      return;
    }
    nlohmann::json patched;
    try {
      patched = it->second.patch(patch);
    } catch (const nlohmann::json::exception& e) {
      // A failed `test` (the resourceVersion moved): the write does not happen.
      Answer(res, 409,
             Failure(409, "Conflict", std::string("the patch did not apply: ") + e.what()));
      return;
    }
    if (!serves_compatibility_groups_) DropCompatibilityGroups(patched);
    patched["metadata"]["name"] = it->second["metadata"]["name"];
    patched["metadata"]["uid"] = it->second["metadata"]["uid"];
    patched["metadata"]["resourceVersion"] = std::to_string(++version_);
    it->second = patched;
    ++slice_writes_;
    RecordSlicesLocked("MODIFIED", patched);
    Answer(res, 200, patched);
  });

  server.Delete(one, [this](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex_);
    auto it = slices_.find(req.matches[1]);
    if (it == slices_.end()) {
      Answer(res, 404, Failure(404, "NotFound", NotFound(req.matches[1])));
      return;
    }
    nlohmann::json gone = it->second;
    slices_.erase(it);
    gone["metadata"]["resourceVersion"] = std::to_string(++version_);
    ++slice_writes_;
    RecordSlicesLocked("DELETED", gone);
    Answer(res, 200, gone);
  });
}

}  // namespace kvgpu::testing
