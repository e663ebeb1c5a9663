// An API server for pods, as far as a node agent can see one: HTTPS with a bearer token (401
// without), GET /api/v1/pods with fieldSelector=spec.nodeName=<node> as a list carrying a
// resourceVersion or, with watch=1, as a stream of watch events (chunked, one JSON object per
// line) replayed from a resourceVersion, with BOOKMARKs when asked for and timeoutSeconds
// honoured. POST /api/v1/namespaces/<ns>/events records Events; PATCH
// /api/v1/namespaces/<ns>/pods/<name> takes a JSON merge patch. A client may also create (POST),
// get, delete and read the log of a pod by name, and get and patch a Node and its status (what
// a node validator does); the test plays kubelet for such pods through PodHooks.
//
// Like the real watch cache, a watch from a version older than what is kept answers 200 and
// one ERROR event with a 410 Status ("too old resource version"); SetGoneAsHttpStatus() makes it
// a plain HTTP 410 instead. A pod bound to the node shows up as ADDED on that node's watch.
//
// Scripted faults: Compact() (forget history), DropWatches() (cut streams mid-body),
// SetResponseDelay() (slow answers), FailRequests() (5xx), Stop()/Start() (down and up on the
// same port).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fakes/common/eventually.h"
#include "fakes/common/test_pki.h"
#include "kube/config.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvgpu::testing {

// A core/v1 Pod; `resources` go to the one container's limits and requests.
nlohmann::json MakePod(const std::string& ns, const std::string& name, const std::string& node,
                       const std::map<std::string, std::string>& resources = {},
                       const std::string& phase = "Running");

class FakeApiServer {
 public:
  // With `client_certificates`, the server asks every client for a certificate signed by its CA
  // (as kube-apiserver's --client-ca-file does) and takes a verified one as authentication;
  // a client without one fails the TLS handshake.
  explicit FakeApiServer(bool client_certificates = false);
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Keep-alive: by default every answer closes its connection, so a Stop() never waits on an
  // idle one (httplib's server joins each connection's thread only after the client's next
  // request or its keep-alive timeout). With it on, a connection serves up to 100 requests and
  // is closed after 1 s idle, as a real server keeps connections open for clients that reuse
  // them. Set before Start().
  void EnableKeepAlive() { keep_alive_ = true; }
  // Client connections that sent a request so far (a client that reuses connections opens
  // fewer). Told apart by their TLS session object, marked at its first request: not by the
  // client's port, which loopback hands out again at once (net.ipv4.tcp_tw_reuse=2 lets a new
  // connection take the port of one that just closed).
  int connections_seen() const;

  // Serves on 127.0.0.1: a free port the first time, the same port after Stop().
  bool Start();
  // Goes down: no listener, every open watch cut.
  void Stop();

  int port() const { return port_; }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  const std::string& ca_pem() const { return ca_.cert_pem(); }
  // What a client needs to reach this server: its URL, its CA and the accepted token.
  kube::Config ClientConfig() const {
    kube::Config config;
    config.server = url();
    config.ca_pem = ca_pem();
    config.token = kToken;
    return config;
  }
  // A client certificate this server accepts (client_certificates mode).
  CertAndKey IssueClientCertificate(const std::string& user) const {
    return ca_.Issue(user, false);
  }
  // Accepted bearer tokens; a rotation test adds the new one and removes the old.
  void SetTokens(std::set<std::string> tokens);
  static constexpr const char* kToken = "fake-apiserver-token";

  // Pod changes; each takes the next resourceVersion and reaches the watches it matches.
  // Returns the new resourceVersion.
  std::uint64_t AddPod(nlohmann::json pod);
  std::uint64_t UpdatePod(nlohmann::json pod);  // MODIFIED; matched by namespace/name
  std::uint64_t SetPhase(const std::string& ns, const std::string& name, const std::string& phase);
  // Graceful deletion starts: deletionTimestamp set (MODIFIED).
  std::uint64_t MarkDeleting(const std::string& ns, const std::string& name);
  // The object is gone (DELETED).
  std::uint64_t DeletePod(const std::string& ns, const std::string& name);
  std::uint64_t resource_version() const;

