#!/usr/bin/python3
"""Scenario 3 (Extender), against the real control plane of one pinned release.

The real kube-scheduler, configured with deploy/scheduler/kube-scheduler-config.yaml (only the
extender's urlPrefix, its tlsConfig, and the scheduler's own clientConnection and leaderElection
are filled in; the scenario asserts nothing else differs), calls this build's
kvgpu-scheduler-extender for a burst of 200 pods of six vGPU types over four Nodes. Each Node is a
simulated 2 x Tesla T4 host (kvgpu-sim, the `t4x2` profile: a time-sliced T4 hosts one vGPU type
at a time, so kubelet's per-type counts over-promise) running this build's kvgpu-device-plugin,
which publishes the node's vGPU state on its Node as it does in a cluster. There is no kubelet:
the peer kubelet of tests/deviceplugin/peer (kubelet_peer.py, written from upstream's device
manager) serves the plugin's kubelet sockets; from its ListAndWatch lists this scenario writes the
Node's capacity and allocatable as kubelet's node status does, and through it admits each pod the
scheduler binds to the node (the plugin's GetPreferredAllocation and Allocate), so the simulated
kernel makes the pod's vGPU or refuses it.

The extender and each device plugin run with the flags and config deploy/overlays/default gives
them and with a token of their own ServiceAccount (`kubectl create token`), bound by the overlay's
RBAC: a missing rule fails the scenario.

Checks, after the burst settles:
  - no pod bound to a node whose GPUs cannot create its vGPU: every bound pod was admitted (no
    UnexpectedAdmissionError), and the simulated kernel holds its vGPU, of its type;
  - every pod left Pending is one no node's kernel can take (no GPU free, none of its type with
    room): the burst was placed, not refused;
  - preemption as configured (preemptVerb): a pod of priority 1000 asking for a type no GPU has
    room for (the one running on the most nodes) is placed once kube-scheduler's DefaultPreemption,
    asking the extender, has chosen victims: pods of its type, one or more on the node it then
    goes to. The peer kubelet stops each victim and deletes it (grace period 0, as kubelet's status
    manager does), the plugin removes its vGPU after the shipped config's grace period, and the
    pod's vGPU is made. A victim on another node is a known defect (docs/scheduler-extender.md,
    "Preemption"), printed and not failed;
  - kube-scheduler called the extender's filter, prioritize, bind and preempt (its metrics), and
    neither program was refused an API call (their logs).

usage: scenario_extender.py --release 1.37 --extender BIN --device-plugin BIN --sim BIN [--bite]
  --bite: instead, the same burst with an extender that answers every node (a stub in this
  process that keeps every node in filter and binds whatever it is asked): the check that no
  pod is bound where its vGPU cannot be made must fail, while the scheduler configuration, the
  burst's creation and the plugins' published states still pass. No preemption there.
Exit status 0 when every check passed, 1 otherwise, 77 (skipped) only when the release's programs
are not built and Go is not installed.
"""
import argparse
import copy
import json
import os
import pathlib
import queue
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "deploy"))
sys.path.insert(0, os.path.join(REPO, "tests", "deviceplugin", "peer"))

import check_deploy  # noqa: E402
import controlplane  # noqa: E402
import yaml  # noqa: E402

TENANT = "tenant-a"
NAMESPACE = "kata-vgpu"
SCHEDULER_NAME = "kata-vgpu-scheduler"
PROFILE = "t4x2"
PROFILE_RESOURCES = 12  # the T4's types: one resource each
NODES = 4
PODS = 200
# The scheduling loop test's six types (tests/extender/loop_helpers.h): T4-1B, -2B, -1Q, -2Q, -4Q,
# -8Q, of 16, 8, 16, 8, 4 and 2 vGPUs per GPU.
TYPES = ["222", "223", "230", "231", "232", "233"]
SEED = 20261202
DEADLINE = 300.0  # for the burst to settle, under load
PUBLISH_DEADLINE = 90.0  # for every plugin's first state (a second or two, unloaded)
# kubelet's nodeStatusUpdateFrequency default: how often it writes a changed capacity.
NODE_STATUS_PERIOD = 10.0
STATE_ANNOTATION = "kvgpu.tencent.com/vgpu-state"


def openssl(*args, cwd):
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise controlplane.ControlPlaneError("openssl %s: %s" % (" ".join(args), result.stderr.strip()))


