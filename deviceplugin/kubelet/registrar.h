// Being known to kubelet: one PluginServer per resource, served on its socket in kubelet's
// device-plugins directory and registered with kubelet's Registration service - at start, and
// again whenever kubelet loses the registration (kubelet.sock created anew, our socket removed).
// Failed registrations are retried with a backoff capped so that a restarted kubelet is found
// within seconds. The daemon's loop passes the directory's events in; the attempts run on the
// registrar's own thread (Start), every pending resource at once, each bounded by the register
// timeout, so a kubelet that accepts and never answers costs one timeout a round and holds up
// nothing else. A new kubelet.sock cancels the round in flight: the new kubelet is asked at once.
// Tests may drive the attempts by hand instead (NextAttempt, RegisterIfDue).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/background_worker.h"
#include "common/backoff.h"
#include "common/canceller.h"
#include "deviceplugin/kubelet/plugin_server.h"
#include "deviceplugin/kubelet/socket_watch.h"

namespace kvgpu::deviceplugin {

struct RegistrarOptions {
  std::filesystem::path kubelet_socket;
  std::chrono::milliseconds retry_initial{100};
  std::chrono::milliseconds retry_max{1000};
  std::chrono::milliseconds register_timeout{2000};
};

struct RegistrarHooks {
  // Builds the server of a resource seen for the first time.
  std::function<std::unique_ptr<PluginServer>(const std::string& resource)> make_server;
  // kubelet lost what we registered (it restarted): the pods it lists are stale until it lists
  // them again. Called once per restart, however many resources register again.
  std::function<void(const std::string& how)> kubelet_restarted;
  // Every registration attempt's outcome (metrics).
  std::function<void(const std::string& resource, bool ok)> attempted;
};

class Registrar {
 public:
  using Clock = std::chrono::steady_clock;

  Registrar(RegistrarOptions options, RegistrarHooks hooks);
  ~Registrar();
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  // Serves every resource that is not being served (building its server on first sight); each
  // newly served one is registered on the next attempt, which is due at once. One whose socket
  // cannot be served now waits with them: the attempts serve it again after the backoff.
  void EnsureServers(const std::vector<std::string>& resources);
  // Withheld: every server sends kubelet an empty list (node_readiness.h); also for servers built
  // later.
  void SetWithheld(bool withheld);
  // The device-plugins directory changed: kubelet.sock created means kubelet (re)started and
  // every resource registers again; our socket removed means that resource is served and
  // registered again.
  void HandleDirEvents(const std::vector<DirEvent>& events);
  // When the next registration attempt is due; nullopt when nothing waits to be registered.
  std::optional<Clock::time_point> NextAttempt() const;
  // Registers what waits, if the attempt is due by `now`; a failure backs off.
  void RegisterIfDue(Clock::time_point now);
  // Attempts registrations on the registrar's own thread from now on.
  void Start();
  // Some device list may have changed: every server pushes. Never waits for a server to stop.
  void Notify();
  // Notify, then wait until every server's open streams have written what it read, for at most
  // `wait`: what the caller does next (answering an Allocate) comes after kubelet has been sent
  // every list. False when a stream did not finish in time.
  bool Push(std::chrono::milliseconds wait);
  // Resources registered with kubelet and not lost since.
  std::set<std::string> Registered() const;
  // Stops every server and removes its socket.
  void Stop();

 private:
  void RegisterPending();
  // One resource's attempt; true when kubelet took it.
  bool RegisterOne(const std::string& resource, PluginServer& server, Canceller& cancel);
  // Serves the resource's socket, logging a failure; true when it is served.
  bool ServeLocked(const std::string& resource, PluginServer& server);  // with mutex_ held
  void AttemptAtOnce();                                                 // with mutex_ held
  void CancelInFlight();                                                // with mutex_ held
  void Attempts(BackgroundWorker::Handle& worker);                      // the worker's loop

  RegistrarOptions options_;
  RegistrarHooks hooks_;

  // Notify only needs the servers' addresses; it must never wait for mutex_, which is held while
  // a server stops (and stopping waits for in-flight calls to return).
  std::mutex notify_mutex_;
  std::vector<PluginServer*> notify_;

  mutable std::mutex mutex_;  // guards the members below
  std::map<std::string, std::unique_ptr<PluginServer>> servers_;
  std::set<std::string> unregistered_;
  // Raised each time a resource must be registered anew: a call that began before the last raise
  // does not count as its registration.
  std::map<std::string, uint64_t> lost_;
  std::set<std::string> registered_once_;
  bool restart_noted_ = false;  // kubelet_restarted told for the registrations under way
  bool withheld_ = false;
  Backoff backoff_;
  Clock::time_point next_attempt_{};
  bool kubelet_missing_logged_ = false;
  std::vector<Canceller*> in_flight_;  // the round's calls, broken by CancelInFlight
  // Runs the attempts; woken when an attempt falls due sooner. Its stop flag also breaks the
  // rounds of RegisterIfDue.
  BackgroundWorker worker_;
};

}  // namespace kvgpu::deviceplugin
