// kvgpu-device-plugin: parse the command line, load the config, run the daemon until a signal.
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <iostream>

#include "deviceplugin/cli.h"
#include "deviceplugin/config.h"
#include "deviceplugin/daemon.h"

int main(int argc, char** argv) {
  using namespace kvgpu::deviceplugin;
  // glibc gives every thread that allocates an arena of its own; with a gRPC server (and its
  // threads) per resource that multiplies idle heap. Two arenas serve a daemon this size.
  mallopt(M_ARENA_MAX, 2);
  ParsedCommandLine parsed = ParseCommandLine(argc, argv, std::cout, std::cerr);
  if (parsed.exit_code) return *parsed.exit_code;

  Config config;
  if (parsed.args.config_file) {
    auto loaded = LoadConfigFile(*parsed.args.config_file);
    if (!loaded.ok()) {
      std::cerr << "kvgpu-device-plugin: " << loaded.status().message() << "\n";
      return 2;
    }
    config = *loaded;
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  // stdout is a pipe under containerd and a file in tests: block-buffered unless flushed, and a
  // log that lags by kilobytes hides what the daemon is doing when it matters.
  spdlog::flush_on(spdlog::level::trace);
  if (parsed.args.node_name.empty()) {
    spdlog::warn("no --node-name and no $NODE_NAME; pod tracking will need one");
  }

  // The API client writes through OpenSSL, whose socket writes raise SIGPIPE when the API server
  // closes a connection mid-request; that must cost the request, not the daemon.
  signal(SIGPIPE, SIG_IGN);

  // Signals are taken synchronously so that teardown runs on the main thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  DaemonOptions options;
  options.args = parsed.args;
  options.config = config;
  Daemon daemon(options);
  auto started = daemon.Start();
  if (!started.ok()) {
    spdlog::critical("not started: {}", started.ToString());
    return 1;
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}; stopping", signal_number);
  daemon.Stop();
  return 0;
}
