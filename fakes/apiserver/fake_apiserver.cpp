#include "fakes/apiserver/fake_apiserver.h"

#include <httplib.h>
#include <openssl/pem.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "fakes/apiserver/api_answers.h"

namespace kvgpu::testing {

namespace {

using api_answers::Answer;
using api_answers::Failure;
using api_answers::Key;

std::string Key(const nlohmann::json& pod) {
  return Key(pod["metadata"].value("namespace", ""), pod["metadata"].value("name", ""));
}

// The real server's strategic merge of a Node: status.conditions is a list merged by `type`
// (each patched condition replaces the one of its type, or is added); the rest is a merge patch.
void StrategicMergeNode(nlohmann::json& node, nlohmann::json patch) {
  if (patch.contains("status") && patch["status"].is_object() &&
      patch["status"].contains("conditions") && patch["status"]["conditions"].is_array()) {
    nlohmann::json& conditions = node["status"]["conditions"];
    if (!conditions.is_array()) conditions = nlohmann::json::array();
    for (const auto& condition : patch["status"]["conditions"]) {
      auto same = std::find_if(conditions.begin(), conditions.end(), [&](const auto& c) {
        return c.value("type", "") == condition.value("type", "");
      });
      if (same != conditions.end()) {
        *same = condition;
      } else {
        conditions.push_back(condition);
      }
    }
    patch["status"].erase("conditions");
  }
  node.merge_patch(patch);
}

// True the first time it is asked about a connection: the mark lives in the connection's SSL
// object and goes with it, so a later connection is new even when its SSL object is allocated
// at the same address.
bool FirstRequestOnConnection(const SSL* connection) {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  static char seen;
  SSL* ssl = const_cast<SSL*>(connection);  // ex_data is the connection's own scratch space
  if (ssl == nullptr || SSL_get_ex_data(ssl, index) != nullptr) return false;
  SSL_set_ex_data(ssl, index, &seen);
  return true;
}

}  // namespace

nlohmann::json MakePod(const std::string& ns, const std::string& name, const std::string& node,
                       const std::map<std::string, std::string>& resources,
                       const std::string& phase) {
  nlohmann::json quantities = nlohmann::json::object();
  for (const auto& [resource, quantity] : resources) quantities[resource] = quantity;
  nlohmann::json container = {{"name", "main"}, {"image", "busybox"}};
  if (!resources.empty()) {
    container["resources"] = {{"limits", quantities}, {"requests", quantities}};
  }
  nlohmann::json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"namespace", ns}, {"name", name}}},
      {"spec", {{"runtimeClassName", "kata"}, {"containers", nlohmann::json::array({container})}}},
      {"status", {{"phase", phase}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

FakeApiServer::FakeApiServer(bool client_certificates)
    : ca_("fake-apiserver-ca"),
      server_cert_(ca_.Issue("kube-apiserver", true)),
      client_certificates_(client_certificates) {}

FakeApiServer::~FakeApiServer() {
  Stop();
}

bool FakeApiServer::Start() {
  if (server_) return true;
  BIO* cert_bio =
      BIO_new_mem_buf(server_cert_.cert_pem.data(), static_cast<int>(server_cert_.cert_pem.size()));
  BIO* key_bio =
      BIO_new_mem_buf(server_cert_.key_pem.data(), static_cast<int>(server_cert_.key_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  X509_STORE* client_cas = nullptr;
  if (client_certificates_) {
    client_cas = X509_STORE_new();
    BIO* ca_bio = BIO_new_mem_buf(ca_.cert_pem().data(), static_cast<int>(ca_.cert_pem().size()));
    X509* ca = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr);
    X509_STORE_add_cert(client_cas, ca);
    X509_free(ca);
    BIO_free(ca_bio);
  }
  // httplib makes the handshake require a verified client certificate when given a store.
  auto server = std::make_unique<httplib::SSLServer>(cert, key, client_cas);
  X509_free(cert);
  EVP_PKEY_free(key);
  BIO_free(cert_bio);
  BIO_free(key_bio);
  if (!server->is_valid()) return false;
  // Every open watch holds one of httplib's worker threads for its whole life (the real API
  // server has no such limit). A DRA burst runs several daemons, each watching its pods, claims
  // and slices: the default pool (8 threads on two cores) left no thread for their requests.
  server->new_task_queue = [] { return new httplib::ThreadPool(64); };
  Route(*server);
  server->set_tcp_nodelay(true);
  if (keep_alive_) {
    server->set_keep_alive_max_count(100);
    server->set_keep_alive_timeout(1);
  } else {
    server->set_keep_alive_max_count(1);
  }
  if (port_ == 0) {
    port_ = server->bind_to_any_port("127.0.0.1");
    if (port_ <= 0) return false;
  } else if (!server->bind_to_port("127.0.0.1", port_)) {
    return false;
  }
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
  }
  server_ = std::move(server);
  thread_ = std::thread([server = server_.get()] { server->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs; a Stop() right after Start() would
  // otherwise leave the loop running forever.
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return true;
}

int FakeApiServer::connections_seen() const {
  std::lock_guard lock(mutex_);
  return connections_;
}

void FakeApiServer::Stop() {
  if (!server_) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
  std::lock_guard lock(mutex_);
  open_.clear();
  claim_watches_.clear();
  slice_watches_.clear();
}

void FakeApiServer::SetTokens(std::set<std::string> tokens) {
  std::lock_guard lock(mutex_);
  tokens_ = std::move(tokens);
}

bool FakeApiServer::Matches(const nlohmann::json& pod, const std::string& node) {
  if (pod.is_null()) return false;
  if (node.empty()) return true;
  return pod["spec"].value("nodeName", "") == node;
}

std::string FakeApiServer::EventLine(const Change& change, const std::string& node) {
  const bool was = Matches(change.old_pod, node);
  const bool is = Matches(change.pod, node);
  std::string type;
  if (change.type == "ADDED") {
    type = is ? "ADDED" : "";
  } else if (change.type == "DELETED") {
    type = was ? "DELETED" : "";
  } else if (was && is) {
    type = "MODIFIED";
  } else if (is) {
    type = "ADDED";  // bound to this node just now
  } else if (was) {
    type = "DELETED";
  }
  if (type.empty()) return "";
  return nlohmann::json{{"type", type}, {"object", change.pod}}.dump() + "\n";
}

std::uint64_t FakeApiServer::Record(const std::string& type, nlohmann::json old_pod,
                                    nlohmann::json pod) {
  std::uint64_t version;
  {
    std::lock_guard lock(mutex_);
    version = ++version_;
    pod["metadata"]["resourceVersion"] = std::to_string(version);
    if (type == "DELETED") {
      // A pod's log goes with it: a later pod of the same name starts without one.
      logs_.erase(Key(pod));
      pods_.erase(Key(pod));
    } else {
      pods_[Key(pod)] = pod;
    }
    Change change{version, type, std::move(old_pod), std::move(pod)};
    for (const auto& watch : open_) {
      std::string line = EventLine(change, watch->node);
      if (!line.empty()) watch->lines.push_back(std::move(line));
    }
    history_.push_back(std::move(change));
  }
  Notify();
  return version;
}

std::uint64_t FakeApiServer::AddPod(nlohmann::json pod) {
  {
    std::lock_guard lock(mutex_);
    if (pods_.count(Key(pod)) != 0) throw std::logic_error("pod exists: " + Key(pod));
  }
  auto& meta = pod["metadata"];
  if (!meta.contains("uid")) {
    meta["uid"] = "uid-" + meta.value("namespace", "") + "-" + meta.value("name", "") + "-" +
                  std::to_string(resource_version() + 1);
  }
  meta["creationTimestamp"] = "2024-01-01T00:00:00Z";
  return Record("ADDED", nullptr, std::move(pod));
}

std::uint64_t FakeApiServer::UpdatePod(nlohmann::json pod) {
  nlohmann::json old_pod;
  {
    std::lock_guard lock(mutex_);
    const auto it = pods_.find(Key(pod));
    if (it == pods_.end()) throw std::logic_error("no pod " + Key(pod));
    old_pod = it->second;
  }
  // Identity fields are the server's, whatever the caller sent.
  pod["metadata"]["uid"] = old_pod["metadata"]["uid"];
  pod["metadata"]["creationTimestamp"] = old_pod["metadata"]["creationTimestamp"];
  return Record("MODIFIED", std::move(old_pod), std::move(pod));
}

std::uint64_t FakeApiServer::SetPhase(const std::string& ns, const std::string& name,
                                      const std::string& phase) {
  nlohmann::json pod;
  {
    std::lock_guard lock(mutex_);
    pod = pods_.at(Key(ns, name));
  }
  pod["status"]["phase"] = phase;
  return UpdatePod(std::move(pod));
}

std::uint64_t FakeApiServer::MarkDeleting(const std::string& ns, const std::string& name) {
  nlohmann::json pod;
  {
    std::lock_guard lock(mutex_);
    pod = pods_.at(Key(ns, name));
  }
  pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z";
  pod["metadata"]["deletionGracePeriodSeconds"] = 30;
  return UpdatePod(std::move(pod));
}

std::uint64_t FakeApiServer::DeletePod(const std::string& ns, const std::string& name) {
  nlohmann::json pod;
  {
    std::lock_guard lock(mutex_);
    pod = pods_.at(Key(ns, name));
  }
  nlohmann::json old_pod = pod;
  return Record("DELETED", std::move(old_pod), std::move(pod));
}

std::uint64_t FakeApiServer::resource_version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

void FakeApiServer::RecordForInspection(bool record) {
  std::lock_guard lock(mutex_);
  record_for_inspection_ = record;
  if (!record) {
    slice_history_.clear();
    claim_status_history_.clear();
  }
}

void FakeApiServer::Compact() {
  std::lock_guard lock(mutex_);
  compacted_ = version_;
  history_.clear();
  claim_history_.clear();
  slice_changes_.clear();
}

void FakeApiServer::SetGoneAsHttpStatus(bool http_status) {
  std::lock_guard lock(mutex_);
  gone_as_http_ = http_status;
}

void FakeApiServer::SendBookmarks() {
  {
    std::lock_guard lock(mutex_);
    const nlohmann::json bookmark = {
        {"type", "BOOKMARK"},
        {"object",
         {{"kind", "Pod"},
          {"apiVersion", "v1"},
          {"metadata",
           {{"resourceVersion", std::to_string(version_)}, {"creationTimestamp", nullptr}}},
          {"spec", {{"containers", nullptr}}},
          {"status", nlohmann::json::object()}}}};
    for (const auto& watch : open_) {
      if (watch->bookmarks) watch->lines.push_back(bookmark.dump() + "\n");
    }
    const nlohmann::json claim_bookmark = {
        {"type", "BOOKMARK"},
        {"object",
         {{"kind", "ResourceClaim"},
          {"apiVersion", "resource.k8s.io/v1"},
          {"metadata",
           {{"resourceVersion", std::to_string(version_)}, {"creationTimestamp", nullptr}}},
          {"spec", nlohmann::json::object()}}}};
    for (const auto& watch : claim_watches_) {
      if (watch->bookmarks) watch->lines.push_back(claim_bookmark.dump() + "\n");
    }
  }
  Notify();
}

void FakeApiServer::DropWatches() {
  {
    std::lock_guard lock(mutex_);
    for (const auto& watch : open_) watch->drop = true;
    for (const auto& watch : claim_watches_) watch->drop = true;
    for (const auto& watch : slice_watches_) watch->drop = true;
  }
  Notify();
}

void FakeApiServer::EndWatches() {
  {
    std::lock_guard lock(mutex_);
    for (const auto& watch : open_) watch->end = true;
    for (const auto& watch : claim_watches_) watch->end = true;
    for (const auto& watch : slice_watches_) watch->end = true;
  }
  Notify();
}

void FakeApiServer::SetResponseDelay(std::chrono::milliseconds delay) {
  std::lock_guard lock(mutex_);
  delay_ = delay;
}

void FakeApiServer::FailRequests(int status, int count) {
  std::lock_guard lock(mutex_);
  fail_status_ = status;
  fail_count_ = count;
}

int FakeApiServer::lists() const {
  std::lock_guard lock(mutex_);
  return lists_;
}

int FakeApiServer::watches() const {
  std::lock_guard lock(mutex_);
  return watches_;
}

int FakeApiServer::open_watches() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(open_.size() + claim_watches_.size() + slice_watches_.size());
}

int FakeApiServer::unauthorized() const {
  std::lock_guard lock(mutex_);
  return unauthorized_;
}

std::vector<std::string> FakeApiServer::watch_queries() const {
  std::lock_guard lock(mutex_);
  return watch_queries_;
}

std::vector<nlohmann::json> FakeApiServer::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

bool FakeApiServer::WaitFor(const std::function<bool()>& done,
                            std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(10));
  }
  return true;
}

void FakeApiServer::Notify() {
  changed_.notify_all();
}

void FakeApiServer::Route(httplib::Server& server) {
  // Delay, authentication and injected failures come before any handler, as in the real
  // server's filter chain.
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    std::chrono::milliseconds delay;
    {
      std::lock_guard lock(mutex_);
      if (FirstRequestOnConnection(req.ssl)) ++connections_;
      delay = delay_;
    }
    if (delay.count() > 0) {
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, delay, [this] { return stopping_; });
    }
    std::lock_guard lock(mutex_);
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const bool token_ok =
        auth.rfind(prefix, 0) == 0 && tokens_.count(auth.substr(prefix.size())) != 0;
    // In client-certificate mode the handshake already authenticated the client.
    if (!client_certificates_ && !token_ok) {
      ++unauthorized_;
      Answer(res, 401, Failure(401, "Unauthorized", "Unauthorized"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (fail_count_ > 0) {
      --fail_count_;
      Answer(res, fail_status_,
             Failure(fail_status_, "InternalError", "injected failure for " + req.path));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  server.Get("/api/v1/pods", [this](const httplib::Request& req, httplib::Response& res) {
    std::string node;
    const std::string selector = req.get_param_value("fieldSelector");
    if (!selector.empty()) {
      const std::string field = "spec.nodeName=";
      if (selector.rfind(field, 0) != 0) {
        Answer(res, 400,
               Failure(400, "BadRequest", "field label not supported by this fake: " + selector));
        return;
      }
      node = selector.substr(field.size());
    }
    const std::string watch = req.get_param_value("watch");
    std::unique_lock lock(mutex_);
    if (watch != "1" && watch != "true") {
      ++lists_;
      nlohmann::json items = nlohmann::json::array();
      for (const auto& [key, pod] : pods_) {
        if (Matches(pod, node)) items.push_back(pod);
      }
      Answer(res, 200,
             {{"kind", "PodList"},
              {"apiVersion", "v1"},
              {"metadata", {{"resourceVersion", std::to_string(version_)}}},
              {"items", items}});
      return;
    }
    std::shared_ptr<Watch> w = OpenWatch(
        req, res,
        [&](std::deque<std::string>& lines) {
          for (const auto& [key, pod] : pods_) {
            if (Matches(pod, node)) {
              lines.push_back(nlohmann::json{{"type", "ADDED"}, {"object", pod}}.dump() + "\n");
            }
          }
        },
        [&](std::uint64_t from, std::deque<std::string>& lines) {
          for (const auto& change : history_) {
            if (change.version <= from) continue;
            std::string line = EventLine(change, node);
            if (!line.empty()) lines.push_back(std::move(line));
          }
        });
    if (w == nullptr) return;
    w->node = node;
    open_.insert(w);
    lock.unlock();
    Notify();
    StreamWatch(res, w, &open_);
  });

  // Merge patch of a pod (labels, annotations), as `kubectl annotate` sends it.
  server.Patch(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))", [this](const httplib::Request& req,
                                                                    httplib::Response& res) {
    const std::string key = Key(req.matches[1], req.matches[2]);
    if (req.get_header_value("Content-Type") != "application/merge-patch+json") {
      Answer(res, 415,
             Failure(415, "UnsupportedMediaType",
                     "this fake takes application/merge-patch+json only"));
      return;
    }
    const auto patch = nlohmann::json::parse(req.body, nullptr, false);
    if (!patch.is_object()) {
      Answer(res, 400, Failure(400, "BadRequest", "the patch is not a JSON object"));
      return;
    }
    nlohmann::json pod;
    {
      std::lock_guard lock(mutex_);
      const auto it = pods_.find(key);
      if (it == pods_.end()) {
        Answer(res, 404,
               Failure(404, "NotFound", "pods \"" + std::string(req.matches[2]) + "\" not found"));
        return;
      }
      pod = it->second;
    }
    pod.merge_patch(patch);
    UpdatePod(pod);
    std::lock_guard lock(mutex_);
    Answer(res, 200, pods_.at(key));
  });

  server.Post(R"(/api/v1/namespaces/([^/]+)/events)",
              [this](const httplib::Request& req, httplib::Response& res) {
                const std::string ns = req.matches[1];
                auto event = nlohmann::json::parse(req.body, nullptr, false);
                if (!event.is_object() || event.value("kind", "") != "Event" ||
                    !event.contains("involvedObject")) {
                  Answer(res, 400, Failure(400, "BadRequest", "not an Event"));
                  return;
                }
                if (event["metadata"].value("namespace", ns) != ns) {
                  Answer(res, 400,
                         Failure(400, "BadRequest",
                                 "the namespace of the provided object does not match the "
                                 "namespace sent on the request"));
                  return;
                }
                std::lock_guard lock(mutex_);
                event["metadata"]["namespace"] = ns;
                event["metadata"]["resourceVersion"] = std::to_string(++version_);
                events_.push_back(event);
                Answer(res, 201, event);
                changed_.notify_all();
              });
  RoutePods(server);
  RouteNodes(server);
  RouteResourceClaims(server);
  RouteResourceSlices(server);
  RouteResourceClaimTemplates(server);
}

void FakeApiServer::SetNode(nlohmann::json node) {
  {
    std::lock_guard lock(mutex_);
    node["metadata"]["resourceVersion"] = std::to_string(++version_);
    // The name first: json's operator= takes its argument by value, and C++17 evaluates the
    // right side of `=` first, so `node` would already be moved from.
    const std::string name = node["metadata"].value("name", "");
    nodes_[name] = std::move(node);
  }
  Notify();
}

nlohmann::json FakeApiServer::node(const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto it = nodes_.find(name);
  return it == nodes_.end() ? nlohmann::json() : it->second;
}

int FakeApiServer::node_patches() const {
  std::lock_guard lock(mutex_);
  return node_patches_;
}

void FakeApiServer::SetPodHooks(PodHooks hooks) {
  std::lock_guard lock(mutex_);
  hooks_ = std::move(hooks);
}

void FakeApiServer::SetPodLog(const std::string& ns, const std::string& name, std::string text) {
  std::lock_guard lock(mutex_);
  logs_[Key(ns, name)] = std::move(text);
}

nlohmann::json FakeApiServer::pod(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto it = pods_.find(Key(ns, name));
  return it == pods_.end() ? nlohmann::json() : it->second;
}

// POST .../pods: stored Pending (unless the pod says otherwise), then told to the hooks.
void FakeApiServer::CreatePod(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  auto pod = nlohmann::json::parse(req.body, nullptr, false);
  if (!pod.is_object() || pod.value("kind", "") != "Pod" || !pod["metadata"].is_object() ||
      pod["metadata"].value("name", "").empty() || pod["metadata"].value("namespace", ns) != ns) {
    Answer(res, 400, Failure(400, "BadRequest", "not a Pod with a name in namespace " + ns));
    return;
  }
  pod["metadata"]["namespace"] = ns;
  if (!this->pod(ns, pod["metadata"]["name"]).is_null()) {
    Answer(res, 409,
           Failure(409, "AlreadyExists",
                   "pods \"" + pod["metadata"]["name"].get<std::string>() + "\" already exists"));
    return;
  }
  if (!pod["status"].is_object() || !pod["status"].contains("phase")) {
    pod["status"] = {{"phase", "Pending"}};
  }
  AddPod(pod);
  const auto stored = this->pod(ns, pod["metadata"]["name"]);
  Answer(res, 201, stored);
  PodHooks hooks;
  {
    std::lock_guard lock(mutex_);
    hooks = hooks_;
  }
  if (hooks.created) hooks.created(stored);
}

void FakeApiServer::RoutePods(httplib::Server& server) {
  server.Post(R"(/api/v1/namespaces/([^/]+)/pods)",
              [this](const httplib::Request& req, httplib::Response& res) { CreatePod(req, res); });

  server.Get(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))", [this](const httplib::Request& req,
                                                                  httplib::Response& res) {
    const auto found = pod(req.matches[1], req.matches[2]);
    if (found.is_null()) {
      Answer(res, 404,
             Failure(404, "NotFound", "pods \"" + std::string(req.matches[2]) + "\" not found"));
      return;
    }
    Answer(res, 200, found);
  });

  server.Get(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+)/log)",
             [this](const httplib::Request& req, httplib::Response& res) {
               const std::string key = Key(req.matches[1], req.matches[2]);
               std::lock_guard lock(mutex_);
               const auto log = logs_.find(key);
               if (pods_.count(key) == 0 || log == logs_.end()) {
                 const int code = pods_.count(key) == 0 ? 404 : 400;
                 Answer(res, code,
                        Failure(code, code == 404 ? "NotFound" : "BadRequest",
                                "container \"main\" in pod \"" + std::string(req.matches[2]) +
                                    "\" is waiting to start: ContainerCreating"));
                 return;
               }
               res.status = 200;
               res.set_content(log->second, "text/plain");
             });

  server.Delete(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))",
                [this](const httplib::Request& req, httplib::Response& res) {
                  const std::string ns = req.matches[1];
                  const std::string name = req.matches[2];
                  const auto found = pod(ns, name);
                  if (found.is_null()) {
                    Answer(res, 404, Failure(404, "NotFound", "pods \"" + name + "\" not found"));
                    return;
                  }
                  PodHooks hooks;
                  {
                    std::lock_guard lock(mutex_);
                    hooks = hooks_;
                  }
                  if (hooks.deleting) {
                    hooks.deleting(ns, name);
                  } else {
                    MarkDeleting(ns, name);
                    DeletePod(ns, name);
                  }
                  Answer(res, 200, found);
                });
}

