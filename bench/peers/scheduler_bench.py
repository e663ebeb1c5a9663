#!/usr/bin/python3
"""bench/peers/scheduler.sh's measurement and report: the real kube-scheduler (and etcd,
kube-apiserver, kubectl, kube-controller-manager) of one pinned release, from
tests/k8s/controlplane.py, placing a burst of vGPU pods on N registered Nodes (no kubelets) three
ways:

  extender  deploy/scheduler/kube-scheduler-config.yaml as shipped (only the extender's urlPrefix
            and tlsConfig filled in, and the scheduler's clientConnection and leaderElection), with
            this build's kvgpu-scheduler-extender run with the Deployment's flags (its TLS files,
            its client CA, --bind, --policy=pack, --max-state-age=10m) and its own Node and pod
            watches (nodeCacheCapable); pods ask for tencent.com/vgpu-<type>: 1;
  counts    the same pods, the same profile, no extender: the node's extended-resource counts
            alone (kube-scheduler's NodeResourcesFit);
  dra       pods with a ResourceClaimTemplate of their type (deviceClassName
            vgpu-<type>.vgpu.tencent.com, the DeviceClasses of deploy/components/dra), the nodes'
            ResourceSlices published beforehand, kube-controller-manager's resourceclaim
            controller (alone) making each pod's claim; the scheduler's DynamicResources plugin
            allocates.

The nodes come from kvgpu-bench-scheduler-nodes (scheduler_nodes.cpp): 8 Tesla T4 each, some
GPUs locked to a type and partly used, their allocatable, vGPU state annotation and ResourceSlices
computed by the node daemon's own code. Each size gets a fresh control plane; the modes run in
the order extender, counts, dra, each with a kube-scheduler of its own started after the burst's
pods exist (so the burst is in its queue at once) and stopped after; the pods of a mode are
deleted (grace period 0) before the next.

Measured per mode: the time from the first pod bound to the last (pods/s: bound pods after the
first over that time; the binds seen through a watch of the namespace's pods), kube-scheduler's
scheduler_scheduling_attempt_duration_seconds (result "scheduled": the scheduling algorithm and
the binding) and scheduler_scheduling_algorithm_duration_seconds (filter and score, the
extender's filter and prioritize calls included), percentiles interpolated in the histogram as
Prometheus' histogram_quantile does, and means (sum / count); the extender's own
kvgpu_scheduler_extender_request_seconds per verb (server side: from the request read to the
answer written; kube-scheduler 1.36 and 1.37 keep no metric of extender calls); the CPU time of
kube-scheduler and of the extender over the burst.

usage:
  scheduler_bench.py run --bin-dir DIR --extender BIN --nodes-bin BIN --out FILE
        [--sizes 100,1000,5000] [--modes extender,counts,dra] [--pods 300] [--seed 1]
        [--timeout 300] [--work DIR] [--dra-max-nodes N]
  scheduler_bench.py report RESULTS SECTION_MD PLOT_DAT      (environment: KV_* as scheduler.sh sets)
  scheduler_bench.py selftest
Only the Python standard library (Debian's /usr/bin/python3) and openssl.
"""
import argparse
import base64
import concurrent.futures
import http.client
import json
import os
import random
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "k8s"))

import controlplane  # noqa: E402

SCHEDULER_NAME = "kata-vgpu-scheduler"  # the shipped configuration's profile
STATE_ANNOTATION = "kvgpu.tencent.com/vgpu-state"
# kvgpu-sim's T4 types (sim/profiles.cpp TeslaT4): the burst asks for these at random.
T4_TYPES = ["222", "223", "225", "228", "230", "231", "232", "233", "234", "319", "320", "321"]
MODES = ["extender", "counts", "dra"]
DRA_DRIVER = "vgpu.tencent.com"
EXTENDER_VERBS = ["filter", "prioritize", "bind"]


def log(message):
    print("scheduler-bench: " + message, file=sys.stderr, flush=True)


# --- Prometheus text and histograms ------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """[(name, {label: value}, float)] of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), labels, value))
    return out


def histogram(samples, name, **match):
    """{"buckets": [(le, cumulative count)], "sum": s, "count": n} of one histogram, the series
    whose labels include `match` added together (le sorted, +Inf last)."""
    buckets, total, count = {}, 0.0, 0.0
    for metric, labels, value in samples:
        if any(labels.get(k) != v for k, v in match.items()):
            continue
        if metric == name + "_bucket":
            le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + value
        elif metric == name + "_sum":
            total += value
        elif metric == name + "_count":
            count += value
    return {"buckets": sorted(buckets.items()), "sum": total, "count": count}


def quantile(q, buckets):
    """Prometheus' histogram_quantile: the bucket where the rank q * count falls, linearly
    interpolated between its lower bound (the previous bucket's le; 0 for the first) and its le;
    in the +Inf bucket the highest finite le. None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    count = buckets[-1][1]
    rank = q * count
    previous_le, previous_count = 0.0, 0.0
    for le, cumulative in buckets:
        if cumulative >= rank:
            if le == float("inf"):
                return previous_le
            if cumulative == previous_count:
                return le
            return previous_le + (le - previous_le) * (rank - previous_count) / (cumulative - previous_count)
        previous_le, previous_count = le, cumulative
    return previous_le


def summarize(h):
    """Percentiles and mean of a histogram, in milliseconds."""
    def ms(v):
        return None if v is None else v * 1000.0
    return {"count": h["count"], "p50_ms": ms(quantile(0.5, h["buckets"])),
            "p90_ms": ms(quantile(0.9, h["buckets"])), "p99_ms": ms(quantile(0.99, h["buckets"])),
            "mean_ms": ms(h["sum"] / h["count"]) if h["count"] else None,
            "sum_s": h["sum"]}


# --- what the cluster is given -----------------------------------------------------------------

def burst_types(pods, seed):
    rng = random.Random(seed)
    return [rng.choice(T4_TYPES) for _ in range(pods)]


def pod_object(name, namespace, vgpu_type, mode):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
           "spec": {"schedulerName": SCHEDULER_NAME, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": "my/trainer"}]}}
    if mode == "dra":
        pod["spec"]["resourceClaims"] = [{"name": "vgpu", "resourceClaimTemplateName": "vgpu-" + vgpu_type}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "vgpu"}]}
    else:
        pod["spec"]["containers"][0]["resources"] = {"limits": {"tencent.com/vgpu-" + vgpu_type: "1"}}
    return pod


def claim_template(namespace, vgpu_type):
    """As deploy/components/dra/examples/claim-templates.yaml's vgpu-230, for each type."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "vgpu-" + vgpu_type, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "vgpu", "exactly": {
                "deviceClassName": "vgpu-%s.%s" % (vgpu_type, DRA_DRIVER)}}]}}}}


def node_object(line):
    """The Node a kubelet would register for one line of kvgpu-bench-scheduler-nodes, with the
    device plugins' counts in capacity and allocatable, Ready, and the plugin's state annotation."""
    resources = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    resources.update(line["allocatable"])
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": line["name"],
                         "labels": {"kubernetes.io/hostname": line["name"], "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64"},
                         "annotations": dict(line.get("annotations") or {})},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "registered by bench/peers/scheduler.sh, no kubelet",
                                       "lastHeartbeatTime": now, "lastTransitionTime": now}]}}