def make_extender_pki(directory):
    """A CA (as deploy/gen-webhook-cert.sh keeps one: ca.crt, ca.key), the extender's serving
    certificate for 127.0.0.1 it signs, and kube-scheduler's client certificate made by the
    shipped deploy/scheduler/gen-scheduler-client-cert.sh. Returns its tlsConfig."""
    os.makedirs(directory, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=kata-vgpu-extender-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign", cwd=directory)
    openssl("req", "-x509", "-CA", "ca.crt", "-CAkey", "ca.key", *ec, "-keyout", "tls.key",
            "-out", "tls.crt", "-days", "2", "-subj", "/CN=kvgpu-scheduler-extender",
            "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth",
            "-addext", "subjectAltName=IP:127.0.0.1", cwd=directory)
    out = subprocess.run(["bash", os.path.join(REPO, "deploy", "scheduler", "gen-scheduler-client-cert.sh"),
                          directory], capture_output=True, text=True)
    if out.returncode != 0:
        raise controlplane.ControlPlaneError("gen-scheduler-client-cert.sh: " + out.stderr.strip())
    return yaml.safe_load(out.stdout)["tlsConfig"]


def scheduler_config(shipped, url, tls, kubeconfig):
    """The shipped KubeSchedulerConfiguration with only what a cluster fills in filled in."""
    config = copy.deepcopy(shipped)
    extender = config["extenders"][0]
    extender["urlPrefix"] = url
    extender["tlsConfig"] = dict(tls)
    config["clientConnection"] = {"kubeconfig": kubeconfig}
    config["leaderElection"] = {"leaderElect": False}
    return config


def token_kubeconfig(path, cp, token):
    with open(path, "w") as f:
        yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": cp.server, "certificate-authority": cp.ca}}],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "sa"}}],
            "current-context": "test"}, f)


def replace_flags(args, values):
    """`args` (the shipped --flag=value list) with each flag named in `values` given that value
    (None: dropped); a flag in `values` the shipped list lacks is an error: the deploy changed."""
    out, seen = [], set()
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in values:
            seen.add(flag)
            if values[flag] is not None:
                out.append("%s=%s" % (flag, values[flag]))
        else:
            out.append(arg)
    missing = set(values) - seen
    if missing:
        raise controlplane.ControlPlaneError("the shipped args lack %s: %s" % (sorted(missing), args))
    return out