void FakeApiServer::RouteNodes(httplib::Server& server) {
  server.Get(R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req,
                                                httplib::Response& res) {
    const auto found = node(req.matches[1]);
    if (found.is_null()) {
      Answer(res, 404,
             Failure(404, "NotFound", "nodes \"" + std::string(req.matches[1]) + "\" not found"));
      return;
    }
    Answer(res, 200, found);
  });

  server.Patch(R"(/api/v1/nodes/([^/]+)(/status)?)", [this](const httplib::Request& req,
                                                            httplib::Response& res) {
    const std::string name = req.matches[1];
    const bool status = req.matches[2].matched;
    const std::string type = req.get_header_value("Content-Type");
    // The real server takes both on either path; this fake takes what each write needs.
    const std::string want =
        status ? "application/strategic-merge-patch+json" : "application/merge-patch+json";
    if (type != want) {
      Answer(res, 415, Failure(415, "UnsupportedMediaType", "this fake takes " + want + " here"));
      return;
    }
    const auto patch = nlohmann::json::parse(req.body, nullptr, false);
    if (!patch.is_object()) {
      Answer(res, 400, Failure(400, "BadRequest", "the patch is not a JSON object"));
      return;
    }
    std::lock_guard lock(mutex_);
    const auto it = nodes_.find(name);
    if (it == nodes_.end()) {
      Answer(res, 404, Failure(404, "NotFound", "nodes \"" + name + "\" not found"));
      return;
    }
    // Each path writes only its part of the object, as the real status subresource does.
    nlohmann::json scoped = patch;
    if (status) {
      scoped = nlohmann::json::object();
      if (patch.contains("status")) scoped["status"] = patch["status"];
    } else {
      scoped.erase("status");
    }
    StrategicMergeNode(it->second, scoped);
    it->second["metadata"]["resourceVersion"] = std::to_string(++version_);
    ++node_patches_;
    Answer(res, 200, it->second);
    changed_.notify_all();
  });
}