def client_connection(kubeconfig, qps):
    """clientConnection: the scheduler's kubeconfig and, where qps is given, its client's rate limit
    (qps and burst both; the default 50 and 100 hold a burst's binds to 50 a second)."""
    text = "clientConnection:\n  kubeconfig: %s\n" % kubeconfig
    if qps:
        text += "  qps: %d\n  burst: %d\n" % (qps, qps)
    return text


def shipped_config_with_extender(shipped_text, url, tls, kubeconfig, qps=0):
    """The shipped KubeSchedulerConfiguration with only what a cluster fills in filled in: the
    extender's urlPrefix and its tlsConfig's three fields, the scheduler's clientConnection and
    leaderElection (appended). A text edit, each exactly once, so nothing else can change."""
    text = shipped_text
    edits = [(r"urlPrefix: https://kvgpu-scheduler-extender\.kata-vgpu\.svc:8888", "urlPrefix: " + url),
             (r"caData: REPLACE-WITH-BASE64-OF-CA-PEM", "caData: " + tls["caData"]),
             (r"certData: REPLACE-WITH-BASE64-OF-CLIENT-CERT-PEM", "certData: " + tls["certData"]),
             (r"keyData: REPLACE-WITH-BASE64-OF-CLIENT-KEY-PEM", "keyData: " + tls["keyData"])]
    for pattern, replacement in edits:
        text, n = re.subn(pattern, lambda _m, r=replacement: r, text)
        if n != 1:
            raise controlplane.ControlPlaneError("the shipped scheduler config has %d of %r, not 1" % (n, pattern))
    if re.search(r"^(clientConnection|leaderElection):", text, re.MULTILINE):
        raise controlplane.ControlPlaneError("the shipped scheduler config sets clientConnection or leaderElection")
    return text.rstrip("\n") + "\n" + client_connection(kubeconfig, qps) + "leaderElection:\n  leaderElect: false\n"


def plain_config(kubeconfig, qps=0):
    """The same profile without the extender."""
    return ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "profiles:\n- schedulerName: %s\n%sleaderElection:\n  leaderElect: false\n"
            % (SCHEDULER_NAME, client_connection(kubeconfig, qps)))


# --- the API server ----------------------------------------------------------------------------

class Client:
    """The admin's requests over one kept-alive connection per thread."""

    def __init__(self, cp):
        self.cp = cp
        self.local = threading.local()
        self.port = int(cp.server.rsplit(":", 1)[1])

    def _conn(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            context = ssl.create_default_context(cafile=self.cp.ca)
            context.load_cert_chain(self.cp.path("pki", "admin.crt"), self.cp.path("pki", "admin.key"))
            conn = self.local.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=120)
        return conn

    def request(self, method, path, body=None, content_type="application/json"):
        for attempt in range(3):
            conn = self._conn()
            headers = {"Accept": "application/json"}
            payload = None
            if body is not None:
                payload = body if isinstance(body, (bytes, str)) else json.dumps(body)
                headers["Content-Type"] = content_type
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.5)
                continue
            if response.status == 429 and attempt < 2:  # the API server's max-in-flight
                time.sleep(1.0)
                continue
            try:
                return response.status, json.loads(raw)
            except ValueError:
                return response.status, raw.decode(errors="replace")

    def must(self, method, path, body=None, ok=(200, 201), content_type="application/json"):
        status, answer = self.request(method, path, body, content_type)
        if status not in ok:
            raise controlplane.ControlPlaneError("%s %s: HTTP %d %s" % (method, path, status, str(answer)[:500]))
        return answer


def parallel(items, work, threads=8):
    """work(item) for every item on `threads` threads; the first error is raised."""
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(work, items):
            pass


class PodWatch:
    """Follows the namespace's pods: when each was first seen bound (spec.nodeName) and which are
    Unschedulable (PodScheduled False, reason Unschedulable) and not bound."""

    def __init__(self, cp, namespace, names):
        self.cp = cp
        self.namespace = namespace
        self.names = set(names)
        self.bound = {}  # name -> (monotonic time, node)
        self.unschedulable = set()
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.stopping = False
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self, resource_version):
        self.resource_version = resource_version
        self.thread.start()

    def _see(self, pod):
        name = pod["metadata"]["name"]
        if name not in self.names:
            return
        with self.lock:
            node = pod["spec"].get("nodeName")
            if node and name not in self.bound:
                self.bound[name] = (time.monotonic(), node)
                self.unschedulable.discard(name)
            elif not node:
                conditions = {c.get("type"): c for c in pod.get("status", {}).get("conditions") or []}
                c = conditions.get("PodScheduled")
                if c and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                    self.unschedulable.add(name)
            self.changed.notify_all()

    def _run(self):
        port = int(self.cp.server.rsplit(":", 1)[1])
        while not self.stopping:
            context = ssl.create_default_context(cafile=self.cp.ca)
            context.load_cert_chain(self.cp.path("pki", "admin.crt"), self.cp.path("pki", "admin.key"))
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=600)
            try:
                conn.request("GET", "/api/v1/namespaces/%s/pods?watch=1&allowWatchBookmarks=false&resourceVersion=%s"
                             % (self.namespace, self.resource_version), headers={"Accept": "application/json"})
                response = conn.getresponse()
                if response.status != 200:
                    raise controlplane.ControlPlaneError("watch: HTTP %d" % response.status)
                while not self.stopping:
                    line = response.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        raise controlplane.ControlPlaneError("watch: %s" % event)
                    obj = event.get("object") or {}
                    self.resource_version = obj.get("metadata", {}).get("resourceVersion", self.resource_version)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._see(obj)
            except Exception as e:  # noqa: BLE001 - reported by wait()
                if not self.stopping:
                    self.error = e
                    with self.lock:
                        self.changed.notify_all()
                    return
            finally:
                conn.close()

    def wait(self, deadline):
        """Until every pod is bound or Unschedulable, or `deadline` (monotonic) passes."""
        with self.lock:
            while True:
                if self.error:
                    raise self.error
                if len(self.bound) + len(self.unschedulable) >= len(self.names):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 1.0))

    def stop(self):
        self.stopping = True