class Client:
    """The admin's requests to the API server over one kept-alive connection (a thread each):
    a TLS handshake per request costs more than the request on a loaded machine."""

    def __init__(self, cp):
        self.cp = cp
        self.local = threading.local()

    def request(self, method, path, body=None, content_type="application/json"):
        import http.client
        for attempt in range(2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                context = ssl.create_default_context(cafile=self.cp.ca)
                context.load_cert_chain(self.cp.path("pki", "admin.crt"), self.cp.path("pki", "admin.key"))
                port = int(self.cp.server.rsplit(":", 1)[1])
                conn = self.local.conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
            headers = {"Accept": "application/json"}
            payload = None
            if body is not None:
                payload = json.dumps(body)
                headers["Content-Type"] = content_type
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                raw = response.read().decode(errors="replace")
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 1:
                    raise
                continue
            try:
                return response.status, json.loads(raw)
            except ValueError:
                return response.status, raw


def scrape(port, prefix):
    """{labels: value} of the samples of one metric at http://127.0.0.1:port/metrics."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix + "{"):
            labels, value = line[len(prefix):].rsplit(" ", 1)
            out[labels] = float(value)
    return out


# --- a node: kvgpu-sim, the device plugin, the peer kubelet ---------------------------------------

class SimNode:
    def __init__(self, scenario, index):
        from kubelet_peer import Kubelet
        self.s = scenario
        self.name = "gpu-node-%d" % index
        self.dir = os.path.join(scenario.top, "n%d" % index)
        self.mount = os.path.join(self.dir, "node")
        os.makedirs(os.path.join(self.dir, "state"), exist_ok=True)
        os.makedirs(os.path.join(self.dir, "licensing-source"), exist_ok=True)
        self.kubelet = Kubelet(pathlib.Path(self.dir, "kubelet"))
        self.sim = None
        self.plugin = None
        self.metrics_port = None
        self.pending = queue.Queue()
        self.results = {}  # pod UID -> (True, [vGPU ids]) or (False, kubelet's reason)
        self.busy = False
        self.stopping = threading.Event()
        self.threads = []
        self.written_resources = None
        self.peers = {}  # pod UID -> the peer kubelet's Pod

    def start(self, plugin_args, plugin_config_text, token):
        self.sim = controlplane._Process("kvgpu-sim-" + self.name, [
            self.s.args.sim, "--profile", PROFILE, "--mount", self.mount, "--quiet"],
            os.path.join(self.dir, "sim.log"))
        self.s.cp._wait("kvgpu-sim mounts %s" % self.mount,
                        lambda: os.path.exists(os.path.join(self.mount, "sim", "state")), [self.sim])
        self.kubelet.start()
        # As kubelet registers its Node: Ready, before any device plugin has registered.
        self.s.cp.register_node(self.name)
        config = os.path.join(self.dir, "plugin.yaml")
        with open(config, "w") as f:
            f.write(plugin_config_text)
        kubeconfig = os.path.join(self.dir, "kubeconfig")
        token_kubeconfig(kubeconfig, self.s.cp, token)
        self.metrics_port = controlplane._free_ports(1)[0]
        argv = [self.s.args.device_plugin] + replace_flags(plugin_args, {
            "--sysfs-root": self.mount,
            "--kubelet-dir": os.path.join(self.dir, "kubelet"),
            "--state-dir": os.path.join(self.dir, "state"),
            "--node-name": self.name,
            "--config": config,
            "--metrics-addr": "127.0.0.1:%d" % self.metrics_port,
            "--licensing-source": os.path.join(self.dir, "licensing-source"),
            "--licensing-dir": os.path.join(self.dir, "state", "licensing"),
        }) + ["--kubeconfig", kubeconfig]
        self.plugin = controlplane._Process("kvgpu-device-plugin-" + self.name, argv,
                                            os.path.join(self.dir, "plugin.log"))
        self.s.cp._wait("%s's device plugin registers its %d resources with the peer kubelet"
                        % (self.name, PROFILE_RESOURCES),
                        lambda: self.kubelet.wait_until(
                            lambda: len(self.kubelet.endpoints) >= PROFILE_RESOURCES and
                            all(e.updates > 0 for e in self.kubelet.endpoints.values()), 0.5),
                        [self.sim, self.plugin])
        self.write_node_status()
        for target in (self._admit_loop, self._status_loop):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(15)
        if self.plugin:
            self.plugin.stop()
        self.kubelet.stop()
        if self.sim:
            self.sim.stop()  # kvgpu-sim unmounts itself on SIGTERM
        if os.path.ismount(self.mount):
            subprocess.run(["umount", "-l", self.mount], check=False)

    # kubelet's node status: capacity is every device the plugins list, allocatable the healthy
    # ones (the device manager's GetCapacity); written when it changed.
    def write_node_status(self):
        with self.kubelet.lock:
            lists = {r: dict(e.devices) for r, e in self.kubelet.endpoints.items()}
        capacity = {r: str(len(d)) for r, d in lists.items()}
        allocatable = {r: str(sum(1 for h in d.values() if h == "Healthy")) for r, d in lists.items()}
        if (capacity, allocatable) == self.written_resources:
            return
        base = {"cpu": "64", "memory": "256Gi", "pods": "110"}
        patch = {"status": {"capacity": dict(base, **capacity), "allocatable": dict(base, **allocatable)}}
        status, answer = self.s.api.request("PATCH", "/api/v1/nodes/%s/status" % self.name, patch,
                                           content_type="application/strategic-merge-patch+json")
        if status != 200:
            raise controlplane.ControlPlaneError("patching %s's status: HTTP %d %s" % (self.name, status, answer))
        if self.written_resources is not None:
            before = self.written_resources[1]
            print("  %.1f s: kubelet's status of %s: allocatable %s" % (
                time.monotonic() - self.s.started, self.name,
                ", ".join("%s %s->%s" % (r.rsplit("/", 1)[1], before.get(r), n)
                          for r, n in sorted(allocatable.items()) if before.get(r) != n)))
        self.written_resources = (capacity, allocatable)

    def _status_loop(self):
        while not self.stopping.wait(NODE_STATUS_PERIOD):
            try:
                self.write_node_status()
            except (OSError, controlplane.ControlPlaneError) as e:
                print("  %s: node status not written: %s" % (self.name, e))

    # kubelet's pod admission: one pod at a time, in the order the node's pods reach it; the
    # device manager allocates (GetPreferredAllocation, Allocate) and the pod runs or fails.
    def _admit_loop(self):
        from kubelet_peer import AdmissionError, Container, Pod
        while not self.stopping.is_set():
            try:
                pod = self.pending.get(timeout=0.2)
            except queue.Empty:
                continue
            self.busy = True
            try:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    self._kill(pod)
                    continue
                limits = pod["spec"]["containers"][0]["resources"]["limits"]
                peer = Pod(meta["name"], [Container(pod["spec"]["containers"][0]["name"],
                                                    {r: int(v) for r, v in limits.items()})],
                           namespace=meta["namespace"], uid=meta["uid"])
                self.peers[meta["uid"]] = peer
                try:
                    allocated = self.kubelet.admit(peer)
                    from node import uuids_of
                    vgpus = [v for resources in allocated.values() for a in resources.values()
                             for v in uuids_of(a)]
                    self.results[meta["uid"]] = (True, vgpus)
                    status = {"phase": "Running"}
                except AdmissionError as e:
                    # A pod kubelet cannot admit fails: it never runs, and nothing retries it.
                    with self.kubelet.lock:
                        self.kubelet.active.pop(meta["uid"], None)
                    self.results[meta["uid"]] = (False, str(e))
                    status = {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                              "message": "Allocate failed due to %s, which is unexpected" % e}
                self.s.api.request("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (meta["namespace"], meta["name"]),
                                  {"status": status}, content_type="application/merge-patch+json")
            finally:
                self.busy = False

    def _kill(self, pod):
        """kubelet on a pod the API server marked for deletion: its containers stop (the pod
        leaves the pod manager, so PodResources stops listing it), then its status manager
        deletes the object for good (grace period 0, on the pod's UID)."""
        meta = pod["metadata"]
        peer = self.peers.get(meta["uid"])
        if peer is not None:
            self.kubelet.delete(peer)
        self.s.api.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (meta["namespace"], meta["name"]),
                           {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                            "preconditions": {"uid": meta["uid"]}})

    # --- what the simulated kernel says -----------------------------------------------------

    def vgpus(self):
        """vGPU id -> (GPU, type), from the simulator's own account."""
        out = {}
        with open(os.path.join(self.mount, "sim", "state")) as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] == "vgpu":
                    out[parts[1]] = (parts[2], parts[3])
        return out

    def room(self, mdev_type):
        """How many vGPUs of `mdev_type` the kernel would make now, over the node's GPUs."""
        bus = os.path.join(self.mount, "sys", "class", "mdev_bus")
        total = 0
        for gpu in os.listdir(bus):
            try:
                with open(os.path.join(bus, gpu, "mdev_supported_types", mdev_type, "available_instances")) as f:
                    total += int(f.read().strip())
            except FileNotFoundError:
                pass
        return total