  // Nodes: GET /api/v1/nodes/<name> answers what was set; PATCH of the node (JSON merge patch)
  // and of nodes/<name>/status (strategic merge patch: status.conditions merged by `type`, as
  // the real server's Node schema says) change it.
  void SetNode(nlohmann::json node);
  nlohmann::json node(const std::string& name) const;  // null when there is none
  int node_patches() const;

  // ResourceClaims (resource.k8s.io/v1, fake_resource_claims.cpp), as kube-apiserver 1.36 serves
  // them with DRAResourceClaimDeviceStatus and DRADeviceBindingConditions on. Over HTTP, under
  // /apis/resource.k8s.io/v1:
  //   GET  resourceclaims, namespaces/<ns>/resourceclaims: list (fieldSelector metadata.name /
  //        metadata.namespace only), or with watch=1 a watch as for pods (resourceVersion,
  //        allowWatchBookmarks, timeoutSeconds, 410 after Compact()).
  //   POST namespaces/<ns>/resourceclaims: create (generateName honoured, status dropped, 409 when
  //        the name is taken).
  //   GET  .../resourceclaims/<name>: read (counted: resource_claim_gets()).
  //   PUT  .../resourceclaims/<name>: update metadata (finalizers, labels); spec is immutable,
  //        status is kept. Removing the last finalizer of a claim being deleted deletes it.
  //   PUT  .../resourceclaims/<name>/status: UpdateStatus, as the scheduler writes allocation,
  //        reservedFor and allocationTimestamp; only status changes.
  //   PATCH .../resourceclaims/<name>/status: application/merge-patch+json or
  //        application/strategic-merge-patch+json (lists merged by their upstream keys:
  //        reservedFor by uid, devices by driver/pool/device/shareID, conditions by type;
  //        `$patch: delete` removes an entry); only status changes.
  //   DELETE .../resourceclaims/<name>: with finalizers, deletionTimestamp set (MODIFIED); without,
  //        gone (DELETED).
  // Every write with a metadata.resourceVersion that is not the stored one is 409 Conflict (a
  // merge patch carrying metadata.resourceVersion or metadata.uid makes it a precondition, as the
  // real server does); without one it is unconditional (ResourceClaim allows that). Status writes
  // are validated as upstream's ValidateResourceClaimStatusUpdate does for what this fake knows
  // (422 Invalid): the allocation may be set or cleared, never changed; each status.devices entry
  // must name an allocated device, once; at most 8 conditions, each with type, status
  // True/False/Unknown, reason and lastTransitionTime; reservedFor at most 256. Entries of
  // status.devices whose device the write deallocates are dropped (dropDeallocatedStatusDevices).
  // Not modelled: authorization (resourceclaims/binding, resourceclaims/driver), defaulting. The
  // real server differs there (1.36.3 and 1.37.2, tests/k8s/scenario_dra.py): a status.devices
  // write without the resourceclaims/driver permission for the driver's name is refused with
  // 422 Invalid (a Forbidden field error on status.devices), not 403, and the permission asked
  // is associated-node:patch only for a token bound to a pod on the claim's node, else
  // arbitrary-node:patch; this fake accepts the write.
  //
  // Test-side writes (someone else, e.g. the scheduler, without HTTP): SetResourceClaim stores the
  // claim as given (ADDED or MODIFIED; a uid is made when missing) and returns its version;
  // DeleteResourceClaim removes it at once (DELETED), finalizers or not.
  std::uint64_t SetResourceClaim(nlohmann::json claim);
  void DeleteResourceClaim(const std::string& ns, const std::string& name);
  nlohmann::json resource_claim(const std::string& ns, const std::string& name) const;  // null
  std::vector<nlohmann::json> resource_claims() const;  // by namespace/name
  int resource_claim_gets() const;
  // Status writes served (PUT or PATCH of .../status answered 200), and every claim each wrote.
  int resource_claim_status_writes() const;
  std::vector<nlohmann::json> resource_claim_status_history() const;

  // ResourceClaimTemplates (resource.k8s.io/v1, fake_resource_claim_templates.cpp): GET
  // /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaimtemplates/<name> answers what was set
  // (by metadata.namespace and name), 404 with a Status otherwise; counted. A body set as text is
  // served as it is, JSON or not: a broken or hostile server.
  void SetResourceClaimTemplate(const nlohmann::json& claim_template);
  void SetResourceClaimTemplateBody(const std::string& ns, const std::string& name,
                                    std::string body);
  int resource_claim_template_gets() const;