std::shared_ptr<FakeApiServer::Watch> FakeApiServer::OpenWatch(
    const httplib::Request& req, httplib::Response& res,
    const std::function<void(std::deque<std::string>&)>& current,
    const std::function<void(std::uint64_t, std::deque<std::string>&)>& since) {
  ++watches_;
  watch_queries_.push_back(req.target.substr(req.target.find('?') + 1));
  // Both as the real server parses them into ListOptions: a malformed number is a 400.
  const auto number = [&](const char* name, std::uint64_t& value) {
    const std::string text = req.get_param_value(name);
    if (text.empty()) return true;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc() && end == text.data() + text.size()) return true;
    Answer(res, 400, Failure(400, "BadRequest", std::string("invalid ") + name + " " + text));
    return false;
  };
  std::uint64_t timeout_s = 1800;
  std::uint64_t from = 0;
  if (!number("timeoutSeconds", timeout_s) || !number("resourceVersion", from)) return nullptr;
  auto w = std::make_shared<Watch>();
  w->bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
  w->deadline = std::chrono::steady_clock::now() +
                std::chrono::seconds(std::min<std::uint64_t>(timeout_s, 1U << 30));
  if (from == 0) {
    current(w->lines);
  } else if (from < compacted_) {
    const std::string message = "too old resource version: " + std::to_string(from) + " (" +
                                std::to_string(compacted_) + ")";
    if (gone_as_http_) {
      Answer(res, 410, Failure(410, "Gone", message));
      return nullptr;
    }
    w->lines.push_back(
        nlohmann::json{{"type", "ERROR"}, {"object", Failure(410, "Expired", message)}}.dump() +
        "\n");
    w->end = true;
  } else {
    since(from, w->lines);
  }
  return w;
}

void FakeApiServer::StreamWatch(httplib::Response& res, std::shared_ptr<Watch> w,
                                std::set<std::shared_ptr<Watch>>* owner) {
  res.set_chunked_content_provider(
      "application/json",
      [this, w](size_t, httplib::DataSink& sink) {
        std::unique_lock guard(mutex_);
        changed_.wait_for(guard, std::chrono::milliseconds(50),
                          [&] { return !w->lines.empty() || w->drop || w->end || stopping_; });
        if (w->drop || stopping_) return false;  // cut: no final chunk
        while (!w->lines.empty()) {
          const std::string line = std::move(w->lines.front());
          w->lines.pop_front();
          guard.unlock();
          if (!sink.write(line.data(), line.size())) return false;
          guard.lock();
        }
        if (w->end || std::chrono::steady_clock::now() >= w->deadline) {
          guard.unlock();
          sink.done();
        }
        return true;
      },
      [this, w, owner](bool) {
        {
          std::lock_guard guard(mutex_);
          owner->erase(w);
        }
        Notify();
      });
}

}  // namespace kvgpu::testing
