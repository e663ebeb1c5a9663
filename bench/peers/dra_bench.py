#!/usr/bin/python3
"""bench/peers/dra.sh's runs: one real kube-apiserver (tests/k8s/controlplane.py) and, for each
round and plugin, the plugin started afresh, registered as kubelet's plugin watcher registers it,
N one-device claims allocated to its node, then N times NodePrepareResources and
NodeUnprepareResources (k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin) of one claim each, one kept gRPC
connection as kubelet keeps it.

usage: dra_bench.py --bin-dir K8S_BIN --build BUILD --nvidia-bin B --mock-lib L --mock-config YAML
                    --example-bin B --work DIR [--rounds 3] [--calls 200] [--gap-ms 120]
                    [--only ours|nvidia|example]
Writes DIR/<which>-<round>.json (one run's numbers) and DIR/order; the plugins' logs under DIR.

The client is Python (grpcio 1.51, Debian's python3-grpcio) and the same for the three plugins;
its own cost is measured too: GetInfo on the registration socket, a call that does no work in any
plugin, timed the same way (`floor`).
Only the standard library, grpcio, protobuf and PyYAML (Debian's python3-grpcio, -protobuf, -yaml)."""
import argparse
import contextlib
import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "k8s"))

import controlplane  # noqa: E402
from scenario_dra import load_protos  # noqa: E402  (the DRA and registration messages, compiled by protoc)
import yaml  # noqa: E402

NODE = "bench-node"
NAMESPACE = "bench"
DRIVERS = {"ours": "vgpu.tencent.com", "nvidia": "gpu.nvidia.com", "example": "gpu.example.com"}
PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
UNPREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
GET_INFO = "/pluginregistration.Registration/GetInfo"
NOTIFY = "/pluginregistration.Registration/NotifyRegistrationStatus"
TICK = os.sysconf("SC_CLK_TCK")
FLOOR_CALLS = 200


class Api:
    """One kept HTTPS connection to the API server as the admin (the setup's claims: hundreds of
    requests, each a new TLS handshake through controlplane.request would take longer)."""

    def __init__(self, cp):
        self.cp = cp
        context = ssl.create_default_context(cafile=cp.ca)
        context.load_cert_chain(cp.path("pki", "admin.crt"), cp.path("pki", "admin.key"))
        self.context = context
        self.port = int(cp.server.rsplit(":", 1)[1])
        self.conn = None

    def request(self, method, path, body=None, content_type="application/json"):
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=30)
            headers = {"Accept": "application/json"}
            payload = None
            if body is not None:
                payload = json.dumps(body)
                headers["Content-Type"] = content_type
            try:
                self.conn.request(method, path, body=payload, headers=headers)
                response = self.conn.getresponse()
                raw = response.read().decode(errors="replace")
                return response.status, json.loads(raw) if raw.startswith("{") else raw
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        return None


def proc_cpu_s(pid):
    """utime + stime of the process, its exited threads included, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "Threads"):
                out[key] = int(value.split()[0])
    return out


def metric_sums(port, names):
    """{name: (sum, count)} of the histograms `names` (every label set added up)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = {n: [0.0, 0.0] for n in names}
    for line in text.splitlines():
        for n in names:
            for suffix, i in (("_sum", 0), ("_count", 1)):
                if line.startswith(n + suffix + " ") or line.startswith(n + suffix + "{"):
                    out[n][i] += float(line.rsplit(" ", 1)[1])
    return out