  // Pods that clients create and delete by name. Without hooks a created pod stays Pending and a
  // deleted one is gone at once (MODIFIED with deletionTimestamp, then DELETED). With them the
  // test is kubelet: `created` is told of each pod once stored (on the request's thread: hand
  // work on to another), and `deleting` replaces the server's own deletion.
  struct PodHooks {
    std::function<void(const nlohmann::json& pod)> created;
    std::function<void(const std::string& ns, const std::string& name)> deleting;
  };
  void SetPodHooks(PodHooks hooks);
  // What GET .../pods/<name>/log answers from now on (text/plain). Before that, a pod's log is
  // 400 "is waiting to start", as for a container not yet created.
  void SetPodLog(const std::string& ns, const std::string& name, std::string text);
  nlohmann::json pod(const std::string& ns, const std::string& name) const;  // null when none

  // ResourceSlices (resource.k8s.io/v1, fake_resource_slices.cpp): list or watch with a
  // fieldSelector of spec.nodeName and/or spec.driver, create (metadata.name or generateName;
  // dryRun=All answers without storing), get, JSON patch (RFC 6902; a failed `test` is 409) and
  // delete by name; stored as sent but for the gated field below (no defaulting or validation).
  // After every change the whole set is recorded, so a test can check each state a reader could
  // have listed.
  std::vector<nlohmann::json> resource_slices() const;  // by name
  std::vector<std::vector<nlohmann::json>> resource_slice_history() const;
  // Someone else's writes (a stale slice left by an earlier daemon, an admin's edit).
  void PutResourceSlice(nlohmann::json slice);
  void RemoveResourceSlice(const std::string& name);
  int resource_slice_writes() const;  // creates, patches and deletes served
  // Whether `compatibilityGroups` on a device's consumesCounters entry is kept (KEP-5963: an API
  // server of 1.37+ with DRADeviceCompatibilityGroups on) or dropped on every write, as by an
  // older server or one with the gate off (the default here, as in a 1.37 cluster's defaults).
  void ServeCompatibilityGroups(bool served);
  int resource_slice_dry_runs() const;  // creates with dryRun=All answered (nothing stored)

  // Whether every state of the slices and every claim status written is kept for a test to read
  // back (resource_slice_history, resource_claim_status_history; on by default). A benchmark that
  // runs for minutes turns it off so that the process's memory is the daemon's, not this record's.
  void RecordForInspection(bool record);

  // Forgets history up to now: watches from any older version get 410.
  void Compact();
  void SetGoneAsHttpStatus(bool http_status);
  // Sends a BOOKMARK at the current version to each watch that asked for bookmarks.
  void SendBookmarks();
  // Cuts every open watch without ending its body, as a dying connection does.
  void DropWatches();
  // Ends every open watch cleanly, as timeoutSeconds does.
  void EndWatches();
  // Delays every answer (list, watch headers, event POST).
  void SetResponseDelay(std::chrono::milliseconds delay);
  // The next `count` requests (any kind) get `status` with a Status body.
  void FailRequests(int status, int count);

  // What clients did.
  int lists() const;
  int watches() const;
  int open_watches() const;
  int unauthorized() const;
  std::vector<std::string> watch_queries() const;  // the raw query strings, in order
  std::vector<nlohmann::json> events() const;
  // Waits until `done` holds, checked on each change and every 10 ms.
  bool WaitFor(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = kEventDeadline) const;

 private:
  // One open watch stream: its filter (a node for pods, a namespace for claims; empty: all), the
  // lines not yet sent, and how it is to end.
  struct Watch {
    std::string node;
    std::map<std::string, std::string> fields;  // a slice watch's fieldSelector
    bool bookmarks = false;
    std::deque<std::string> lines;
    bool drop = false;
    bool end = false;
    std::chrono::steady_clock::time_point deadline;
  };
  struct Change {
    std::uint64_t version;
    std::string type;
    nlohmann::json old_pod;  // null for ADDED
    nlohmann::json pod;
  };

