#include "deviceplugin/kubelet/registrar.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/log_safe.h"

namespace kvgpu::deviceplugin {

Registrar::Registrar(RegistrarOptions options, RegistrarHooks hooks)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      backoff_(options_.retry_initial, options_.retry_max) {}

Registrar::~Registrar() {
  Stop();
}

void Registrar::AttemptAtOnce() {
  next_attempt_ = Clock::now();
  backoff_.Reset();
  worker_.Wake();
}

void Registrar::CancelInFlight() {
  for (Canceller* cancel : in_flight_) cancel->Cancel();
}

void Registrar::Start() {
  std::lock_guard lock(mutex_);
  if (worker_.running()) return;
  worker_.Start([this](BackgroundWorker::Handle& worker) { Attempts(worker); });
}

void Registrar::Attempts(BackgroundWorker::Handle& worker) {
  while (!worker.stopping()) {
    Clock::time_point due = Clock::time_point::max();  // nothing waits: until woken
    {
      std::lock_guard lock(mutex_);
      if (!unregistered_.empty()) due = next_attempt_;
    }
    // Whatever changes what is due wakes the worker after the change, so none is missed here.
    if (Clock::now() < due) {
      worker.WaitUntil(due);
      continue;
    }
    RegisterPending();
  }
}

void Registrar::EnsureServers(const std::vector<std::string>& resources) {
  for (const std::string& resource : resources) {
    std::lock_guard lock(mutex_);
    auto& server = servers_[resource];
    if (!server) {
      server = hooks_.make_server(resource);
      std::lock_guard notify_lock(notify_mutex_);
      notify_.push_back(server.get());
    }
    server->SetWithheld(withheld_);
    if (server->serving()) continue;
    // Waits to be registered whether or not its socket could be served now: the attempts serve
    // it again (RegisterPending), so a socket that did not answer on a busy machine is back
    // within the retry backoff, not at the next rescan.
    unregistered_.insert(resource);
    ++lost_[resource];
    if (!ServeLocked(resource, *server)) continue;
    AttemptAtOnce();
  }
  worker_.Wake();
}

bool Registrar::ServeLocked(const std::string& resource, PluginServer& server) {
  Status served = server.Serve();
  if (!served.ok()) spdlog::error("serve failed resource={}: {}", resource, served.ToString());
  return served.ok();
}

void Registrar::SetWithheld(bool withheld) {
  std::lock_guard lock(mutex_);
  withheld_ = withheld;
  for (auto& [resource, server] : servers_) server->SetWithheld(withheld);
}

void Registrar::HandleDirEvents(const std::vector<DirEvent>& events) {
  bool kubelet_back = false;
  std::set<std::string> lost;
  for (const DirEvent& e : events) {
    if (e.name == kKubeletSocketName) {
      if (e.created) kubelet_back = true;
      continue;
    }
    if (!e.created) lost.insert(e.name);
  }
  if (!kubelet_back && lost.empty()) return;
  std::lock_guard lock(mutex_);
  for (auto& [resource, server] : servers_) {
    // A restarting kubelet clears the directory; the event may predate a socket served since.
    bool ours_lost =
        lost.contains(server->socket_name()) && !std::filesystem::exists(server->socket_path());
    if (ours_lost || (kubelet_back && !std::filesystem::exists(server->socket_path()))) {
      spdlog::info("socket removed (kubelet restart?) resource={}; serving again", resource);
      (void)ServeLocked(resource, *server);
    }
    if (ours_lost || kubelet_back) {
      unregistered_.insert(resource);
      ++lost_[resource];
    }
  }
  if (kubelet_back) {
    spdlog::info("kubelet.sock created (kubelet started); registering again");
    if (hooks_.kubelet_restarted) hooks_.kubelet_restarted("kubelet.sock created");
    // A round still waiting on the kubelet that went away would hold up the one that came.
    CancelInFlight();
  }
  AttemptAtOnce();
}

std::optional<Registrar::Clock::time_point> Registrar::NextAttempt() const {
  std::lock_guard lock(mutex_);
  if (unregistered_.empty()) return std::nullopt;
  return next_attempt_;
}

void Registrar::RegisterIfDue(Clock::time_point now) {
  std::optional<Clock::time_point> due = NextAttempt();
  if (due && now >= *due) RegisterPending();
}

void Registrar::RegisterPending() {
  std::vector<std::pair<std::string, PluginServer*>> pending;
  bool unserved = false;
  {
    std::lock_guard lock(mutex_);
    for (const std::string& resource : unregistered_) {
      auto it = servers_.find(resource);
      if (it == servers_.end()) continue;
      // A socket that could not be served earlier (it did not answer its own dial in time) is
      // served again here, at the pace of the backoff, never in a tight loop.
      if (!it->second->serving() && !ServeLocked(resource, *it->second)) {
        unserved = true;
        continue;
      }
      pending.emplace_back(resource, it->second.get());
    }
  }
  if (pending.empty()) {
    std::lock_guard lock(mutex_);
    next_attempt_ = Clock::now() + backoff_.Next();
    return;
  }
  // Every resource at once: a round costs one register timeout, not one per resource.
  std::vector<Canceller> cancels(pending.size());
  {
    std::lock_guard lock(mutex_);
    for (Canceller& cancel : cancels) {
      if (worker_.stopping()) cancel.Cancel();
      in_flight_.push_back(&cancel);
    }
  }
  std::vector<char> took(pending.size(), 0);
  std::vector<std::thread> calls;
  calls.reserve(pending.size());
  for (size_t i = 0; i < pending.size(); ++i) {
    calls.emplace_back([&, i] {
      took[i] = RegisterOne(pending[i].first, *pending[i].second, cancels[i]) ? 1 : 0;
    });
  }
  for (std::thread& call : calls) call.join();
  std::lock_guard lock(mutex_);
  std::erase_if(in_flight_, [&](Canceller* c) {
    return c >= cancels.data() && c < cancels.data() + cancels.size();
  });
  bool cancelled = false;
  for (const Canceller& cancel : cancels) cancelled = cancelled || cancel.cancelled();
  // A cancelled round was cut short for a new kubelet (AttemptAtOnce set the clock) or for Stop.
  if (!cancelled && (unserved || std::find(took.begin(), took.end(), 0) != took.end())) {
    next_attempt_ = Clock::now() + backoff_.Next();
  }
}

bool Registrar::RegisterOne(const std::string& resource, PluginServer& server, Canceller& cancel) {
  // Registering a resource again means kubelet lost it: most often a kubelet restart, however
  // it was noticed. Removals wait until kubelet lists the node's pods again - from before the
  // first registration on, since kubelet may admit pods (and our lifecycle list it) as soon
  // as one resource is back.
  bool note_restart = false;
  uint64_t lost = 0;
  {
    std::lock_guard lock(mutex_);
    lost = lost_[resource];
    // Noted once per restart, not once per resource or retry: until all are registered again.
    note_restart = registered_once_.contains(resource) && !restart_noted_;
    if (note_restart) restart_noted_ = true;
  }
  if (note_restart && hooks_.kubelet_restarted) {
    hooks_.kubelet_restarted("a resource registers again");
  }
  Status registered = server.Register(options_.kubelet_socket, options_.register_timeout, &cancel);
  if (registered.code() == ErrorCode::kCancelled) return false;
  if (hooks_.attempted) hooks_.attempted(resource, registered.ok());
  std::lock_guard lock(mutex_);
  if (registered.ok() && lost_[resource] != lost) {
    // kubelet lost the resource (our socket removed, kubelet restarted) while this call was on
    // its way: what it registered may be gone. Registered again on the next attempt.
    spdlog::debug("resource={} lost while registering; registering again", resource);
    return false;
  }
  if (registered.ok()) {
    unregistered_.erase(resource);
    if (unregistered_.empty()) restart_noted_ = false;
    kubelet_missing_logged_ = false;
    registered_once_.insert(resource);
    return true;
  }
  spdlog::log(kubelet_missing_logged_ ? spdlog::level::debug : spdlog::level::warn, "{}; retrying",
              LogSafe(registered.message(), 512));
  kubelet_missing_logged_ = true;
  return false;
}

void Registrar::Notify() {
  std::lock_guard lock(notify_mutex_);
  for (PluginServer* server : notify_) server->Notify();
}

bool Registrar::Push(std::chrono::milliseconds wait) {
  const Clock::time_point deadline = Clock::now() + wait;
  // Every server starts its writes before any is waited for: the streams are written together.
  std::lock_guard lock(notify_mutex_);
  for (PluginServer* server : notify_) server->Notify();
  bool all = true;
  for (PluginServer* server : notify_) all = server->WaitPushed(deadline) && all;
  return all;
}

std::set<std::string> Registrar::Registered() const {
  std::lock_guard lock(mutex_);
  std::set<std::string> out;
  for (const std::string& resource : registered_once_) {
    if (servers_.contains(resource) && !unregistered_.contains(resource)) out.insert(resource);
  }
  return out;
}

void Registrar::Stop() {
  // The flag first: a round that starts after the cancel below is cancelled as it starts.
  worker_.RequestStop();
  {
    std::lock_guard lock(mutex_);
    CancelInFlight();
  }
  worker_.Stop();
  {
    std::lock_guard lock(notify_mutex_);
    notify_.clear();
  }
  std::lock_guard lock(mutex_);
  for (auto& [resource, server] : servers_) server->Stop();
  servers_.clear();
  unregistered_.clear();
}

}  // namespace kvgpu::deviceplugin