# --- an extender that answers every node (the bite) -----------------------------------------------

class EveryNodeExtender:
    """Keeps every node in filter, scores none, binds what it is asked as kube-scheduler's own
    binder would: the extender protocol without the extender's judgement."""

    def __init__(self, api, port, cert, key):
        self.calls = {"filter": 0, "prioritize": 0, "bind": 0, "preempt": 0}
        self.api = api
        self.server = controlplane.JsonHttpsServer(self.answer, cert, key, port)

    def answer(self, path, args):
        verb = path.strip("/")
        self.calls[verb] = self.calls.get(verb, 0) + 1
        if verb == "filter":
            return {"NodeNames": args.get("NodeNames"), "FailedNodes": {},
                    "FailedAndUnresolvableNodes": {}, "Error": ""}
        if verb == "prioritize":
            return [{"Host": n, "Score": 0} for n in (args.get("NodeNames") or [])]
        if verb == "bind":
            status, body = self.api.request(
                "POST", "/api/v1/namespaces/%s/pods/%s/binding" % (args["PodNamespace"], args["PodName"]),
                {"apiVersion": "v1", "kind": "Binding",
                 "metadata": {"name": args["PodName"], "namespace": args["PodNamespace"],
                              "uid": args["PodUID"]},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]}})
            return {"Error": "" if status == 201 else "HTTP %d %s" % (status, body)}
        return {"NodeNameToMetaVictims": args.get("NodeNameToMetaVictims") or {}}

    def stop(self):
        self.server.stop()


# --- the scenario -----------------------------------------------------------------------------------