class Plugin:
    """One plugin started afresh in its own directory: its processes, sockets and slice."""

    def __init__(self, which, args, cp, api, work):
        self.which, self.args, self.cp, self.api = which, args, cp, api
        self.driver = DRIVERS[which]
        self.dir = work
        self.kubelet = os.path.join(work, "kubelet")
        self.registry = os.path.join(self.kubelet, "plugins_registry")
        self.plugins = os.path.join(self.kubelet, "plugins")
        for d in (self.registry, self.plugins, os.path.join(work, "cdi")):
            os.makedirs(d)
        self.procs = []
        self.sim = None
        self.metrics_port = None
        self.started = None

    def _spawn(self, name, argv, env=None):
        p = controlplane._Process(name, argv, os.path.join(self.dir, name + ".log"), env=env)
        self.procs.append(p)
        return p

    def start(self):
        a, d = self.args, self.dir
        if self.which == "ours":
            mount = os.path.join(d, "mnt")
            os.makedirs(mount)
            self.sim = self._spawn("kvgpu-sim", [os.path.join(a.build, "sim", "fuse", "kvgpu-sim"), "--profile",
                                                  "t4x2", "--mount", mount, "--quiet"])
            end = time.monotonic() + 60
            while not os.path.exists(os.path.join(mount, "sim", "state")):
                if not self.sim.alive() or time.monotonic() > end:
                    raise controlplane.ControlPlaneError("kvgpu-sim did not mount: " + self.sim.log_tail())
                time.sleep(0.05)
            # The DRA overlay's config as shipped (deploy/components/dra), this node's CDI
            # directory, no host udev (the simulator emits none).
            with open(os.path.join(REPO, "deploy", "components", "dra", "device-plugin-config.yaml")) as f:
                config = yaml.safe_load(f)
            config.setdefault("cdi", {})["dir"] = os.path.join(d, "cdi")
            config["udevEvents"] = False
            with open(os.path.join(d, "config.yaml"), "w") as f:
                yaml.safe_dump(config, f)
            self.metrics_port = controlplane._free_ports(1)[0]
            argv = [os.path.join(a.build, "deviceplugin", "kvgpu-device-plugin"), "--sysfs-root", mount,
                    "--kubelet-dir", self.kubelet, "--state-dir", os.path.join(d, "state"), "--node-name", NODE,
                    "--config", os.path.join(d, "config.yaml"), "--kubeconfig", self.cp.kubeconfig,
                    "--metrics-addr", "127.0.0.1:%d" % self.metrics_port]
            env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        elif self.which == "nvidia":
            # The mock driver root of the project's own CPU-only CI (hack/ci/mock-nvml/
            # setup-mock-gpu.sh): the mock libnvidia-ml.so.1 under usr/lib64, an nvidia-smi the
            # plugin only looks for (root.go getNvidiaSMIPath; never run for full GPUs), and
            # the device nodes nvidia-container-toolkit's CDI discovery stats, under dev/.
            dr = os.path.join(d, "driver")
            os.makedirs(os.path.join(dr, "usr", "lib64"))
            os.makedirs(os.path.join(dr, "usr", "bin"))
            os.makedirs(os.path.join(dr, "dev"))
            lib = os.path.join(dr, "usr", "lib64", os.path.basename(a.mock_lib))
            shutil.copy(a.mock_lib, lib)
            os.symlink(os.path.basename(lib), os.path.join(dr, "usr", "lib64", "libnvidia-ml.so.1"))
            smi = os.path.join(dr, "usr", "bin", "nvidia-smi")
            with open(smi, "w") as f:
                f.write("#!/bin/sh\necho 'nvidia-smi: not available on this mock node' >&2\nexit 1\n")
            os.chmod(smi, 0o755)
            for i in range(8):
                os.mknod(os.path.join(dr, "dev", "nvidia%d" % i), 0o666 | 0o020000, os.makedev(195, i))
            for name, major, minor in (("nvidiactl", 195, 255), ("nvidia-uvm", 510, 0), ("nvidia-uvm-tools", 510, 1)):
                os.mknod(os.path.join(dr, "dev", name), 0o666 | 0o020000, os.makedev(major, minor))
            # As its Helm chart runs it (logVerbosity "4"), the driver roots the chart's
            # nvidiaDriverRoot/containerDriverRoot name pointed at the mock root.
            argv = [a.nvidia_bin, "-v", "4", "--image-name", "bench", "--node-name", NODE, "--cdi-root", os.path.join(d, "cdi"),
                    "--nvidia-driver-root", dr, "--container-driver-root", dr,
                    "--nvidia-cdi-hook-path", "/usr/bin/true",
                    "--kubelet-registrar-directory-path", self.registry,
                    "--kubelet-plugins-directory-path", self.plugins, "--kubeconfig", self.cp.kubeconfig]
            env = dict(os.environ, MOCK_NVML_CONFIG=a.mock_config)
        else:
            argv = [a.example_bin, "--node-name", NODE, "--cdi-root", os.path.join(d, "cdi"),
                    "--kubelet-registrar-directory-path", self.registry,
                    "--kubelet-plugins-directory-path", self.plugins, "--kubeconfig", self.cp.kubeconfig]
            env = dict(os.environ)
        self.started = time.monotonic()
        self.main = self._spawn(self.which, argv, env=env)

    def register(self, protos, deadline=120):
        """kubelet's plugin watcher: GetInfo on the registration socket, then the status."""
        import grpc
        reg = protos["registration_v1"]
        socket = os.path.join(self.registry, self.driver + "-reg.sock")
        end = time.monotonic() + deadline
        while not os.path.exists(socket):
            if not self.main.alive() or time.monotonic() > end:
                raise controlplane.ControlPlaneError("%s: no registration socket %s; its log ends:\n%s"
                                                     % (self.which, socket, self.main.log_tail()))
            time.sleep(0.02)
        self.reg_channel = grpc.insecure_channel("unix://" + socket)
        self.get_info = self.reg_channel.unary_unary(GET_INFO, request_serializer=reg.InfoRequest.SerializeToString,
                                                     response_deserializer=reg.PluginInfo.FromString)
        info = self.get_info(reg.InfoRequest(), timeout=30)
        self.reg_channel.unary_unary(NOTIFY, request_serializer=reg.RegistrationStatus.SerializeToString,
                                     response_deserializer=reg.RegistrationStatusResponse.FromString)(
            reg.RegistrationStatus(plugin_registered=True), timeout=30)
        self.registered_s = time.monotonic() - self.started
        self.channel = grpc.insecure_channel("unix://" + info.endpoint)
        dra = protos["dra_v1"]
        self.prepare = self.channel.unary_unary(PREPARE, request_serializer=dra.NodePrepareResourcesRequest.SerializeToString,
                                                response_deserializer=dra.NodePrepareResourcesResponse.FromString)
        self.unprepare = self.channel.unary_unary(
            UNPREPARE, request_serializer=dra.NodeUnprepareResourcesRequest.SerializeToString,
            response_deserializer=dra.NodeUnprepareResourcesResponse.FromString)
        return info

    def device(self, deadline=120):
        """(pool, device) of the first device of the plugin's published slices of this node."""
        path = ("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%%3D%s,spec.driver%%3D%s"
                % (NODE, self.driver))

        def found():
            status, answer = self.api.request("GET", path)
            if status != 200:
                return None
            for s in answer.get("items", []):
                for dev in s["spec"].get("devices") or []:
                    return s["spec"]["pool"]["name"], dev["name"]
            return None
        got = controlplane.wait_until(found, deadline, self.procs)
        if not got:
            raise controlplane.ControlPlaneError("%s published no device in %d s; its log ends:\n%s"
                                                 % (self.which, deadline, self.main.log_tail()))
        self.slice_s = time.monotonic() - self.started
        return got

    def stop(self):
        for c in ("channel", "reg_channel"):
            with contextlib.suppress(AttributeError):
                getattr(self, c).close()
        for p in reversed(self.procs):
            p.stop()
        mount = os.path.join(self.dir, "mnt")
        if os.path.ismount(mount):
            subprocess.run(["fusermount3", "-u", "-z", mount], capture_output=True)