  std::uint64_t Record(const std::string& type, nlohmann::json old_pod, nlohmann::json pod);
  void Route(httplib::Server& server);
  void RoutePods(httplib::Server& server);
  void CreatePod(const httplib::Request& req, httplib::Response& res);
  void RouteNodes(httplib::Server& server);
  void RouteResourceClaims(httplib::Server& server);
  // Claims: mutex_ held. Stores `claim` (or removes it for DELETED) at the next version and
  // queues the event on the claim watches.
  std::uint64_t RecordClaimLocked(const std::string& type, nlohmann::json claim);
  // Serves `w` as a chunked watch body until it ends, then removes it from `owner`.
  // A watch opened as the real server opens one from its query (allowWatchBookmarks,
  // timeoutSeconds, resourceVersion): without a version its backlog is `current` (the objects as
  // ADDED events), from a version still kept it is `since(version)`, from a compacted one a 410.
  // nullptr when `res` holds the answer instead (400 for a malformed parameter, 410 as HTTP).
  // With mutex_ held.
  std::shared_ptr<Watch> OpenWatch(
      const httplib::Request& req, httplib::Response& res,
      const std::function<void(std::deque<std::string>&)>& current,
      const std::function<void(std::uint64_t, std::deque<std::string>&)>& since);
  void StreamWatch(httplib::Response& res, std::shared_ptr<Watch> w,
                   std::set<std::shared_ptr<Watch>>* owner);
  void RouteResourceSlices(httplib::Server& server);
  void RouteResourceClaimTemplates(httplib::Server& server);
  // mutex_ held: `slice` was created, changed or deleted (`type` as a watch event says it);
  // queues the event on the slice watches it matches.
  void RecordSlicesLocked(const std::string& type, const nlohmann::json& changed);
  void Notify();
  static bool Matches(const nlohmann::json& pod, const std::string& node);
  // The watch event for `change` as seen by a watch of `node`, or empty.
  static std::string EventLine(const Change& change, const std::string& node);

  TestAuthority ca_;
  CertAndKey server_cert_;
  bool client_certificates_ = false;
  bool keep_alive_ = false;
  bool record_for_inspection_ = true;
  int connections_ = 0;  // under mutex_
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::set<std::string> tokens_ = {kToken};
  std::uint64_t version_ = 1000;
  std::uint64_t compacted_ = 0;                 // versions at or below are forgotten
  std::map<std::string, nlohmann::json> pods_;  // by namespace/name
  std::deque<Change> history_;
  std::set<std::shared_ptr<Watch>> open_;
  bool gone_as_http_ = false;
  bool stopping_ = false;
  std::chrono::milliseconds delay_{0};
  int fail_status_ = 0;
  int fail_count_ = 0;
  int lists_ = 0;
  int watches_ = 0;
  int unauthorized_ = 0;
  std::vector<std::string> watch_queries_;
  std::vector<nlohmann::json> events_;
  std::map<std::string, nlohmann::json> nodes_;  // by name
  int node_patches_ = 0;
  std::map<std::string, nlohmann::json> resource_claims_;  // by namespace/name
  int resource_claim_gets_ = 0;
  struct ClaimChange {
    std::uint64_t version;
    std::string type;
    nlohmann::json claim;
  };
  std::deque<ClaimChange> claim_history_;
  std::set<std::shared_ptr<Watch>> claim_watches_;  // Watch::node holds the namespace filter
  std::deque<ClaimChange> slice_changes_;           // `claim` holds the slice
  std::set<std::shared_ptr<Watch>> slice_watches_;  // Watch::fields holds the selector
  int claim_status_writes_ = 0;
  std::vector<nlohmann::json> claim_status_history_;
  std::uint64_t generated_names_ = 0;
  std::map<std::string, std::string> claim_templates_;  // by namespace/name, the body served
  int claim_template_gets_ = 0;
  PodHooks hooks_;
  std::map<std::string, std::string> logs_;       // by namespace/name
  std::map<std::string, nlohmann::json> slices_;  // ResourceSlices by name
  std::vector<std::vector<nlohmann::json>> slice_history_;
  int slice_writes_ = 0;
  int slice_dry_runs_ = 0;
  bool serves_compatibility_groups_ = false;
};

}  // namespace kvgpu::testing