class Scenario:
    def __init__(self, args, bin_dir, report, top):
        self.args = args
        self.bin_dir = bin_dir
        self.report = report
        self.top = top
        self.cp = None
        self.nodes = []
        self.extender = None
        self.stub = None
        self.watching = threading.Event()
        self.seen = set()
        self.started = time.monotonic()
        self.deleting = set()
        self.victims = []  # (name, node, resource) of bound pods the API server marked for deletion

    def render(self):
        with check_deploy.scratch_deploy(self.args.deploy) as deploy:
            objects, error = check_deploy.render(os.path.join(self.bin_dir, "kubectl"),
                                                 os.path.join(deploy, "overlays", "default"))
        if objects is None:
            raise controlplane.ControlPlaneError("overlays/default does not render: %s" % error)
        return objects

    def run(self):
        r = self.report
        objects = self.render()
        pki = os.path.join(self.top, "extender-pki")
        tls = make_extender_pki(pki)
        port = controlplane._free_ports(1)[0]
        with open(os.path.join(REPO, "deploy", "scheduler", "kube-scheduler-config.yaml")) as f:
            shipped = yaml.safe_load(f)
        plane = os.path.join(self.top, "plane")
        os.makedirs(plane)
        config = scheduler_config(shipped, "https://127.0.0.1:%d" % port, tls,
                                  os.path.join(plane, "scheduler.kubeconfig"))
        changed = sorted(k for k in set(config) | set(shipped) if config.get(k) != shipped.get(k))
        ext_changed = sorted(k for k in set(config["extenders"][0]) | set(shipped["extenders"][0])
                             if config["extenders"][0].get(k) != shipped["extenders"][0].get(k))
        r.check(changed == ["clientConnection", "extenders", "leaderElection"] and
                ext_changed == ["tlsConfig", "urlPrefix"] and len(config["extenders"]) == 1,
                "kube-scheduler runs deploy/scheduler/kube-scheduler-config.yaml with only the "
                "extender's urlPrefix and tlsConfig, clientConnection and leaderElection filled in",
                "changed: %s, in the extender: %s" % (changed, ext_changed))
        config_path = os.path.join(self.top, "kube-scheduler-config.yaml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)

        started = self.started = time.monotonic()
        self.cp = controlplane.ControlPlane(self.bin_dir, scheduler=True, scheduler_config=config_path,
                                            workdir=plane, deadline=180.0)
        self.cp.start()
        self.api = Client(self.cp)
        print("control plane with kube-scheduler up in %.1f s" % (time.monotonic() - started))

        # The overlay's namespace, ServiceAccounts and RBAC (its workloads would need kubelets).
        rbac = [o for o in objects if o["kind"] in ("Namespace", "ServiceAccount", "ClusterRole",
                                                    "ClusterRoleBinding", "Role", "RoleBinding")]
        self.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(rbac))
        self.cp.kubectl("create", "namespace", TENANT)
        # The ServiceAccount admission plugin wants the namespace's `default` account, which the
        # controller-manager (not run here: nothing else needs it) would make.
        self.cp.kubectl("create", "serviceaccount", "default", "-n", TENANT)

        def token(account):
            return self.cp.kubectl("create", "token", account, "-n", NAMESPACE, "--duration", "1h").stdout.strip()

        plugin_ds = check_deploy.one(objects, "DaemonSet", "kvgpu-device-plugin")
        plugin_container = check_deploy.pod_spec(plugin_ds)["containers"][0]
        plugin_account = check_deploy.pod_spec(plugin_ds)["serviceAccountName"]
        plugin_config = check_deploy.one(objects, "ConfigMap", "kvgpu-device-plugin-config")["data"]["config.yaml"]
        plugin_token = token(plugin_account)

        for i in range(NODES):
            node = SimNode(self, i)
            self.nodes.append(node)
            node.start(plugin_container["args"], plugin_config, plugin_token)
        print("%d nodes with their device plugins up in %.1f s" % (NODES, time.monotonic() - started))

        if self.args.bite:
            self.stub = EveryNodeExtender(self.api, port, os.path.join(pki, "tls.crt"), os.path.join(pki, "tls.key"))
        else:
            self.start_extender(objects, pki, port, token)

        # Every node's state published with the plugin's own token, before the burst. A plugin
        # whose RBAC lacks the Node patch never publishes (its log shows the 403).
        def unpublished():
            out = []
            for node in self.nodes:
                status, answer = self.api.request("GET", "/api/v1/nodes/" + node.name)
                if status != 200 or STATE_ANNOTATION not in answer["metadata"].get("annotations", {}):
                    out.append(node)
            return out
        end = time.monotonic() + PUBLISH_DEADLINE
        while unpublished() and time.monotonic() < end:
            time.sleep(0.5)
        missing = unpublished()
        if not r.check(not missing, "each device plugin, with its ServiceAccount's token, published its "
                       "node's vGPU state", "not within %.0f s on %s; their logs:\n%s" % (
                           PUBLISH_DEADLINE, [n.name for n in missing],
                           "".join("".join(n.plugin.refused_calls()[:3] or [n.plugin.log_tail(5)])
                                   for n in missing))):
            return

        threading.Thread(target=self.watch_bound, daemon=True).start()
        self.burst()
        self.settle_and_check()

    def start_extender(self, objects, pki, port, token):
        deployment = check_deploy.one(objects, "Deployment", "kvgpu-scheduler-extender")
        spec = check_deploy.pod_spec(deployment)
        kubeconfig = os.path.join(self.top, "extender.kubeconfig")
        token_kubeconfig(kubeconfig, self.cp, token(spec["serviceAccountName"]))
        self.extender_metrics = controlplane._free_ports(1)[0]
        argv = [self.args.extender] + replace_flags(spec["containers"][0]["args"], {
            "--listen": "127.0.0.1:%d" % port,
            "--tls-cert-file": os.path.join(pki, "tls.crt"),
            "--tls-key-file": os.path.join(pki, "tls.key"),
            "--client-ca-file": os.path.join(pki, "ca.crt"),
            "--metrics-addr": "127.0.0.1:%d" % self.extender_metrics,
        }) + ["--kubeconfig", kubeconfig]
        self.extender = controlplane._Process("kvgpu-scheduler-extender", argv,
                                              os.path.join(self.top, "extender.log"))
        self.cp.wait_https_ready("kvgpu-scheduler-extender answers /readyz (it follows nodes and pods)",
                                 port, os.path.join(pki, "ca.crt"), [self.extender])

    def stop(self):
        self.watching.set()
        if self.stub:
            self.stub.stop()
        if self.extender:
            self.extender.stop()
        for node in self.nodes:
            node.stop()
        if self.cp:
            self.cp.stop()

    # kubelet's pod source: the pods bound to each node, handed to that node's admission.
    def watch_bound(self):
        by_name = {n.name: n for n in self.nodes}
        while not self.watching.wait(0.5):
            try:
                status, answer = self.api.request(
                    "GET", "/api/v1/namespaces/%s/pods?fieldSelector=%s"
                    % (TENANT, urllib.parse.quote("spec.nodeName!=")))
            except OSError:
                continue
            if status != 200:
                continue
            pods = sorted(answer["items"], key=lambda p: p["metadata"]["creationTimestamp"])
            for pod in pods:
                uid = pod["metadata"]["uid"]
                node = by_name.get(pod["spec"].get("nodeName"))
                if node is not None and uid not in self.seen:
                    self.seen.add(uid)
                    node.pending.put(pod)
                if node is not None and pod["metadata"].get("deletionTimestamp") and uid not in self.deleting:
                    self.deleting.add(uid)
                    self.victims.append((pod["metadata"]["name"], node.name,
                                         self.wanted.get(pod["metadata"]["name"])))
                    print("  %.1f s: %s on %s is being deleted" % (
                        time.monotonic() - self.started, pod["metadata"]["name"], node.name))
                    node.pending.put(pod)

    def burst(self):
        rng = random.Random(SEED)
        pods = []
        for i in range(PODS):
            resource = "tencent.com/vgpu-" + rng.choice(TYPES)
            pods.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "burst-%d" % i, "namespace": TENANT},
                         "spec": {"schedulerName": SCHEDULER_NAME,
                                  "containers": [{"name": "app", "image": "my/trainer",
                                                  "resources": {"limits": {resource: "1"}}}]}})
        self.wanted = {p["metadata"]["name"]: next(iter(p["spec"]["containers"][0]["resources"]["limits"]))
                       for p in pods}
        created = []
        lock = threading.Lock()

        def create(chunk):
            for pod in chunk:
                status, answer = self.api.request("POST", "/api/v1/namespaces/%s/pods" % TENANT, pod)
                with lock:
                    created.append(status == 201 or answer)

        started = time.monotonic()
        threads = [threading.Thread(target=create, args=(pods[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ok = sum(1 for c in created if c is True)
        self.report.check(ok == PODS, "the burst's %d pods of %d types are created (%.1f s)"
                          % (PODS, len(TYPES), time.monotonic() - started),
                          "; ".join(str(c) for c in created if c is not True)[:2000])

    def pods(self):
        status, answer = self.api.request("GET", "/api/v1/namespaces/%s/pods" % TENANT)
        if status != 200:
            raise controlplane.ControlPlaneError("listing pods: HTTP %d %s" % (status, answer))
        return answer["items"]

    def placeable(self, pods):
        """Pending, unbound pods of the burst that some node's kernel could give their vGPU now."""
        rooms = {}
        out = []
        for pod in pods:
            if pod["spec"].get("nodeName"):
                continue
            mdev_type = "nvidia-" + self.wanted[pod["metadata"]["name"]].rsplit("-", 1)[1]
            if mdev_type not in rooms:
                rooms[mdev_type] = sum(node.room(mdev_type) for node in self.nodes)
            if rooms[mdev_type] > 0:
                out.append(pod["metadata"]["name"])
        return out

    def settle(self, deadline, done=None):
        """Waits until every bound pod has been admitted or failed, no Pending pod is one a
        kernel could take, `done` (if given) holds, and nothing changed for 10 s; or `deadline`
        seconds. Returns (pods, bound pods, Pending pods a kernel could take, admitted)."""
        started = time.monotonic()
        quiet_since, last = None, None
        while True:
            pods = self.pods()
            bound = [p for p in pods if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
            results = self.results()
            admitted = sum(1 for p in bound if p["metadata"]["uid"] in results)
            idle = all(n.pending.empty() and not n.busy for n in self.nodes)
            waiting = self.placeable(pods)
            now = (len(bound), admitted, len(waiting), len(self.victims))
            if now != last:
                quiet_since, last = time.monotonic(), now
            if (admitted == len(bound) and idle and not waiting and (done is None or done(results)) and
                    time.monotonic() - quiet_since > 10) or time.monotonic() > started + deadline:
                break
            time.sleep(1.0)
        print("after %.1f s: %d bound, %d admitted, %d pending of which %d some kernel could take"
              % (time.monotonic() - started, len(bound), admitted, len(pods) - len(bound), len(waiting)))
        return pods, bound, waiting, admitted

    def results(self):
        """pod UID -> (node, admitted, vGPU ids or kubelet's reason), of pods not deleted since."""
        out = {}
        for node in self.nodes:
            for uid, (ok, detail) in list(node.results.items()):
                if uid not in self.deleting:
                    out[uid] = (node, ok, detail)
        return out

    def check_placements(self, pods, bound, what):
        """No bound pod failed kubelet's admission, and every admitted one's vGPU is in its
        node's simulated kernel, of its type."""
        r = self.report
        failures, wrong = [], []
        names = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods}
        made = {node.name: node.vgpus() for node in self.nodes}
        for uid, (node, ok, detail) in sorted(self.results().items(), key=lambda kv: names.get(kv[0], kv[0])):
            name = names.get(uid, uid)
            resource = self.wanted.get(name, "?")
            if not ok:
                failures.append("%s (%s) on %s: %s" % (name, resource, node.name, detail))
                continue
            mdev_type = "nvidia-" + resource.rsplit("-", 1)[1]
            if len(detail) != 1 or any(made[node.name].get(v, (None, None))[1] != mdev_type for v in detail):
                wrong.append("%s (%s) on %s: vGPUs %s, the kernel has %s"
                             % (name, resource, node.name, detail, {v: made[node.name].get(v) for v in detail}))
        r.check(bound and not failures,
                "%s: no pod is bound to a node whose GPUs cannot create its vGPU (%d bound, every one "
                "admitted by kubelet's device manager)" % (what, len(bound)),
                "%d failed admission, among them:\n    %s" % (len(failures), "\n    ".join(failures[:10])))
        r.check(not wrong, "%s: the simulated kernel holds every admitted pod's vGPU, of its type" % what,
                "\n    ".join(wrong))

    def settle_and_check(self):
        r = self.report
        pods, bound, waiting, admitted = self.settle(DEADLINE)
        self.check_placements(pods, bound, "the burst")
        r.check(len(bound) > 0 and not waiting and admitted == len(bound),
                "the burst settles within %.0f s with every Pending pod one no node's kernel can take"
                % DEADLINE,
                "%d bound, %d admitted; Pending that a kernel could take: %s"
                % (len(bound), admitted, waiting[:20]))
        r.check(len(pods) - len(bound) > 0, "%d pods cannot all fit: some stay Pending" % PODS)
        refused = self.refused_binds()
        print("binds the extender refused (kube-scheduler's asynchronous binds racing for one GPU): %d"
              % len(refused))
        for line in refused[:5]:
            print("  " + line.strip())

        if not self.args.bite:
            self.preempt(pods)

        for node in self.nodes:
            lines = node.plugin.refused_calls()
            r.check(not lines, "%s's device plugin was refused no API call" % node.name, "".join(lines[:5]))
        if self.extender is not None:
            lines = self.extender.refused_calls()
            r.check(not lines, "the extender was refused no API call", "".join(lines[:5]))
            calls = scrape(self.extender_metrics, "kvgpu_scheduler_extender_requests_total")
            ok = {verb: sum(v for k, v in calls.items() if 'path="/%s"' % verb in k and 'code="200"' in k)
                  for verb in ("filter", "prioritize", "bind", "preempt")}
            r.check(ok["filter"] > 0 and ok["prioritize"] > 0 and ok["bind"] >= len(bound) and ok["preempt"] > 0,
                    "kube-scheduler called the extender's filter (%d), prioritize (%d), bind (%d, for %d "
                    "pods of the burst bound) and preempt (%d), each answered 200"
                    % (ok["filter"], ok["prioritize"], ok["bind"], len(bound), ok["preempt"]), json.dumps(calls))

    def refused_binds(self):
        if self.extender is None:
            return []
        with open(self.extender.log_path, errors="replace") as f:
            return [line for line in f if " refused: " in line and "] bind " in line]

    def preempt(self, pods):
        """A pod of a higher priority asking for a type no GPU has room for: kube-scheduler's
        DefaultPreemption, with the extender's preempt verb, picks victims; their vGPUs go once
        kubelet has stopped them and the plugin's grace period has passed; the pod is placed."""
        r = self.report
        results = self.results()
        running = {}  # resource -> the nodes its pods run on
        for p in pods:
            entry = results.get(p["metadata"]["uid"])
            if entry and entry[1]:
                running.setdefault(self.wanted[p["metadata"]["name"]], set()).add(entry[0].name)
        # The type on the most nodes: kube-scheduler then has candidates on several.
        full = sorted((res for res in running
                       if sum(n.room("nvidia-" + res.rsplit("-", 1)[1]) for n in self.nodes) == 0),
                      key=lambda res: (-len(running[res]), res))
        if not r.check(bool(full), "preemption: some type runs and no GPU has room for another of it",
                       "running: %s" % sorted(running)):
            return
        resource = full[0]
        print("  preempting for %s, which runs on %s" % (resource, sorted(running[resource])))
        self.cp.kubectl("create", "priorityclass", "vgpu-high", "--value", "1000")
        name = "preemptor"
        self.wanted[name] = resource
        status, answer = self.api.request("POST", "/api/v1/namespaces/%s/pods" % TENANT, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT},
            "spec": {"schedulerName": SCHEDULER_NAME, "priorityClassName": "vgpu-high",
                     "containers": [{"name": "app", "image": "my/trainer",
                                     "resources": {"limits": {resource: "1"}}}]}})
        if not r.check(status == 201, "preemption: a pod of priority 1000 asking for %s is created" % resource,
                       str(answer)):
            return
        uid = answer["metadata"]["uid"]
        started = time.monotonic()
        print("  %.1f s: the preemptor is created" % (started - self.started))
        pods, bound, _, _ = self.settle(DEADLINE, done=lambda results: uid in results)
        took = time.monotonic() - started
        entry = self.results().get(uid)
        node = entry[0].name if entry else None
        r.check(entry is not None and entry[1],
                "preemption: the pod is bound and admitted within %.0f s (%.1f s), on %s" % (DEADLINE, took, node),
                "kubelet's answer: %s; victims %s" % (entry and entry[2], self.victims))
        on_node = [v for v in self.victims if v[1] == node]
        r.check(bool(on_node) and all(v[2] == resource for v in self.victims),
                "preemption: its victims were pods of %s, one or more on the node it went to" % resource,
                "victims (pod, node, resource): %s" % self.victims)
        # Once a victim's pod object is gone its vGPU stays for the plugin's grace period (30 s
        # shipped) and the filter refuses the preemptor on its nominated node meanwhile;
        # kube-scheduler then preempts again, and the extender must keep no node for it then
        # (docs/scheduler-extender.md, "Preemption": two victims for one vGPU before).
        elsewhere = [v for v in self.victims if v[1] != node]
        r.check(not elsewhere,
                "preemption: no victim on a node the pod did not go to (%d victim(s) for one vGPU)"
                % len(self.victims),
                ", ".join("%s on %s" % (v[0], v[1]) for v in self.victims))
        self.check_placements(pods, bound, "after preemption")


# What the bite must fail and must still pass (prefixes of check names).
BITE_FAILS = ["the burst: no pod is bound to a node whose GPUs cannot create its vGPU"]
BITE_PASSES = ["the burst's", "each device plugin", "kube-scheduler runs deploy/scheduler"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", required=True, help="a release pinned in tests/k8s/peers, e.g. 1.37")
    parser.add_argument("--deploy", default=os.path.join(REPO, "deploy"))
    parser.add_argument("--extender", help="the kvgpu-scheduler-extender to test")
    parser.add_argument("--device-plugin", help="the kvgpu-device-plugin the nodes run")
    parser.add_argument("--sim", help="kvgpu-sim, the simulated GPU host")
    parser.add_argument("--bite", action="store_true",
                        help="show that the checks fail with an extender that answers every node instead")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (its path is printed)")
    args = parser.parse_args()

    bin_dir, status = controlplane.peers_or_exit_code(args.release)
    if bin_dir is None:
        return status
    for what in ("extender", "device_plugin", "sim"):
        path = getattr(args, what)
        if not path or not os.access(path, os.X_OK):
            print("FAIL: --%s names no program: %s" % (what.replace("_", "-"), path))
            return 1
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        print("FAIL: kvgpu-sim needs /dev/fuse (and root to mount it)")
        return 1

    started = time.monotonic()
    outer = check_deploy.Report()
    report = check_deploy.Report() if args.bite else outer
    # Unix socket paths are limited to 107 bytes: the nodes live in a short directory.
    top = tempfile.mkdtemp(prefix="kx-", dir="/tmp")
    scenario = Scenario(args, bin_dir, report, top)
    try:
        if args.bite:
            print("--- the burst with an extender that answers every node, where FAIL is expected:")
        scenario.run()
    except BaseException:
        if scenario.extender:
            print("--- kvgpu-scheduler-extender's log ends:\n" + scenario.extender.log_tail())
        for node in scenario.nodes:
            if node.plugin:
                print("--- %s's device plugin's log ends:\n%s" % (node.name, node.plugin.log_tail(15)))
        if scenario.cp and scenario.cp.processes:
            print("--- kube-scheduler's log ends:\n" + scenario.cp.processes[-1].log_tail(20))
        raise
    finally:
        scenario.stop()
        if args.keep:
            print("kept %s" % top)
        elif not any(os.path.ismount(n.mount) for n in scenario.nodes):
            shutil.rmtree(top, ignore_errors=True)
    if args.bite:
        print("---")
        for part in BITE_FAILS:
            outer.check(any(f.startswith(part) for f in report.failures), "answering every node fails %r" % part)
        for part in BITE_PASSES:
            outer.check(any(p.startswith(part) for p in report.passes) and
                        not any(f.startswith(part) for f in report.failures),
                        "answering every node still passes %r" % part)
    print("(%.1f s in all)" % (time.monotonic() - started))
    return outer.finish()


if __name__ == "__main__":
    sys.exit(main())