def cpu_seconds(pid):
    """utime + stime of a process, seconds (its threads included)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class ConnectionCounter:
    """The TCP connections made to a loopback port (its /proc/net/tcp entries, sampled every
    0.1 s): whether kube-scheduler keeps its connection to the extender or opens one per call."""

    def __init__(self, port):
        self.port = port
        self.peers = set()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping.wait(0.1):
            try:
                with open("/proc/net/tcp") as f:
                    next(f)
                    for line in f:
                        fields = line.split()
                        local, remote = fields[1], fields[2]
                        if int(local.split(":")[1], 16) == self.port and remote != "00000000:0000":
                            self.peers.add(remote)
            except OSError:
                pass

    def stop(self):
        self.stopping.set()
        self.thread.join(2)
        return len(self.peers)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --- one size ----------------------------------------------------------------------------------

class Bench:
    def __init__(self, args, size, top):
        self.args = args
        self.size = size
        self.top = top
        self.cp = None
        self.api = None
        self.extender = None
        self.scheduler = None
        self.kcm = None
        self.node_uids = {}
        self.nodes_file = os.path.join(top, "nodes.jsonl")
        self.result = {"nodes": size, "modes": {}}

    # The extender's certificates: a CA, its serving certificate for 127.0.0.1, kube-scheduler's
    # client certificate made by the shipped deploy/scheduler/gen-scheduler-client-cert.sh.
    def extender_pki(self):
        pki = os.path.join(self.top, "extender-pki")
        os.makedirs(pki)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        controlplane._openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                              "-subj", "/CN=kata-vgpu-bench-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                              "-addext", "keyUsage=critical,keyCertSign", cwd=pki)
        controlplane._openssl("req", "-x509", "-CA", "ca.crt", "-CAkey", "ca.key", *ec, "-keyout", "tls.key",
                              "-out", "tls.crt", "-days", "2", "-subj", "/CN=kvgpu-scheduler-extender",
                              "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth",
                              "-addext", "subjectAltName=IP:127.0.0.1", cwd=pki)
        out = subprocess.run(["bash", os.path.join(REPO, "deploy", "scheduler", "gen-scheduler-client-cert.sh"), pki],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise controlplane.ControlPlaneError("gen-scheduler-client-cert.sh: " + out.stderr.strip())
        tls = dict(re.findall(r"^\s*(caData|certData|keyData):\s*(\S+)\s*$", out.stdout, re.MULTILINE))
        if sorted(tls) != ["caData", "certData", "keyData"]:
            raise controlplane.ControlPlaneError("gen-scheduler-client-cert.sh printed no tlsConfig: " + out.stdout)
        return pki, tls

    def start_plane(self):
        started = time.monotonic()
        self.cp = controlplane.ControlPlane(self.args.bin_dir, workdir=os.path.join(self.top, "plane"),
                                           deadline=300.0)
        self.cp.start()
        self.api = Client(self.cp)
        log("%d nodes: control plane up in %.1f s" % (self.size, time.monotonic() - started))

    def make_nodes(self):
        started = time.monotonic()
        argv = [self.args.nodes_bin, "--nodes", str(self.size), "--seed", str(self.args.seed)]
        if "dra" in self.modes and self.size <= self.args.dra_max_nodes:
            argv.append("--slices")
        with open(self.nodes_file, "w") as out:
            subprocess.run(["nice", "-n", "19"] + argv, stdout=out, check=True)
        self.result["nodes_made_s"] = time.monotonic() - started
        log("%d nodes: computed by kvgpu-bench-scheduler-nodes in %.1f s (%.1f MB)"
            % (self.size, self.result["nodes_made_s"], os.path.getsize(self.nodes_file) / 1e6))

    def lines(self):
        with open(self.nodes_file) as f:
            for line in f:
                yield json.loads(line)

    def register_nodes(self):
        """Each Node created with its status (as kubelet registers it), then the not-ready taint
        the API server's admission put on it taken off (as the node lifecycle controller would)."""
        started = time.monotonic()
        lock = threading.Lock()

        def register(line):
            node = node_object(line)
            created = self.api.must("POST", "/api/v1/nodes", node)
            if not created.get("status", {}).get("allocatable"):
                self.api.must("PATCH", "/api/v1/nodes/%s/status" % line["name"], {"status": node["status"]},
                              content_type="application/merge-patch+json")
            taints = created.get("spec", {}).get("taints") or []
            kept = [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"]
            if len(kept) != len(taints):
                self.api.must("PATCH", "/api/v1/nodes/%s" % line["name"], {"spec": {"taints": kept or None}},
                              content_type="application/merge-patch+json")
            with lock:
                self.node_uids[line["name"]] = created["metadata"]["uid"]

        parallel(({k: v for k, v in line.items() if k != "slices"} for line in self.lines()), register)
        self.result["register_s"] = time.monotonic() - started
        log("%d nodes: registered in %.1f s" % (self.size, self.result["register_s"]))

    def publish_slices(self):
        started = time.monotonic()
        count = [0, 0]
        lock = threading.Lock()

        def work(item):
            name, slice_ = item
            slice_.setdefault("apiVersion", "resource.k8s.io/v1")
            slice_.setdefault("kind", "ResourceSlice")
            slice_["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": name,
                                                      "uid": self.node_uids[name]}]
            body = json.dumps(slice_)
            self.api.must("POST", "/apis/resource.k8s.io/v1/resourceslices", body)
            with lock:
                count[0] += 1
                count[1] += len(body)

        def items():
            for line in self.lines():
                for slice_ in line.get("slices") or []:
                    yield line["name"], slice_
        parallel(items(), work)
        self.result["slices"] = count[0]
        self.result["slice_bytes"] = count[1]
        self.result["slices_s"] = time.monotonic() - started
        log("%d nodes: %d ResourceSlices (%.1f MB) published in %.1f s"
            % (self.size, count[0], count[1] / 1e6, self.result["slices_s"]))

    def heartbeat_if_old(self, limit_s=240):
        """The plugin re-publishes its state at least every 2 minutes (schedulerState.heartbeat);
        the extender fails a node whose state is older than --max-state-age (10 min). Where the
        nodes were registered long ago, the state's publishedUnixMs is renewed as that heartbeat
        would, the document otherwise unchanged."""
        if time.time() - self.published_at < limit_s:
            return
        started = time.monotonic()
        now_ms = int(time.time() * 1000)

        def beat(line):
            text = line["annotations"][STATE_ANNOTATION]
            text, n = re.subn(r'"publishedUnixMs":\s*\d+', '"publishedUnixMs":%d' % now_ms, text)
            if n != 1:
                raise controlplane.ControlPlaneError("no publishedUnixMs in %s's state" % line["name"])
            self.api.must("PATCH", "/api/v1/nodes/%s" % line["name"],
                          {"metadata": {"annotations": {STATE_ANNOTATION: text}}},
                          content_type="application/merge-patch+json")
        parallel(({k: v for k, v in line.items() if k != "slices"} for line in self.lines()), beat)
        self.published_at = time.time()
        log("%d nodes: states re-published (the plugins' heartbeat) in %.1f s" % (self.size, time.monotonic() - started))

    def start_extender(self, pki, port):
        metrics_port = controlplane._free_ports(1)[0]
        argv = [self.args.extender, "--listen=127.0.0.1:%d" % port,
                "--tls-cert-file=" + os.path.join(pki, "tls.crt"), "--tls-key-file=" + os.path.join(pki, "tls.key"),
                "--client-ca-file=" + os.path.join(pki, "ca.crt"), "--policy=pack", "--max-state-age=10m", "--bind",
                "--metrics-addr=127.0.0.1:%d" % metrics_port, "--kubeconfig", self.cp.kubeconfig]
        self.extender = controlplane._Process("kvgpu-scheduler-extender", argv, os.path.join(self.top, "extender.log"))
        self.extender.metrics_port = metrics_port
        self.extender.port = port
        self.cp.wait_https_ready("kvgpu-scheduler-extender answers /readyz (it follows nodes and pods)",
                                 port, os.path.join(pki, "ca.crt"), [self.extender])
        # /readyz says ready once every watch that has reported follows; the Node watch reports
        # when its first list is in, so with a long Node list (5,000 nodes: about 3 s here) the
        # pod watch alone made it ready, and filter failed every node meanwhile (found by this
        # benchmark; docs/bench-peers.md). The burst waits for the extender's own word that it
        # follows the nodes, so that it measures the extender at work, not starting.
        self.result.setdefault("extender_ready_before_nodes", False)

        def nodes_listed():
            with open(self.extender.log_path, errors="replace") as f:
                return "following nodes again (listed" in f.read()
        if not nodes_listed():
            self.result["extender_ready_before_nodes"] = True
        self.cp._wait("kvgpu-scheduler-extender has listed the nodes", nodes_listed, [self.extender])

    def start_scheduler(self, config_text, mode):
        config = os.path.join(self.top, "scheduler-%s.yaml" % mode)
        with open(config, "w") as f:
            f.write(config_text)
        port = controlplane._free_ports(1)[0]
        kubeconfig = os.path.join(self.top, "scheduler.kubeconfig")
        argv = [os.path.join(self.args.bin_dir, "kube-scheduler"), "--config", config,
                "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
                "--bind-address", "127.0.0.1", "--secure-port", str(port),
                "--cert-dir", os.path.join(self.top, "scheduler-certs-" + mode)]
        self.scheduler = controlplane._Process("kube-scheduler", argv, os.path.join(self.top, "scheduler-%s.log" % mode))
        self.scheduler.port = port
        self.scheduler.started = time.monotonic()
        self.cp._wait("kube-scheduler is healthy", lambda: self.cp._healthz(port), [self.scheduler])
        self.scheduler.healthy = time.monotonic()

    def start_claim_controller(self):
        """kube-controller-manager with its resourceclaim controller alone: the claims of pods
        with ResourceClaimTemplates (with every controller the node lifecycle controller would
        taint these heartbeat-less Nodes unreachable). As the admin: with its own credentials it
        would need --use-service-account-credentials and the serviceaccount controllers."""
        kubeconfig = self.cp.kubeconfig
        port = controlplane._free_ports(1)[0]
        argv = [os.path.join(self.args.bin_dir, "kube-controller-manager"),
                "--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
                "--authorization-kubeconfig", kubeconfig, "--bind-address", "127.0.0.1",
                "--secure-port", str(port), "--cert-dir", os.path.join(self.top, "kcm-certs"),
                "--leader-elect=false", "--controllers", "resourceclaim-controller"]
        self.kcm = controlplane._Process("kube-controller-manager", argv, os.path.join(self.top, "kcm.log"))
        self.cp._wait("kube-controller-manager is healthy", lambda: self.cp._healthz(port), [self.kcm])

    def scrape_scheduler(self):
        context = ssl._create_unverified_context()
        context.load_cert_chain(self.cp.path("pki", "admin.crt"), self.cp.path("pki", "admin.key"))
        conn = http.client.HTTPSConnection("127.0.0.1", self.scheduler.port, context=context, timeout=30)
        try:
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            text = response.read().decode()
            if response.status != 200:
                raise controlplane.ControlPlaneError("kube-scheduler /metrics: HTTP %d %s" % (response.status, text[:300]))
        finally:
            conn.close()
        with open(os.path.join(self.top, "scheduler-metrics-%s.txt" % self.mode), "w") as f:
            f.write(text)
        return parse_metrics(text)

    def scrape_extender(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.extender.metrics_port, timeout=30)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        with open(os.path.join(self.top, "extender-metrics.txt"), "w") as f:
            f.write(text)
        return parse_metrics(text)

    def namespace(self, name):
        self.api.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        # The ServiceAccount admission plugin wants the namespace's `default` account, which the
        # controller-manager's serviceaccount controller (not run here) would make.
        self.api.must("POST", "/api/v1/namespaces/%s/serviceaccounts" % name,
                      {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})

    def run_mode(self, mode, types):
        self.mode = mode
        namespace = "bench-" + mode
        self.namespace(namespace)
        record = {"pods": len(types), "load_before": loadavg()}
        if mode == "dra":
            for t in sorted(set(types)):
                self.api.must("POST", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates" % namespace,
                              claim_template(namespace, t))
        names = ["burst-%d" % i for i in range(len(types))]
        started = time.monotonic()
        parallel(list(zip(names, types)), lambda item: self.api.must(
            "POST", "/api/v1/namespaces/%s/pods" % namespace, pod_object(item[0], namespace, item[1], mode)))
        record["create_s"] = time.monotonic() - started
        if mode == "dra":
            # Each pod's claim made from its template by the resourceclaim controller before the
            # scheduler starts, so that the burst is all in its queue at once.
            deadline = time.monotonic() + 300
            while True:
                claims = self.api.must("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % namespace)
                if len(claims["items"]) >= len(types):
                    break
                if time.monotonic() > deadline or not self.kcm.alive():
                    raise controlplane.ControlPlaneError("only %d of %d claims made: %s"
                                                         % (len(claims["items"]), len(types), self.kcm.log_tail(10)))
                time.sleep(1.0)
            record["claims_s"] = time.monotonic() - started - record["create_s"]
        listed = self.api.must("GET", "/api/v1/namespaces/%s/pods" % namespace)
        watch = PodWatch(self.cp, namespace, names)
        watch.start(listed["metadata"]["resourceVersion"])

        if mode == "extender":
            self.heartbeat_if_old()
            pki, tls = self.pki
            port = controlplane._free_ports(1)[0]
            self.start_extender(pki, port)
            with open(os.path.join(REPO, "deploy", "scheduler", "kube-scheduler-config.yaml")) as f:
                config = shipped_config_with_extender(f.read(), "https://127.0.0.1:%d" % port, tls,
                                                      os.path.join(self.top, "scheduler.kubeconfig"),
                                                      self.args.client_qps)
        else:
            config = plain_config(os.path.join(self.top, "scheduler.kubeconfig"), self.args.client_qps)
        extender_cpu = cpu_seconds(self.extender.popen.pid) if self.extender else None
        connections = ConnectionCounter(self.extender.port) if self.extender else None
        self.start_scheduler(config, mode)
        scheduler_cpu = cpu_seconds(self.scheduler.popen.pid)
        timeout = self.args.dra_timeout if mode == "dra" and self.args.dra_timeout else self.args.timeout
        complete = watch.wait(time.monotonic() + timeout)
        done = time.monotonic()
        record["scheduler_cpu_s"] = (cpu_seconds(self.scheduler.popen.pid) or 0) - (scheduler_cpu or 0)
        if self.extender:
            record["extender_cpu_s"] = (cpu_seconds(self.extender.popen.pid) or 0) - (extender_cpu or 0)
            record["extender_connections"] = connections.stop()
        time.sleep(1.0)  # the last bind's metrics
        watch.stop()
        with watch.lock:
            bound = dict(watch.bound)
            unschedulable = set(watch.unschedulable)
        record.update(complete=complete, bound=len(bound), unschedulable=len(unschedulable),
                      scheduler_start_s=self.scheduler.healthy - self.scheduler.started,
                      load_after=loadavg(), nodes_used=len({n for _, n in bound.values()}))
        times = sorted(t for t, _ in bound.values())
        if len(times) >= 2 and times[-1] > times[0]:
            record["burst_s"] = times[-1] - times[0]
            record["pods_per_s"] = (len(times) - 1) / (times[-1] - times[0])
        if times:
            record["first_bind_after_healthy_s"] = times[0] - self.scheduler.healthy
        if not complete:
            record["timed_out_after_s"] = done - self.scheduler.healthy
        record["scheduler_errors"] = self.scheduler_errors()

        samples = self.scrape_scheduler()
        profile = {"profile": SCHEDULER_NAME}
        record["attempt"] = summarize(histogram(samples, "scheduler_scheduling_attempt_duration_seconds",
                                                result="scheduled", **profile))
        record["attempt_unschedulable"] = summarize(histogram(
            samples, "scheduler_scheduling_attempt_duration_seconds", result="unschedulable", **profile))
        record["algorithm"] = summarize(histogram(samples, "scheduler_scheduling_algorithm_duration_seconds"))
        record["attempts"] = {labels.get("result"): value for name, labels, value in samples
                              if name == "scheduler_schedule_attempts_total" and labels.get("profile") == SCHEDULER_NAME}
        record["extension_points"] = {
            "%s/%s" % (labels["extension_point"], labels["status"]): value for name, labels, value in samples
            if name == "scheduler_framework_extension_point_duration_seconds_count"}
        ext_points = {}
        for point in ("PreFilter", "Filter", "PreScore", "Score", "Reserve", "PreBind", "Bind"):
            h = histogram(samples, "scheduler_framework_extension_point_duration_seconds", extension_point=point,
                          **profile)
            if h["count"]:
                ext_points[point] = summarize(h)
        record["extension_point_time"] = ext_points
        # The framework's own plugins per attempt (PreFilter, Filter, PreScore, Score: what the
        # algorithm's time holds besides the extender's calls and the snapshot).
        framework = sum(histogram(samples, "scheduler_framework_extension_point_duration_seconds",
                                  extension_point=point, **profile)["sum"]
                        for point in ("PreFilter", "Filter", "PreScore", "Score"))
        algorithm_count = record["algorithm"]["count"]
        record["framework_ms_per_attempt"] = framework * 1000.0 / algorithm_count if algorithm_count else None
        # Each plugin's Filter per node (scheduler_plugin_execution_duration_seconds: sampled, a
        # tenth of the cycles), all statuses.
        plugins = {}
        for name, labels, value in samples:
            if labels.get("extension_point") != "Filter":
                continue
            for suffix in ("_sum", "_count"):
                if name == "scheduler_plugin_execution_duration_seconds" + suffix:
                    entry = plugins.setdefault(labels["plugin"], {"_sum": 0.0, "_count": 0.0})
                    entry[suffix] += value
        record["filter_ms_per_node"] = {p: e["_sum"] * 1000.0 / e["_count"] for p, e in plugins.items() if e["_count"]}
        record["extender_metrics_in_scheduler"] = sorted({name for name, _, _ in samples if "extender" in name})
        if self.extender:
            ext = self.scrape_extender()
            record["extender"] = {verb: summarize(histogram(ext, "kvgpu_scheduler_extender_request_seconds",
                                                            path="/" + verb)) for verb in EXTENDER_VERBS}
            record["extender_codes"] = {"%s %s" % (labels["path"], labels["code"]): value for name, labels, value in ext
                                        if name == "kvgpu_scheduler_extender_requests_total"}
            record["extender_refused_binds"] = self.refused_binds()
        log("%d nodes, %s: %d of %d bound, %d unschedulable, %s pods/s, attempt p50 %s ms p99 %s ms"
            % (self.size, mode, len(bound), len(types), len(unschedulable),
               "%.1f" % record["pods_per_s"] if "pods_per_s" in record else "-",
               fmt(record["attempt"]["p50_ms"]), fmt(record["attempt"]["p99_ms"])))

        self.scheduler.stop()
        self.scheduler = None
        if self.extender:
            self.extender.stop()
            self.extender = None
        # The mode's pods go (grace period 0: no kubelet would confirm their end).
        self.api.must("DELETE", "/api/v1/namespaces/%s/pods" % namespace,
                      {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        return record

    def scheduler_errors(self):
        """{error text, node names and numbers blanked: how often} of the attempts kube-scheduler
        logged as errors ("Error scheduling pod; retrying")."""
        out = {}
        try:
            with open(self.scheduler.log_path, errors="replace") as f:
                for line in f:
                    m = re.search(r'"Error scheduling pod; retrying" err="((?:[^"\\]|\\.)*)"', line)
                    if m:
                        text = re.sub(r"\d+", "N", m.group(1))[:300]
                        out[text] = out.get(text, 0) + 1
        except OSError:
            pass
        return out

    def refused_binds(self):
        try:
            with open(self.extender.log_path, errors="replace") as f:
                return sum(1 for line in f if " refused: " in line and "] bind " in line)
        except OSError:
            return None

    def run(self, modes, types):
        self.modes = modes
        self.result["load_before"] = loadavg()
        self.result["started"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        self.published_at = time.time()  # the states' publishedUnixMs: when the helper renders them
        self.make_nodes()
        self.start_plane()
        scheduler_kubeconfig = os.path.join(self.top, "scheduler.kubeconfig")
        self.cp.write_kubeconfig(scheduler_kubeconfig, self.cp.path("pki", "scheduler.crt"),
                                 self.cp.path("pki", "scheduler.key"))
        self.register_nodes()
        if "extender" in modes:
            self.pki = self.extender_pki()
        for mode in modes:
            if mode == "dra":
                if self.size > self.args.dra_max_nodes:
                    self.result["modes"]["dra"] = {"skipped": "more than --dra-max-nodes=%d nodes"
                                                   % self.args.dra_max_nodes}
                    continue
                self.cp.kubectl("apply", "-f", os.path.join(REPO, "deploy", "components", "dra", "device-classes.yaml"))
                self.publish_slices()
                self.start_claim_controller()
            try:
                self.result["modes"][mode] = self.run_mode(mode, types[:self.args.dra_pods] if mode == "dra" and
                                                           self.args.dra_pods else types)
            except controlplane.ControlPlaneError as e:
                log("%d nodes, %s: failed: %s" % (self.size, mode, e))
                self.result["modes"][mode] = {"failed": str(e)[:1000]}
                for p in (self.scheduler, self.extender):
                    if p is not None:
                        log("--- %s's log ends:\n%s" % (p.name, p.log_tail(20)))
                        p.stop()
                self.scheduler = self.extender = None
        self.result["load_after"] = loadavg()
        return self.result

    def stop(self):
        for p in (self.scheduler, self.extender, self.kcm):
            if p is not None:
                p.stop()
        if self.cp is not None:
            self.cp.stop()


def fmt(v, digits=1):
    return "-" if v is None else ("%%.%df" % digits) % v


def cmd_run(args):
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            raise SystemExit("unknown mode %s (%s)" % (m, ", ".join(MODES)))
    sizes = [int(s) for s in args.sizes.split(",") if s]
    types = burst_types(args.pods, args.seed)
    results = {"pods": args.pods, "seed": args.seed, "modes": modes, "sizes": [], "client_qps": args.client_qps}
    if os.path.exists(args.out):
        with open(args.out) as f:
            previous = json.load(f)
        if previous.get("pods") == args.pods and previous.get("seed") == args.seed:
            results = previous  # sizes measured before are kept unless measured again
    for size in sizes:
        top = tempfile.mkdtemp(prefix="kvgpu-sched-%d-" % size, dir=args.work)
        bench = Bench(args, size, top)
        started = time.monotonic()
        try:
            result = bench.run(modes, types)
        except BaseException:
            log("kept %s" % top)
            raise
        finally:
            bench.stop()
        result["total_s"] = time.monotonic() - started
        results["sizes"] = [r for r in results["sizes"] if r["nodes"] != size] + [result]
        results["sizes"].sort(key=lambda r: r["nodes"])
        with open(args.out + ".new", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(args.out + ".new", args.out)
        if args.keep:
            log("kept %s" % top)
        else:
            shutil.rmtree(top, ignore_errors=True)
        log("%d nodes: done in %.0f s" % (size, result["total_s"]))
    return 0


# --- the report --------------------------------------------------------------------------------

def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def pct(a, b):
    r = ratio(a, b)
    return "-" if r is None else "%+.0f %%" % ((r - 1) * 100)


def extender_call_ms(m):
    """The extender's own time per pod in the scheduling cycle: its filter's and prioritize's
    summed time over the scheduled pods (the calls of unschedulable attempts included)."""
    ext = m.get("extender") or {}
    pods = m.get("attempt", {}).get("count") or 0
    if not ext or not pods:
        return None
    return sum(ext[v]["sum_s"] for v in ("filter", "prioritize") if v in ext) * 1000.0 / pods


def per_pod_ms(m):
    """The scheduler's time per pod in the burst: 1 / pods/s."""
    v = m.get("pods_per_s")
    return 1000.0 / v if v else None


def outside_plugins_ms(m):
    """The algorithm's mean time per attempt less the framework's PreFilter, Filter, PreScore and
    Score: the snapshot, the extender's calls as kube-scheduler makes them (its JSON, TLS, the
    round trip, the answer read), choosing the node."""
    a, f = (m.get("algorithm") or {}).get("mean_ms"), m.get("framework_ms_per_attempt")
    return None if a is None or f is None else a - f


def report(results, env):
    sizes = results["sizes"]
    lines = []
    w = lines.append
    w("Command:")
    w("")
    w("    %s" % env.get("KV_COMMAND", "bash bench/peers/scheduler.sh"))
    w("")
    w("Run %s, commit %s, Kubernetes %s (kube-apiserver, etcd, kube-scheduler, kube-controller-manager "
      "built by tests/k8s/build-peers.sh), kvgpu-scheduler-extender %s. Machine: %s, %s cores; load average "
      "%s at the start, %s at the end. Bursts of pods of the 12 T4 types at random (seed %d), the same for "
      "each mode (the DRA burst the first of them where it is shorter)."
      % (env.get("KV_DATE", "?"), env.get("KV_COMMIT", "?"), env.get("KV_RELEASE", "?"),
         env.get("KV_BUILD_TYPE", "?"), env.get("KV_MODEL", "?"), env.get("KV_CORES", "?"),
         env.get("KV_LOAD_START", "?"), env.get("KV_LOAD_END", "?"), results["seed"]))
    qps = results.get("client_qps")
    w("kube-scheduler's client rate limit (clientConnection qps and burst): %s." % (
        "%d and %d in every mode (the defaults, 50 and 100, hold a burst's binds to 50 a second)" % (qps, qps)
        if qps else "the defaults, 50 and 100"))
    w("")
    w("![pods/s and kube-scheduler's attempt duration per mode and cluster size](images/bench-peers-scheduler.png)")
    w("")
    w("| nodes | mode | bound / pods | pods/s | ms per pod (1 / pods/s) | attempt p50 / p90 / p99 ms | attempt mean ms "
      "| algorithm p50 / p99 ms | algorithm mean ms | of which the framework's plugins ms | the rest ms "
      "| kube-scheduler CPU ms per pod | load before |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sizes:
        for mode in MODES:
            m = r["modes"].get(mode)
            if m is None:
                continue
            if "skipped" in m or "failed" in m:
                w("| %s | %s | %s | | | | | | | | | | |" % (format(r["nodes"], ","), mode,
                                                          "not run: " + m.get("skipped", "failed: " + m.get("failed", ""))[:200]))
                continue
            a, g = m["attempt"], m["algorithm"]
            cpu = m.get("scheduler_cpu_s")
            w("| %s | %s | %d / %d%s%s | %s | %s | %s / %s / %s | %s | %s / %s | %s | %s | %s | %s | %s |" % (
                format(r["nodes"], ","), mode, m["bound"], m["pods"],
                (", %d unschedulable" % m["unschedulable"]) if m["unschedulable"] else "",
                "" if m.get("complete", True) else ", the rest not placed within %.0f s" % m.get("timed_out_after_s", 0),
                fmt(m.get("pods_per_s")), fmt(per_pod_ms(m), 2), fmt(a["p50_ms"], 2), fmt(a["p90_ms"], 2),
                fmt(a["p99_ms"], 2), fmt(a["mean_ms"], 2), fmt(g["p50_ms"], 2), fmt(g["p99_ms"], 2), fmt(g["mean_ms"], 2),
                fmt(m.get("framework_ms_per_attempt"), 2), fmt(outside_plugins_ms(m), 2),
                fmt(cpu * 1000.0 / m["bound"] if cpu is not None and m["bound"] else None, 2),
                m.get("load_before", "?").split()[0]))
    w("")
    w("Ratios, extender against counts (what the extender adds to the real scheduler's per-pod time; the goal, at "
      "1,000 and 5,000 nodes: at most +10 %, judged on the time per pod in the burst):")
    w("")
    w("| nodes | ms per pod | algorithm mean | attempt p50 | attempt p99 | the extender's calls as kube-scheduler "
      "sees them, ms per attempt (the rest, less counts' rest) | share of the extender mode's algorithm | the "
      "extender's own filter + prioritize, ms per pod | share of the algorithm | DRA: ms per pod against counts "
      "| goal |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sizes:
        e, c, d = (r["modes"].get(k) or {} for k in ("extender", "counts", "dra"))
        if not all("attempt" in x for x in (e, c)):
            continue

        def share(part, whole):
            return "-" if part is None or not whole else "%.0f %%" % (100.0 * part / whole)
        seen = None
        if outside_plugins_ms(e) is not None and outside_plugins_ms(c) is not None:
            seen = outside_plugins_ms(e) - outside_plugins_ms(c)
        own = extender_call_ms(e)
        per_pod = ratio(per_pod_ms(e), per_pod_ms(c))
        goal = "-"
        if r["nodes"] >= 1000 and per_pod is not None:
            goal = "**met**" if per_pod <= 1.10 else "**missed** (%+.0f %%)" % ((per_pod - 1) * 100)
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            format(r["nodes"], ","), pct(per_pod_ms(e), per_pod_ms(c)),
            pct(e["algorithm"]["mean_ms"], c["algorithm"]["mean_ms"]),
            pct(e["attempt"]["p50_ms"], c["attempt"]["p50_ms"]), pct(e["attempt"]["p99_ms"], c["attempt"]["p99_ms"]),
            fmt(seen, 2), share(seen, e["algorithm"]["mean_ms"]), fmt(own, 2), share(own, e["algorithm"]["mean_ms"]),
            "%.1f×" % ratio(per_pod_ms(d), per_pod_ms(c)) if ratio(per_pod_ms(d), per_pod_ms(c)) else "-", goal))
    w("")
    w("The extender's own time per call (kvgpu_scheduler_extender_request_seconds: server side, from the "
      "request read to the answer written) and its CPU time:")
    w("")
    w("| nodes | filter calls | filter p50 / p99 / mean ms | prioritize calls | prioritize p50 / p99 / mean ms | bind "
      "calls | bind p50 / p99 / mean ms | binds refused (the ledger said no; kube-scheduler tries again) "
      "| extender CPU ms per pod | TCP connections kube-scheduler opened to it |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for r in sizes:
        e = r["modes"].get("extender") or {}
        if "extender" not in e:
            continue
        x = e["extender"]
        cpu = e.get("extender_cpu_s")
        w("| %s | %d | %s / %s / %s | %d | %s / %s / %s | %d | %s / %s / %s | %s | %s | %s |" % (
            format(r["nodes"], ","), x["filter"]["count"], fmt(x["filter"]["p50_ms"], 2), fmt(x["filter"]["p99_ms"], 2),
            fmt(x["filter"]["mean_ms"], 2), x["prioritize"]["count"], fmt(x["prioritize"]["p50_ms"], 2),
            fmt(x["prioritize"]["p99_ms"], 2), fmt(x["prioritize"]["mean_ms"], 2), x["bind"]["count"],
            fmt(x["bind"]["p50_ms"], 2), fmt(x["bind"]["p99_ms"], 2), fmt(x["bind"]["mean_ms"], 2),
            e.get("extender_refused_binds", "-"),
            fmt(cpu * 1000.0 / e["bound"] if cpu is not None and e["bound"] else None, 2),
            e.get("extender_connections", "-")))
    w("")
    w("Each Filter plugin's time per node (scheduler_plugin_execution_duration_seconds, which kube-scheduler "
      "samples in a tenth of the cycles; wall time, 16 nodes filtered in parallel on 2 cores):")
    w("")
    w("| nodes | mode | NodeResourcesFit ms | DynamicResources ms | TaintToleration ms |")
    w("|---|---|---|---|---|")
    for r in sizes:
        for mode in MODES:
            f = (r["modes"].get(mode) or {}).get("filter_ms_per_node")
            if f:
                w("| %s | %s | %s | %s | %s |" % (format(r["nodes"], ","), mode, fmt(f.get("NodeResourcesFit"), 3),
                                                 fmt(f.get("DynamicResources"), 3), fmt(f.get("TaintToleration"), 3)))
    w("")
    errors = [(r["nodes"], mode, text, n) for r in sizes for mode in MODES
              for text, n in sorted(((r["modes"].get(mode) or {}).get("scheduler_errors") or {}).items())]
    if errors:
        w("Attempts kube-scheduler ended with an error (its log, \"Error scheduling pod; retrying\"; numbers as N):")
        w("")
        w("| nodes | mode | error | attempts |")
        w("|---|---|---|---|")
        for nodes, mode, text, n in errors:
            w("| %s | %s | %s | %d |" % (format(nodes, ","), mode, text.replace("|", "\\|").replace('\\"', '"'), n))
        w("")
    w("Setting up (not measured): nodes computed by kvgpu-bench-scheduler-nodes, registered, and for DRA the "
      "ResourceSlices published:")
    w("")
    w("| nodes | measured from | load before | nodes computed s | registered s | ResourceSlices | their JSON MB "
      "| published s | the size's total s |")
    w("|---|---|---|---|---|---|---|---|---|")
    for r in sizes:
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            format(r["nodes"], ","), r.get("started", "-"), r.get("load_before", "-"), fmt(r.get("nodes_made_s")), fmt(r.get("register_s")),
            format(r["slices"], ",") if "slices" in r else "-",
            fmt(r["slice_bytes"] / 1e6) if "slice_bytes" in r else "-", fmt(r.get("slices_s")), fmt(r.get("total_s"), 0)))
    return "\n".join(lines) + "\n"


def plot_data(results):
    """gnuplot data: index 0 pods/s, index 1 attempt p50, index 2 attempt p99; one row per size,
    one column per mode (extender, counts, dra); '?' where not measured."""
    out = []
    for key in ("pods_per_s", "p50_ms", "p99_ms"):
        out.append("# %s: nodes extender counts dra" % key)
        for r in results["sizes"]:
            row = [format(r["nodes"], ",")]
            for mode in MODES:
                m = r["modes"].get(mode) or {}
                v = m.get(key) if key == "pods_per_s" else (m.get("attempt") or {}).get(key)
                row.append("?" if v is None else "%.3f" % v)
            out.append(" ".join('"%s"' % row[0] if i == 0 else c for i, c in enumerate(row)))
        out.append("")
        out.append("")
    return "\n".join(out)


def cmd_report(args):
    with open(args.results) as f:
        results = json.load(f)
    with open(args.section, "w") as f:
        f.write(report(results, os.environ))
    with open(args.plot, "w") as f:
        f.write(plot_data(results))
    return 0


# --- unit checks of the pieces -----------------------------------------------------------------

def cmd_selftest(_args):
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
        print("%s: %s" % ("ok" if ok else "FAIL", what))

    text = """# HELP scheduler_scheduling_attempt_duration_seconds x
# TYPE scheduler_scheduling_attempt_duration_seconds histogram
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.001"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.002"} 10
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.004"} 90
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.008"} 100
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="+Inf"} 100
scheduler_scheduling_attempt_duration_seconds_sum{profile="p",result="scheduled"} 0.3
scheduler_scheduling_attempt_duration_seconds_count{profile="p",result="scheduled"} 100
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="unschedulable",le="0.001"} 5
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="unschedulable",le="+Inf"} 7
kvgpu_scheduler_extender_request_seconds_bucket{path="/filter",le="0.0001"} 1
kvgpu_scheduler_extender_request_seconds_bucket{path="/filter",le="+Inf"} 2
"""
    samples = parse_metrics(text)
    h = histogram(samples, "scheduler_scheduling_attempt_duration_seconds", result="scheduled", profile="p")
    check(h["count"] == 100 and abs(h["sum"] - 0.3) < 1e-9 and len(h["buckets"]) == 5, "a histogram is read by its labels")
    # rank 50 falls in (0.002, 0.004]: 10 below, 80 in it -> 0.002 + 0.002 * 40/80 = 0.003
    check(abs(quantile(0.5, h["buckets"]) - 0.003) < 1e-12, "p50 interpolates inside its bucket")
    # rank 99 in (0.004, 0.008]: 90 below, 10 in it -> 0.004 + 0.004 * 9/10 = 0.0076
    check(abs(quantile(0.99, h["buckets"]) - 0.0076) < 1e-12, "p99 interpolates inside its bucket")
    # rank 5 in the first populated bucket (0.001, 0.002]: 0.001 + 0.001 * 5/10
    check(abs(quantile(0.05, h["buckets"]) - 0.0015) < 1e-12, "a low rank takes the previous bucket's bound")
    u = histogram(samples, "scheduler_scheduling_attempt_duration_seconds", result="unschedulable")
    check(quantile(0.99, u["buckets"]) == 0.001, "a rank in +Inf gives the highest finite bound")
    first = [(0.001, 4.0), (float("inf"), 4.0)]
    check(abs(quantile(0.5, first) - 0.0005) < 1e-12, "the first bucket starts at 0")
    check(quantile(0.5, []) is None and quantile(0.5, [(float("inf"), 0.0)]) is None, "no observations: none")
    f = histogram(samples, "kvgpu_scheduler_extender_request_seconds", path="/filter")
    check(f["buckets"] == [(0.0001, 1.0), (float("inf"), 2.0)], "the extender's histogram by path")
    s = summarize(h)
    check(abs(s["mean_ms"] - 3.0) < 1e-9 and abs(s["p50_ms"] - 3.0) < 1e-9, "summarize gives milliseconds")

    types = burst_types(300, 1)
    check(types == burst_types(300, 1) and set(types) <= set(T4_TYPES) and len(set(types)) == 12,
          "the burst's types: the same for a seed, all 12 T4 types")
    pod = pod_object("burst-0", "ns", "230", "counts")
    check(pod["spec"]["containers"][0]["resources"] == {"limits": {"tencent.com/vgpu-230": "1"}} and
          pod["spec"]["schedulerName"] == SCHEDULER_NAME, "a counts / extender pod asks for its type's resource")
    dpod = pod_object("burst-0", "ns", "230", "dra")
    check(dpod["spec"]["resourceClaims"] == [{"name": "vgpu", "resourceClaimTemplateName": "vgpu-230"}] and
          dpod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "vgpu"}]} and
          "limits" not in dpod["spec"]["containers"][0]["resources"], "a DRA pod names its claim template, no limit")
    tmpl = claim_template("ns", "230")
    check(tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "vgpu-230.vgpu.tencent.com",
          "the template's class is the shipped DeviceClass of the type")
    with open(os.path.join(REPO, "deploy", "components", "dra", "device-classes.yaml")) as fh:
        classes = fh.read()
    check(all("name: vgpu-%s.vgpu.tencent.com" % t in classes for t in T4_TYPES),
          "deploy/components/dra has a DeviceClass for every T4 type")
    node = node_object({"name": "gpu-node-1", "allocatable": {"tencent.com/vgpu-230": "3"},
                        "annotations": {STATE_ANNOTATION: "{}"}})
    check(node["status"]["allocatable"]["tencent.com/vgpu-230"] == "3" and node["status"]["allocatable"]["pods"] == "110"
          and node["metadata"]["annotations"] == {STATE_ANNOTATION: "{}"}, "a Node carries its counts and its state")
    with open(os.path.join(REPO, "deploy", "scheduler", "kube-scheduler-config.yaml")) as fh:
        shipped = fh.read()
    cfg = shipped_config_with_extender(shipped, "https://127.0.0.1:1234", {"caData": "Q0E=", "certData": "Q0U=",
                                                                          "keyData": "S0U="}, "/k")
    added = [l for l in cfg.splitlines() if l not in shipped.splitlines()]
    check(sorted(added) == sorted(["- urlPrefix: https://127.0.0.1:1234", "    caData: Q0E=",
                                   "    certData: Q0U=", "    keyData: S0U=", "clientConnection:", "  kubeconfig: /k",
                                   "leaderElection:", "  leaderElect: false"]),
          "the shipped config changes only in the URL, the TLS data, clientConnection and leaderElection: %s" % added)
    check(all(t in shipped for t in ("nodeCacheCapable: true", "bindVerb: bind", "managedResources")) and
          all("name: tencent.com/vgpu-%s\n" % t in shipped for t in T4_TYPES),
          "the shipped config is nodeCacheCapable, binds, and manages every T4 type")
    cfg = shipped_config_with_extender(shipped, "https://x", {"caData": "a", "certData": "b", "keyData": "c"}, "/k", 1000)
    check(cfg.endswith("clientConnection:\n  kubeconfig: /k\n  qps: 1000\n  burst: 1000\nleaderElection:\n  leaderElect: false\n")
          and "qps" not in plain_config("/k") and "  burst: 7\n" in plain_config("/k", 7),
          "the client's rate limit is set where asked, both qps and burst")
    check("extenders" not in plain_config("/k") and SCHEDULER_NAME in plain_config("/k"),
          "the counts and DRA modes have the same profile and no extender")

    results = {"pods": 4, "seed": 1, "modes": MODES, "sizes": [{"nodes": 1000, "modes": {
        "extender": {"pods": 4, "bound": 4, "unschedulable": 0, "pods_per_s": 50.0, "load_before": "1.0 1 1",
                     "scheduler_cpu_s": 0.04, "extender_cpu_s": 0.02, "extender_refused_binds": 0,
                     "attempt": {"count": 4, "p50_ms": 11.0, "p90_ms": 12.0, "p99_ms": 13.0, "mean_ms": 11.0, "sum_s": 0.044},
                     "algorithm": {"count": 4, "p50_ms": 5.0, "p99_ms": 6.0, "mean_ms": 5.0, "sum_s": 0.02},
                     "extender": {v: {"count": 4, "p50_ms": 0.5, "p99_ms": 1.0, "mean_ms": 0.5, "sum_s": 0.002}
                                  for v in EXTENDER_VERBS}},
        "counts": {"pods": 4, "bound": 4, "unschedulable": 0, "pods_per_s": 100.0, "load_before": "1.0 1 1",
                   "scheduler_cpu_s": 0.02,
                   "attempt": {"count": 4, "p50_ms": 10.0, "p90_ms": 11.0, "p99_ms": 12.0, "mean_ms": 10.0, "sum_s": 0.04},
                   "algorithm": {"count": 4, "p50_ms": 4.0, "p99_ms": 5.0, "mean_ms": 4.0, "sum_s": 0.016}},
        "dra": {"skipped": "more than --dra-max-nodes=10 nodes"}}}]}
    results["sizes"][0]["modes"]["extender"]["framework_ms_per_attempt"] = 1.0
    results["sizes"][0]["modes"]["counts"]["framework_ms_per_attempt"] = 1.0
    md = report(results, {"KV_DATE": "d"})
    row = [l for l in md.splitlines() if l.startswith("| 1,000 | +100 %")]
    check(row == ["| 1,000 | +100 % | +25 % | +10 % | +8 % | 1.00 | 20 % | 1.00 | 20 % | - | **missed** (+100 %) |"],
          "the ratio row: 20 ms a pod against 10, the extender's 1 ms a pod 20 %% of 5 ms: %s" % row)
    check("| 1,000 | dra | not run: more than --dra-max-nodes=10 nodes |" in md, "a skipped mode says why")
    check(extender_call_ms(results["sizes"][0]["modes"]["extender"]) == 1.0, "filter + prioritize per scheduled pod")
    data = plot_data(results)
    check('"1,000" 50.000 100.000 ?' in data and '"1,000" 11.000 10.000 ?' in data, "the plot's rows: %s" % data)
    print("%d failed" % len(failures) if failures else "all passed")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--bin-dir", required=True)
    run.add_argument("--extender", required=True)
    run.add_argument("--nodes-bin", required=True)
    run.add_argument("--out", required=True)
    run.add_argument("--sizes", default="100,1000,5000")
    run.add_argument("--modes", default=",".join(MODES))
    run.add_argument("--pods", type=int, default=300)
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--timeout", type=float, default=300.0, help="seconds a burst may take")
    run.add_argument("--dra-max-nodes", type=int, default=1 << 30)
    run.add_argument("--client-qps", type=int, default=0,
                     help="kube-scheduler's clientConnection qps and burst (0: its defaults, 50 and 100)")
    run.add_argument("--dra-timeout", type=float, default=0.0, help="seconds the DRA burst may take (0: --timeout)")
    run.add_argument("--dra-pods", type=int, default=0, help="pods of the DRA burst (0: --pods), the first of the same")
    run.add_argument("--work", default=None)
    run.add_argument("--keep", action="store_true")
    rep = sub.add_parser("report")
    rep.add_argument("results")
    rep.add_argument("section")
    rep.add_argument("plot")
    sub.add_parser("selftest")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return {"run": cmd_run, "report": cmd_report, "selftest": cmd_selftest}[args.command](args)
    except controlplane.ControlPlaneError as e:
        log(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
