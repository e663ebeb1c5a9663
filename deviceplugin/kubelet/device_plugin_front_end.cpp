#include "deviceplugin/kubelet/device_plugin_front_end.h"

#include <spdlog/spdlog.h>

#include <system_error>
#include <utility>
#include <vector>

#include "deviceplugin/kubelet/plugin_server.h"

namespace kvgpu::deviceplugin {

DevicePluginFrontEnd::DevicePluginFrontEnd(ResourceManager& manager,
                                           DevicePluginFrontEndOptions options,
                                           DevicePluginObservers observers)
    : manager_(manager), options_(std::move(options)), observers_(std::move(observers)) {}

DevicePluginFrontEnd::~DevicePluginFrontEnd() {
  Stop();
}

Status DevicePluginFrontEnd::Start() {
  std::error_code ec;
  std::filesystem::create_directories(options_.plugin_dir, ec);
  if (ec) {
    return Status::Error(ErrorCode::kIo,
                         "cannot create " + options_.plugin_dir.string() + ": " + ec.message());
  }
  Status watching = watcher_.Start(options_.plugin_dir);
  if (!watching.ok()) return watching;
  PluginObservers servers{
      .on_push = observers_.on_push, .on_kubelet_left = [this](const std::string& resource) {
        if (observers_.kubelet_restarted) {
          observers_.kubelet_restarted("it ended the ListAndWatch of " + resource);
        }
      }};
  registrar_ = std::make_unique<Registrar>(
      RegistrarOptions{.kubelet_socket = options_.kubelet_socket,
                       .retry_initial = options_.retry_initial,
                       .retry_max = options_.retry_max,
                       .register_timeout = options_.register_timeout},
      RegistrarHooks{.make_server =
                         [this, servers](const std::string& resource) {
                           return std::make_unique<PluginServer>(resource, options_.plugin_dir,
                                                                 manager_, servers);
                         },
                     .kubelet_restarted = observers_.kubelet_restarted,
                     .attempted = observers_.on_registration});
  registrar_->SetWithheld(withheld_);
  // Each change is on every stream before the change's maker goes on: an Allocate answers kubelet
  // only after its lock was written to every other resource's list (issue 49). Bounded, so that
  // a kubelet that stopped reading one stream holds nothing up for long.
  manager_.SetChangeListener([this] {
    if (!registrar_->Push(options_.push_wait)) {
      spdlog::warn("a ListAndWatch stream took more than {} ms to take a list",
                   options_.push_wait.count());
    }
  });
  registrar_->EnsureServers(manager_.Resources());
  registrar_->Start();
  // The hook breaks the directory wait at once instead of after its second.
  loop_.Start([this](BackgroundWorker::Handle& worker) { Loop(worker); },
              [this] { watcher_.Wake(); });
  return Status::Ok();
}

void DevicePluginFrontEnd::Loop(BackgroundWorker::Handle& worker) {
  while (!worker.stopping()) {
    if (observers_.on_turn) observers_.on_turn();
    std::vector<DirEvent> events = watcher_.Wait(std::chrono::milliseconds(1000));
    if (worker.stopping()) break;
    registrar_->HandleDirEvents(events);
  }
}

void DevicePluginFrontEnd::Stop() {
  if (stop_.exchange(true)) return;
  loop_.Stop();
  if (registrar_) {
    manager_.SetChangeListener(nullptr);
    registrar_->Stop();
  }
}

void DevicePluginFrontEnd::ServeOffered() {
  if (registrar_) registrar_->EnsureServers(manager_.Resources());
}

void DevicePluginFrontEnd::SetWithheld(bool withheld) {
  withheld_ = withheld;
  if (registrar_) registrar_->SetWithheld(withheld);
}

std::set<std::string> DevicePluginFrontEnd::Registered() const {
  return registrar_ ? registrar_->Registered() : std::set<std::string>{};
}

}  // namespace kvgpu::deviceplugin
