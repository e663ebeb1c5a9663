"""A simulated GPU node for the peer kubelet: kvgpu-sim mounted with FUSE, the real
kvgpu-device-plugin binary pointed at it, and the peer kubelet serving its sockets."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request

from apiserver_peer import ApiServer
from kubelet_peer import Kubelet

BUILD = pathlib.Path(os.environ.get("KVGPU_BUILD_DIR", "build"))
SIM = BUILD / "sim" / "fuse" / "kvgpu-sim"
PLUGIN = BUILD / "deviceplugin" / "kvgpu-device-plugin"


def plugin_config(watch_pods: bool, rescan: str = "1s") -> str:
    return f"""\
rescanInterval: {rescan}
lifecycle:
  gracePeriod: 1s
  pollInterval: 200ms
  watchPods: {"true" if watch_pods else "false"}
  events: false
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def terminate(process: subprocess.Popen | None):
    """SIGTERM, then SIGKILL after 10 s."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def wait_for(predicate, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


class Node:
    def __init__(
        self, workdir: pathlib.Path, profile: str, api: bool = True, rescan: str = "1s"
    ):
        """`api`: the plugin follows this node's pods at an API server (the deployed default);
        False: kubelet's word alone. `rescan`: the plugin's rescanInterval."""
        self.dir = workdir
        self.mount = workdir / "node"
        self.kubelet_dir = workdir / "kubelet"
        self.state_dir = workdir / "state"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (workdir / "plugin.yaml").write_text(plugin_config(api, rescan))
        self.api = ApiServer("peer-node") if api else None
        self.profile = profile
        self.sim: subprocess.Popen | None = None
        self.plugin: subprocess.Popen | None = None
        self.metrics_port = free_port()
        self.kubelet = Kubelet(self.kubelet_dir)
        self.kubelet.api = self.api
        self.plugin_log = workdir / "plugin.log"

    # --- processes -------------------------------------------------------------------------

    def start(self, resources: int):
        if self.api is not None:
            self.api.start()
            self.api.write_kubeconfig(self.dir / "kubeconfig")
        self.sim = subprocess.Popen(
            [str(SIM), "--profile", self.profile, "--mount", str(self.mount), "--quiet"],
            stdout=open(self.dir / "sim.log", "ab"),
            stderr=subprocess.STDOUT,
        )
        if not wait_for(lambda: (self.mount / "sim" / "state").exists(), 10):
            raise RuntimeError("kvgpu-sim did not mount: " + (self.dir / "sim.log").read_text())
        self.kubelet.start()
        self.start_plugin(resources)

    def start_plugin(self, resources: int):
        before = len(self.kubelet.registrations)
        self.plugin = subprocess.Popen(
            [
                str(PLUGIN),
                "--sysfs-root", str(self.mount),
                "--kubelet-dir", str(self.kubelet_dir),
                "--state-dir", str(self.state_dir),
                "--node-name", "peer-node",
                "--config", str(self.dir / "plugin.yaml"),
                "--metrics-addr", f"127.0.0.1:{self.metrics_port}",
            ]
            + (["--kubeconfig", str(self.dir / "kubeconfig")] if self.api else []),
            stdout=open(self.plugin_log, "ab"),
            stderr=subprocess.STDOUT,
        )
        ok = self.kubelet.wait_until(
            lambda: len(self.kubelet.registrations) >= before + resources
            and all(e.updates > 0 for e in self.kubelet.endpoints.values()),
            15,
        )
        if not ok or self.plugin.poll() is not None:
            raise RuntimeError("the plugin did not register:\n" + self.log())

    def kill_plugin(self):
        self.plugin.send_signal(signal.SIGKILL)
        self.plugin.wait()

    def stop(self):
        terminate(self.plugin)
        self.kubelet.stop()
        if self.api is not None:
            self.api.stop()
        terminate(self.sim)  # kvgpu-sim unmounts itself on SIGTERM
        if os.path.ismount(self.mount):
            subprocess.run(["umount", "-l", str(self.mount)], check=False)

    def log(self) -> str:
        return self.plugin_log.read_text(errors="replace") if self.plugin_log.exists() else ""

    # --- what the node shows ---------------------------------------------------------------

    def vgpus(self) -> dict[str, tuple[str, str]]:
        """vGPU id -> (parent, type), from the simulator's own account."""
        out = {}
        for line in (self.mount / "sim" / "state").read_text().splitlines():
            parts = line.split()
            if parts and parts[0] == "vgpu":
                out[parts[1]] = (parts[2], parts[3])
        return out

    def sysfs_vgpus(self) -> dict[str, tuple[str, str]]:
        """vGPU id -> (GPU, type), as sysfs shows them: the devices/ directory of each type of
        each mdev parent. One listing per directory, not atomic across them."""
        out = {}
        bus = self.mount / "sys" / "class" / "mdev_bus"
        for gpu in os.listdir(bus):
            types = bus / gpu / "mdev_supported_types"
            for type_ in os.listdir(types):
                try:
                    for vgpu in os.listdir(types / type_ / "devices"):
                        out[vgpu] = (gpu, type_)
                except FileNotFoundError:
                    pass  # the GPU went away under the read
        return out

    def pushes(self) -> dict[str, int]:
        """resource -> ListAndWatch lists the plugin has written to kubelet on a change (not a
        stream's opening list), from its metrics: kvgpu_deviceplugin_listandwatch_push_seconds,
        observed when gRPC took the list."""
        prefix = "kvgpu_deviceplugin_listandwatch_push_seconds_count{"
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
        ) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith(prefix):
                labels, value = line[len(prefix):].rsplit("} ", 1)
                resource = labels.split('resource="', 1)[1].split('"', 1)[0]
                out[resource] = int(float(value))
        return out

    def descriptors(self) -> int:
        """The plugin's open file descriptors."""
        return len(os.listdir(f"/proc/{self.plugin.pid}/fd"))

    def control(self, command: str):
        (self.mount / "sim" / "control").write_text(command + "\n")

    def healthy(self, timeout: float = 1.0) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=timeout
            ) as r:
                return r.status == 200
        except Exception:
            return False


def uuids_of(allocation) -> list[str]:
    """The vGPU ids the plugin's answer names: the env contract <prefix>UUIDS
    (docs/device-plugin.md), comma-separated."""
    for key, value in allocation.response.envs.items():
        if key.endswith("_UUIDS"):
            return [v for v in value.split(",") if v]
    return []