def make_claims(api, driver, pool, device, count, tag):
    """`count` claims of one request, each allocated to (driver, pool, device) on the node as
    kube-scheduler writes an allocation (status.allocation, the node selector of the node)."""
    claims = []
    for i in range(count):
        name = "%s-%d" % (tag, i)
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "bench-" + driver}}]}}}
        status, answer = api.request("POST", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % NAMESPACE, body)
        if status != 201:
            raise controlplane.ControlPlaneError("creating claim %s: HTTP %d %s" % (name, status, answer))
        allocation = {"status": {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": driver, "pool": pool, "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}}
        status, answer = api.request("PATCH", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s/status"
                                     % (NAMESPACE, name), allocation, content_type="application/merge-patch+json")
        if status != 200:
            raise controlplane.ControlPlaneError("allocating claim %s: HTTP %d %s" % (name, status, answer))
        claims.append((NAMESPACE, answer["metadata"]["uid"], name))
    return claims


def run(which, rnd, args, cp, api, protos):
    work = os.path.join(args.work, "%s-%d" % (which, rnd))
    os.makedirs(work)
    plugin = Plugin(which, args, cp, api, work)
    result = {"which": which, "round": rnd, "load": open("/proc/loadavg").read().split()[0]}
    try:
        plugin.start()
        plugin.register(protos)
        pool, device = plugin.device()
        result.update(registered_s=plugin.registered_s, slice_s=plugin.slice_s, pool=pool, device=device)
        claims = make_claims(api, plugin.driver, pool, device, args.calls, "%s-%d" % (which, rnd))
        dra, reg = protos["dra_v1"], protos["registration_v1"]
        pid = plugin.main.popen.pid
        # The client's floor: a call no plugin does work for, on a kept connection.
        floor = []
        for _ in range(FLOOR_CALLS):
            t0 = time.perf_counter()
            plugin.get_info(reg.InfoRequest(), timeout=30)
            floor.append(time.perf_counter() - t0)
        time.sleep(1)
        before = {"cpu": proc_cpu_s(pid), "client": time.process_time(), "status": proc_status(pid)}
        if plugin.sim:
            before["sim"] = proc_cpu_s(plugin.sim.popen.pid)
        names = ("kvgpu_deviceplugin_vgpu_create_seconds", "kvgpu_deviceplugin_vgpu_remove_seconds")
        if which == "ours":
            before["metrics"] = metric_sums(plugin.metrics_port, names)
            before["cpu"] = proc_cpu_s(pid)
        prep, unprep, errors = [], [], []
        gap = args.gap_ms / 1000.0
        wall0 = time.monotonic()
        for namespace, uid, name in claims:
            claim = dra.Claim(namespace=namespace, uid=uid, name=name)
            t0 = time.perf_counter()
            answer = plugin.prepare(dra.NodePrepareResourcesRequest(claims=[claim]), timeout=45)
            t1 = time.perf_counter()
            got = answer.claims[uid]
            if got.error or not got.devices:
                errors.append("prepare %s: %s" % (name, got.error or "no device"))
            time.sleep(gap)
            t2 = time.perf_counter()
            answer = plugin.unprepare(dra.NodeUnprepareResourcesRequest(claims=[claim]), timeout=45)
            t3 = time.perf_counter()
            if answer.claims[uid].error:
                errors.append("unprepare %s: %s" % (name, answer.claims[uid].error))
            prep.append(t1 - t0)
            unprep.append(t3 - t2)
            time.sleep(gap)
        wall = time.monotonic() - wall0
        after_cpu = proc_cpu_s(pid)
        result.update(prepare_s=prep, unprepare_s=unprep, floor_s=floor, errors=errors[:5], error_count=len(errors),
                      wall_s=wall, cpu_s=after_cpu - before["cpu"],
                      client_cpu_s=time.process_time() - before["client"],
                      status_before=before["status"], status_after=proc_status(pid),
                      cdi_files=len(os.listdir(os.path.join(work, "cdi"))))
        if plugin.sim:
            result["sim_cpu_s"] = proc_cpu_s(plugin.sim.popen.pid) - before["sim"]
        if which == "ours":
            after = metric_sums(plugin.metrics_port, names)
            result["kernel"] = {n: [after[n][0] - before["metrics"][n][0], after[n][1] - before["metrics"][n][1]]
                                for n in names}
        if errors:
            print("bench-dra: %s round %d: %d errors, the first: %s" % (which, rnd, len(errors), errors[0]),
                  file=sys.stderr)
    finally:
        plugin.stop()
        # client-go's own rate limiter (5 QPS, burst 10 by default) logs every wait it makes.
        if getattr(plugin, "main", None):
            with contextlib.suppress(OSError), open(plugin.main.log_path, errors="replace") as f:
                result["throttled"] = sum("client-side throttling" in line for line in f)
        api.request("DELETE", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % NAMESPACE)
    with open(os.path.join(args.work, "%s-%d.json" % (which, rnd)), "w") as f:
        json.dump(result, f)
    return result


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--bin-dir", "--build", "--nvidia-bin", "--mock-lib", "--mock-config", "--example-bin", "--work"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=120)
    parser.add_argument("--only")
    args = parser.parse_args()
    protos = load_protos()
    with controlplane.ControlPlane(args.bin_dir, workdir=os.path.join(args.work, "controlplane")) as cp:
        cp.register_node(NODE)
        api = Api(cp)
        status, answer = api.request("POST", "/api/v1/namespaces",
                                     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        if status != 201:
            raise controlplane.ControlPlaneError("creating namespace: HTTP %d %s" % (status, answer))
        order = []
        for rnd in range(1, args.rounds + 1):
            plugins = ["ours", "nvidia", "example"]
            plugins = plugins[(rnd - 1) % 3:] + plugins[:(rnd - 1) % 3]
            if rnd % 2 == 0:
                plugins.reverse()
            for which in plugins:
                if args.only and which != args.only:
                    continue
                print("bench-dra: round %d: %s, %d prepare + unprepare" % (rnd, which, args.calls), file=sys.stderr)
                r = run(which, rnd, args, cp, api, protos)
                order.append("%s-%d" % (which, rnd))
                if r.get("prepare_s"):
                    print("bench-dra:   prepare p50 %.2f ms, unprepare p50 %.2f ms, CPU %.2f ms a pair, %d errors"
                          % (statistics.median(r["prepare_s"]) * 1e3, statistics.median(r["unprepare_s"]) * 1e3,
                             r["cpu_s"] / len(r["prepare_s"]) * 1e3, r["error_count"]), file=sys.stderr)
        with open(os.path.join(args.work, "order"), "w") as f:
            f.write("\n".join(order) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
