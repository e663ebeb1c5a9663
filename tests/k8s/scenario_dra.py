#!/usr/bin/python3
"""Scenario 4 (DRA), against the real control plane of one pinned release.

Two simulated nodes, each a `kvgpu-sim` FUSE mount (the kernel model of docs/simulator.md) with
this build's `kvgpu-device-plugin` in DRA mode on it: `strict` (profile t4x2: one vGPU type per
GPU) and `equal` (t4x2-equal-size: one framebuffer size per GPU). The Nodes are registered
without kubelets (controlplane.register_node); each daemon runs with the config of
deploy/overlays/dra's ConfigMap (the node's paths changed: CDI directory, no host udev; and on
`equal` the known lock set, NODE_CONFIG) and the token kubelet would project into the DaemonSet's
pod on that node (ServiceAccount kvgpu-device-plugin, bound to the pod), under the overlay's
RBAC, so a rule the daemon needs and the overlay lacks fails the run. The test plays kubelet's part on each node: it
registers the plugin over its registration socket and calls NodePrepareResources over the
plugin's gRPC socket (v1) for every claim the real scheduler allocated to a pod bound there.

Then:
  - each node's ResourceSlices are accepted by the real API server: one complete pool named as
    the node, every device with the binding conditions, and KEP-5963 compatibility groups exactly
    where the API server keeps them (1.37 with DRADeviceCompatibilityGroups on, both in the API
    server and kube-scheduler: the groups of docs/dra.md's table; 1.36: none);
  - pods asking `tencent.com/vgpu-<type>` (DeviceClass extendedResourceName) and pods with a
    ResourceClaimTemplate (claims made by kube-controller-manager) of several types, more than
    the GPUs' locks can hold, all created at once, are scheduled by the real kube-scheduler;
  - every allocation went through the daemon's binding condition (OccupancyConfirmed=True in the
    claim's status.devices before the pod bound);
  - no GPU is allocated two lock keys (types on `strict`, framebuffer sizes on `equal`), counted
    from the claims' allocations and again from the simulated kernel's vGPUs;
  - kubelet's NodePrepareResources succeeds for every allocated claim and the simulated kernel
    holds the vGPU of the allocated type on the allocated GPU, one per allocated device;
  - no pod waits whose type the kernel could still create on a GPU of its node, and on `strict`
    exactly two types are bound (two GPUs);
  - the daemons' logs show no request the API server refused (403).
On 1.37 a second API server with the gate off: the same daemon's slices are accepted with the
field dropped, the daemon publishes without groups (its gauge says 0) and does not rewrite its
pool for ever.

usage: scenario_dra.py --release 1.36 --plugin kvgpu-device-plugin --sim kvgpu-sim [--bite]
  --bite: instead, the same checks twice against a broken node (BITES), each on a fresh control
  plane: a daemon whose config says the strict T4s are equal-size, so it confirms three 1 GiB
  types on two GPUs (the lock check on the allocations and kubelet's prepares must fail, the
  slices and the other node still pass); the overlay's RBAC without the claims role's
  resourceclaims/driver rule (the confirmations and the check on refused requests must fail, the
  slices still pass).
Exit status 0 when every check passed, 1 otherwise, 77 (skipped) only when the release's programs
are not built and Go is not installed, or FUSE cannot be used here (kvgpu-sim exits 3).
"""
import argparse
import contextlib
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "deploy"))
sys.path.insert(0, os.path.join(REPO, "proto", "kubelet"))

import check_deploy  # noqa: E402
import controlplane  # noqa: E402
import messages  # noqa: E402
import yaml  # noqa: E402

DRIVER = "vgpu.tencent.com"
NAMESPACE = "kata-vgpu"
ACCOUNT = "kvgpu-device-plugin"
TENANT = "tenant-a"
GROUPS_GATE = "DRADeviceCompatibilityGroups"
DEADLINE = 240.0  # for what happens asynchronously: slices published, pods scheduled
SETTLED_FOR = 10.0  # the scheduler's view unchanged this long counts as settled
PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
GET_INFO = "/pluginregistration.Registration/GetInfo"
NOTIFY = "/pluginregistration.Registration/NotifyRegistrationStatus"

# (node, kvgpu-sim profile, what locks a GPU, pods: (type, how it asks, count)). `strict` asks
# for three 1 GiB types on two GPUs: two can be held, a third only by breaking the lock.
NODES = [
    ("strict", "t4x2", "type", [("nvidia-230", "extended", 2), ("nvidia-222", "template", 2),
                                ("nvidia-225", "extended", 2)]),
    ("equal", "t4x2-equal-size", "framebuffer", [("nvidia-230", "extended", 2), ("nvidia-222", "template", 2),
                                                 ("nvidia-231", "template", 2)]),
]
# What each node's config sets beyond the shipped one. The shipped `occupancyMode: auto` reads a
# free GPU whose mode no probe tells as strict until it carries a vGPU (docs/dra.md, "Occupancy:
# compatibility groups"): on the equal-size node a first claim's type would then keep other
# types of its size off its GPU while it lives, so a pod the kernel could take might wait. The
# docs tell operators who know their driver's lock to set it; this node does, with
# `schedulerState.version: 2`, without which the shipped `schedulerState.publish: true` keeps
# every GPU on the per-type lock whatever occupancyMode says (docs/configuration.md).
NODE_CONFIG = {"equal": {"occupancyMode": "equal-size", "schedulerState": {"version": 2}}}


class Skip(Exception):
    pass


def load_protos():
    """The DRA v1 and plugin registration messages (proto/kubelet/messages.py)."""
    return {name: messages.load(name) for name in ("dra_v1", "registration_v1")}


class SimNode:
    """kvgpu-sim mounted for one node, the daemon on it, and kubelet's calls to it."""

    def __init__(self, cp, workdir, name, profile, lock, sim_bin, plugin_bin, token, config_text, protos):
        self.cp, self.name, self.profile, self.lock = cp, name, profile, lock
        self.dir = os.path.join(workdir, name)
        self.mount = os.path.join(self.dir, "mnt")
        self.kubelet_dir = os.path.join(self.dir, "kubelet")
        os.makedirs(self.mount)
        os.makedirs(self.kubelet_dir)
        self.sim_bin, self.plugin_bin = sim_bin, plugin_bin
        self.protos = protos
        self.sim = self.daemon = self.channel = None
        self.metrics_port = controlplane._free_ports(1)[0]
        config = yaml.safe_load(config_text)
        for key, value in NODE_CONFIG.get(name, {}).items():
            config[key] = dict(config.get(key) or {}, **value) if isinstance(value, dict) else value
        # The node's own paths: CDI specs in its directory, no host udev (the model emits none).
        config.setdefault("cdi", {})["dir"] = os.path.join(self.dir, "cdi")
        config["udevEvents"] = False
        self.config_path = os.path.join(self.dir, "config.yaml")
        with open(self.config_path, "w") as f:
            yaml.safe_dump(config, f)
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        cp.write_token_kubeconfig(self.kubeconfig, token, NAMESPACE)

    def start(self):
        self.sim = controlplane._Process("kvgpu-sim " + self.name, [
            self.sim_bin, "--profile", self.profile, "--mount", self.mount, "--quiet"],
            os.path.join(self.dir, "kvgpu-sim.log"))
        state = os.path.join(self.mount, "sim", "state")
        end = time.monotonic() + 60
        while not os.path.exists(state):
            if not self.sim.alive():
                if self.sim.popen.returncode == 3:
                    raise Skip("FUSE is not usable here: " + self.sim.log_tail())
                raise controlplane.ControlPlaneError("kvgpu-sim exited: " + self.sim.log_tail())
            if time.monotonic() > end:
                raise controlplane.ControlPlaneError("kvgpu-sim did not mount in 60 s")
            time.sleep(0.1)
        self.daemon = controlplane._Process("kvgpu-device-plugin " + self.name, [
            self.plugin_bin, "--sysfs-root", self.mount, "--kubelet-dir", self.kubelet_dir,
            "--state-dir", os.path.join(self.dir, "state"), "--node-name", self.name,
            "--config", self.config_path, "--kubeconfig", self.kubeconfig,
            "--metrics-addr", "127.0.0.1:%d" % self.metrics_port], os.path.join(self.dir, "daemon.log"))

    def register(self):
        """kubelet's plugin watcher: GetInfo on the registration socket, then the status."""
        import grpc
        reg = self.protos["registration_v1"]
        socket = os.path.join(self.kubelet_dir, "plugins_registry", DRIVER + "-reg.sock")
        end = time.monotonic() + DEADLINE
        while not os.path.exists(socket):
            if not self.daemon.alive() or time.monotonic() > end:
                raise controlplane.ControlPlaneError("%s: no registration socket %s; the daemon's log ends:\n%s"
                                                     % (self.name, socket, self.daemon.log_tail()))
            time.sleep(0.2)
        with grpc.insecure_channel("unix://" + socket) as channel:
            info = channel.unary_unary(GET_INFO, request_serializer=reg.InfoRequest.SerializeToString,
                                       response_deserializer=reg.PluginInfo.FromString)(reg.InfoRequest(), timeout=30)
            channel.unary_unary(NOTIFY, request_serializer=reg.RegistrationStatus.SerializeToString,
                                response_deserializer=reg.RegistrationStatusResponse.FromString)(
                reg.RegistrationStatus(plugin_registered=True), timeout=30)
        self.channel = grpc.insecure_channel("unix://" + info.endpoint)
        return info

    def prepare(self, claim):
        """NodePrepareResources of one claim: (devices, error)."""
        dra = self.protos["dra_v1"]
        call = self.channel.unary_unary(PREPARE, request_serializer=dra.NodePrepareResourcesRequest.SerializeToString,
                                        response_deserializer=dra.NodePrepareResourcesResponse.FromString)
        meta = claim["metadata"]
        request = dra.NodePrepareResourcesRequest(claims=[dra.Claim(namespace=meta["namespace"], uid=meta["uid"],
                                                                    name=meta["name"])])
        answer = call(request, timeout=60).claims[meta["uid"]]
        return [d.device_name for d in answer.devices], answer.error

    def vgpus(self):
        """The simulated kernel's vGPUs: [(id, parent, type)]."""
        with open(os.path.join(self.mount, "sim", "state")) as f:
            return [tuple(line.split()[1:4]) for line in f if line.startswith("vgpu ")]

    def available(self, gpu, vgpu_type):
        path = os.path.join(self.mount, "sys", "class", "mdev_bus", gpu, "mdev_supported_types", vgpu_type,
                            "available_instances")
        try:
            with open(path) as f:
                return int(f.read().strip())
        except OSError:
            return 0

    def gpus(self):
        with open(os.path.join(self.mount, "sim", "state")) as f:
            return [line.split()[1] for line in f if line.startswith("gpu ") and line.split()[2] == "present"]

    def metric(self, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        return None

    def refused_requests(self):
        return self.daemon.refused_calls()

    def stop(self):
        if self.channel:
            self.channel.close()
        if self.daemon:
            self.daemon.stop()
        if self.sim:
            self.sim.stop()
        if os.path.ismount(self.mount):
            subprocess.run(["fusermount3", "-u", "-z", self.mount], capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.mount)


def list_items(cp, path):
    status, answer = cp.request("GET", path)
    if status != 200:
        raise controlplane.ControlPlaneError("GET %s: HTTP %d %s" % (path, status, answer))
    return answer["items"]


def node_slices(cp, node):
    selector = urllib.parse.quote("spec.nodeName=%s,spec.driver=%s" % (node, DRIVER))
    return list_items(cp, "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" + selector)


def complete_pool(slices):
    """The slices of the pool's highest generation when it is complete, else None."""
    if not slices:
        return None
    generation = max(s["spec"]["pool"]["generation"] for s in slices)
    current = [s for s in slices if s["spec"]["pool"]["generation"] == generation]
    if len(current) != current[0]["spec"]["pool"]["resourceSliceCount"]:
        return None
    return current


def devices_of(pool):
    """{device name: (physicalGpu, type, framebuffer quantity, device)} of a pool's slices."""
    out = {}
    for s in pool:
        for d in s["spec"].get("devices") or []:
            attrs = d.get("attributes", {})
            fb = (d.get("capacity", {}).get("framebuffer") or {}).get("value")
            out[d["name"]] = (attrs.get("physicalGpu", {}).get("string"), attrs.get("type", {}).get("string"), fb, d)
    return out


class Scenario:
    def __init__(self, cp, report, workdir, args, protos, groups_expected, broken=None, broken_objects=None,
                 deadline=DEADLINE):
        self.cp, self.report, self.dir, self.args, self.protos = cp, report, workdir, args, protos
        self.groups_expected = groups_expected
        self.broken = broken
        self.broken_objects = broken_objects
        self.deadline = deadline
        self.nodes = {}
        self.devices = {}  # node -> devices_of(its pool), as first published

    def render(self):
        with check_deploy.scratch_deploy(self.args.deploy) as deploy:
            objects, error = check_deploy.render(os.path.join(self.cp.bin_dir, "kubectl"),
                                                 os.path.join(deploy, "overlays", "dra"))
        if objects is None:
            raise controlplane.ControlPlaneError("overlays/dra does not render: %s" % error)
        return objects

    def setup(self, node_specs):
        objects = self.render()
        kinds = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                 "DeviceClass")
        setup = [o for o in objects if o["kind"] in kinds]
        if self.broken_objects:
            setup = self.broken_objects(setup)
        setup += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT}}]
        self.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(setup))
        config_text = check_deploy.one(objects, "ConfigMap", "kvgpu-device-plugin-config")["data"]["config.yaml"]
        daemonset = check_deploy.one(objects, "DaemonSet", "kvgpu-device-plugin")
        for name, profile, lock, _ in node_specs:
            self.cp.register_node(name)
            token = self.daemon_pod_token(daemonset, name)
            text = self.broken(name, config_text) if self.broken else config_text
            node = SimNode(self.cp, self.dir, name, profile, lock, self.args.sim, self.args.plugin, token, text,
                           self.protos)
            self.nodes[name] = node
            node.start()
        for node in self.nodes.values():
            info = node.register()
            self.report.check(info.name == DRIVER and "v1.DRAPlugin" in info.supported_versions,
                              "%s: the plugin registers as kubelet expects (%s, %s)"
                              % (node.name, info.name, list(info.supported_versions)))

    def daemon_pod_token(self, daemonset, node):
        """The token kubelet would project into the DaemonSet's pod on `node`: the pod (its
        template as shipped, bound to the node; no kubelet runs it) and a token of its
        ServiceAccount bound to it. The API server reads the node from such a token, which the
        node-aware verb of the claims role (`associated-node:patch` on resourceclaims/driver)
        needs: with a token bound to nothing it asks for `arbitrary-node:patch` instead."""
        template = daemonset["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "kvgpu-device-plugin-" + node, "namespace": NAMESPACE,
                            "labels": template["metadata"].get("labels", {})},
               "spec": dict(copy.deepcopy(template["spec"]), nodeName=node)}
        status, answer = self.cp.request("POST", "/api/v1/namespaces/%s/pods" % NAMESPACE, pod)
        if status != 201:
            raise controlplane.ControlPlaneError("creating the daemon's pod on %s: HTTP %d %s" % (node, status, answer))
        account = answer["spec"]["serviceAccountName"]
        self.report.check(account == ACCOUNT, "%s: the DaemonSet's pod runs as ServiceAccount %s" % (node, account))
        return self.cp.kubectl("create", "token", account, "-n", NAMESPACE, "--duration", "2h",
                               "--bound-object-kind", "Pod", "--bound-object-name", answer["metadata"]["name"],
                               "--bound-object-uid", answer["metadata"]["uid"]).stdout.strip()

    def wait_for(self, what, ready, deadline=None):
        return controlplane.wait_until(ready, deadline or self.deadline, [n.daemon for n in self.nodes.values()])

    # --- the slices ---------------------------------------------------------------------------

    def check_slices(self):
        r = self.report
        for node in self.nodes.values():
            pool = self.wait_for("%s's pool" % node.name, lambda: complete_pool(node_slices(self.cp, node.name)))
            if not r.check(pool is not None, "%s: the daemon's ResourceSlices are accepted: a complete pool"
                           % node.name, json.dumps(node_slices(self.cp, node.name))[:2000]):
                continue
            r.check(all(s["spec"]["pool"]["name"] == node.name and
                        any(o.get("kind") == "Node" and o.get("name") == node.name
                            for o in s["metadata"].get("ownerReferences", [])) for s in pool),
                    "%s: the pool is named as the node and each slice is owned by its Node" % node.name)
            devices = devices_of(pool)
            self.devices[node.name] = devices
            gpus = {g for g, _, _, _ in devices.values()}
            r.check(len(devices) > 0 and gpus == set(node.gpus()),
                    "%s: devices of every GPU of the node (%d devices, GPUs %s)"
                    % (node.name, len(devices), sorted(gpus)))
            r.check(any(s["spec"].get("sharedCounters") for s in pool) and
                    all(d.get("consumesCounters") for _, _, _, d in devices.values()),
                    "%s: counter sets kept and every device consumes from them" % node.name)
            r.check(all(d.get("bindingConditions") == ["OccupancyConfirmed"] and
                        d.get("bindingFailureConditions") == ["OccupancyConflict"] for _, _, _, d in devices.values()),
                    "%s: every device carries the binding conditions (kept by the API server)" % node.name)
            wrong = []
            for name, (_, vgpu_type, fb, d) in devices.items():
                groups = [g for c in d["consumesCounters"] for g in c.get("compatibilityGroups") or []]
                if self.groups_expected:
                    mib = quantity_mib(fb)
                    want = ["type-" + vgpu_type] if node.lock == "type" else ["framebuffer-%dmib" % mib, "type-" + vgpu_type]
                else:
                    want = []
                if sorted(groups) != sorted(want):
                    wrong.append("%s: %s (want %s)" % (name, groups, want))
            r.check(not wrong, "%s: compatibility groups %s" % (
                node.name, "as docs/dra.md's table says (the gate on)" if self.groups_expected else "absent"),
                "; ".join(wrong[:5]))
            gauge = self.wait_for("the gauge", lambda: node.metric("kvgpu_deviceplugin_dra_compatibility_groups")
                                  is not None and node.metric("kvgpu_deviceplugin_dra_compatibility_groups"), 30) \
                if self.groups_expected else node.metric("kvgpu_deviceplugin_dra_compatibility_groups")
            r.check(bool(gauge) == self.groups_expected,
                    "%s: the daemon's gauge says it publishes %s groups" % (node.name, "with" if self.groups_expected
                                                                            else "without"), str(gauge))

    # --- the workload -------------------------------------------------------------------------

    def create_workload(self, node_specs):
        templates, pods = [], []
        types = sorted({t for _, _, _, asks in node_specs for t, how, _ in asks if how == "template"})
        for t in types:
            templates.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                              "metadata": {"name": "vgpu-" + t.split("-")[-1], "namespace": TENANT},
                              "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                                  "deviceClassName": "vgpu-%s.%s" % (t.split("-")[-1], DRIVER)}}]}}}})
        self.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(templates))
        self.want = {}  # pod name -> (node, type)
        for node, _, _, asks in node_specs:
            for vgpu_type, how, count in asks:
                number = vgpu_type.split("-")[-1]
                for i in range(count):
                    name = "%s-%s-%s-%d" % (node, number, how, i)
                    container = {"name": "main", "image": "x"}
                    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}
                    if how == "extended":
                        container["resources"] = {"limits": {"tencent.com/vgpu-" + number: "1"}}
                    else:
                        container["resources"] = {"claims": [{"name": "gpu"}]}
                        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "vgpu-" + number}]
                    pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT},
                                 "spec": spec})
                    self.want[name] = (node, vgpu_type)
        # All at once: more types than the GPUs' locks can hold, allocated concurrently.
        self.cp.kubectl("create", "-f", "-", input=yaml.safe_dump_all(pods))

    def snapshot(self):
        pods = {p["metadata"]["name"]: p for p in list_items(self.cp, "/api/v1/namespaces/%s/pods" % TENANT)}
        claims = list_items(self.cp, "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % TENANT)
        return pods, claims

    def settled(self):
        """(pods, claims) once every pod is bound or unschedulable, no claim is allocated to an
        unbound pod, and that has held for SETTLED_FOR seconds; else None."""
        pods, claims = self.snapshot()
        by_uid = {p["metadata"]["uid"]: p for p in pods.values()}
        for c in claims:
            for ref in (c.get("status") or {}).get("reservedFor") or []:
                p = by_uid.get(ref.get("uid"))
                if p is not None and not p["spec"].get("nodeName"):
                    self.stable_since = None
                    return None
        state = []
        for name, p in sorted(pods.items()):
            if p["spec"].get("nodeName"):
                state.append((name, "bound", p["spec"]["nodeName"]))
                continue
            scheduled = next((c for c in p.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), {})
            if scheduled.get("status") != "False" or scheduled.get("reason") != "Unschedulable":
                self.stable_since = None
                return None
            state.append((name, "unschedulable"))
        if len(pods) != len(self.want):
            return None
        if getattr(self, "last_state", None) != state or self.stable_since is None:
            self.last_state = state
            self.stable_since = time.monotonic()
            return None
        if time.monotonic() - self.stable_since < SETTLED_FOR:
            return None
        return pods, claims

    def run(self, node_specs):
        r = self.report
        self.create_workload(node_specs)
        self.stable_since = None
        started = time.monotonic()
        got = self.wait_for("the scheduler settles", self.settled)
        if not r.check(got is not None, "the real kube-scheduler settles: every pod bound or unschedulable",
                       json.dumps(self.last_state if hasattr(self, "last_state") else None)):
            got = self.snapshot()
        else:
            print("settled %.1f s after the pods were created" % (time.monotonic() - started - SETTLED_FOR))
        pods, claims = got
        by_uid = {p["metadata"]["uid"]: p for p in pods.values()}
        ours = []  # (pod, claim, [(device, gpu, type, fb)])
        for c in claims:
            alloc = (c.get("status") or {}).get("allocation")
            if not alloc:
                continue
            holder = next((by_uid[ref["uid"]] for ref in c["status"].get("reservedFor") or [] if ref.get("uid") in by_uid),
                          None)
            results = [x for x in alloc["devices"]["results"] if x["driver"] == DRIVER]
            if holder is None or not holder["spec"].get("nodeName") or not results:
                continue
            node = holder["spec"].get("nodeName")
            devices = []
            for x in results:
                gpu, vgpu_type, fb, _ = self.devices.get(node, {}).get(x["device"], (None, None, None, None))
                devices.append((x, gpu, vgpu_type, fb))
            ours.append((holder, c, devices))

        bound = {n: p for n, p in pods.items() if p["spec"].get("nodeName")}
        r.check(len(bound) > 0, "pods are bound (%d of %d)" % (len(bound), len(pods)))
        for name, p in sorted(bound.items()):
            node, vgpu_type = self.want[name]
            held = [d for holder, _, devices in ours if holder["metadata"]["name"] == name for d in devices]
            r.check(p["spec"]["nodeName"] == node and len(held) == 1 and held[0][2] == vgpu_type and
                    held[0][0]["pool"] == node,
                    "%s: bound to %s with one allocated %s device of its pool" % (name, node, vgpu_type),
                    "%s %s" % (p["spec"]["nodeName"], [(x["pool"], x["device"], t) for x, _, t, _ in held]))
        extended = [(holder, c) for holder, c, _ in ours if "-extended-" in holder["metadata"]["name"]]
        # The shape fakes/dra_allocator's SchedulerModel writes (scheduler.h), held to the real one.
        odd = [json.dumps({"name": c["metadata"]["name"], "annotations": c["metadata"].get("annotations"),
                           "owners": c["metadata"].get("ownerReferences"), "requests": c["spec"]["devices"]["requests"]})
               for holder, c in extended
               if not (c["metadata"].get("generateName") == holder["metadata"]["name"] + "-extended-resources-"
                       and (c["metadata"].get("annotations") or {}).get("resource.kubernetes.io/extended-resource-claim")
                       == "true"
                       and [(o.get("kind"), o.get("name"), o.get("controller")) for o in
                            c["metadata"].get("ownerReferences", [])] == [("Pod", holder["metadata"]["name"], True)]
                       and [q["name"] for q in c["spec"]["devices"]["requests"]] == ["container-0-request-0"]
                       and c["spec"]["devices"]["requests"][0].get("exactly", {}).get("deviceClassName")
                       == "vgpu-%s.%s" % (self.want[holder["metadata"]["name"]][1].split("-")[-1], DRIVER))]
        r.check(extended and not odd,
                "pods asking tencent.com/vgpu-<type> got claims the scheduler made for the type's DeviceClass "
                "(extendedResourceName), shaped as fakes/dra_allocator's model makes them", "; ".join(odd[:3]))
        templated = [c for holder, c, _ in ours if "-template-" in holder["metadata"]["name"]]
        r.check(templated and all(c["metadata"].get("annotations", {}).get("resource.kubernetes.io/pod-claim-name")
                                  == "gpu" for c in templated),
                "pods with a ResourceClaimTemplate got claims kube-controller-manager made from it",
                str([c["metadata"]["name"] for c in templated]))

        # Binding conditions: the pod bound only after the daemon confirmed its device.
        unconfirmed = []
        for holder, c, devices in ours:
            status_devices = {(d["driver"], d["pool"], d["device"]): d for d in c["status"].get("devices") or []}
            for x, _, _, _ in devices:
                conditions = {k["type"]: k["status"] for k in
                              status_devices.get((x["driver"], x["pool"], x["device"]), {}).get("conditions") or []}
                if x.get("bindingConditions") != ["OccupancyConfirmed"] or conditions.get("OccupancyConfirmed") != "True" \
                        or conditions.get("OccupancyConflict") == "True":
                    unconfirmed.append("%s %s %s" % (c["metadata"]["name"], x.get("bindingConditions"), conditions))
        r.check(ours and not unconfirmed,
                "every allocation carried the binding condition and the daemon confirmed it (OccupancyConfirmed=True)",
                "; ".join(unconfirmed[:5]))

        # The lock, from the allocations.
        for node in self.nodes.values():
            keys = {}
            for holder, _, devices in ours:
                for x, gpu, vgpu_type, fb in devices:
                    if x["pool"] == node.name:
                        keys.setdefault(gpu, set()).add(vgpu_type if node.lock == "type" else fb)
            r.check(keys and None not in keys and all(len(k) == 1 and None not in k for k in keys.values()),
                    "%s: no GPU allocated two %ss (%s)" % (node.name, node.lock, {g: sorted(k) for g, k in keys.items()}))

        # kubelet: prepare every allocated claim on its node.
        failures = []
        for holder, c, devices in ours:
            node = self.nodes[holder["spec"]["nodeName"]]
            names, error = node.prepare(c)
            if error or sorted(names) != sorted(x["device"] for x, _, _, _ in devices):
                failures.append("%s on %s: %s %s" % (c["metadata"]["name"], node.name, error, names))
        r.check(ours and not failures, "kubelet's NodePrepareResources succeeds for every allocated claim (%d)"
                % len(ours), "; ".join(failures[:5]))

        for node in self.nodes.values():
            want = {}
            for holder, _, devices in ours:
                for x, gpu, vgpu_type, fb in devices:
                    if x["pool"] == node.name:
                        want[(gpu, vgpu_type)] = want.get((gpu, vgpu_type), 0) + 1
            have = {}
            for _, parent, vgpu_type in node.vgpus():
                have[(parent, vgpu_type)] = have.get((parent, vgpu_type), 0) + 1
            r.check(have == want, "%s: the simulated kernel holds one vGPU of the allocated type on the allocated "
                    "GPU per allocated device" % node.name, "kernel %s, allocated %s" % (have, want))
            size = {t: fb for _, t, fb, _ in self.devices[node.name].values()}
            keys = {}
            for (gpu, vgpu_type), _ in have.items():
                keys.setdefault(gpu, set()).add(vgpu_type if node.lock == "type" else size.get(vgpu_type))
            r.check(all(len(k) == 1 for k in keys.values()),
                    "%s: no GPU of the kernel carries two %ss" % (node.name, node.lock), str(keys))

        # Nothing waits that would fit.
        would_fit = []
        for name, p in sorted(pods.items()):
            if p["spec"].get("nodeName"):
                continue
            node_name, vgpu_type = self.want[name]
            node = self.nodes[node_name]
            room = {g: node.available(g, vgpu_type) for g in node.gpus()}
            if any(room.values()):
                would_fit.append("%s (%s: %s)" % (name, vgpu_type, room))
        r.check(not would_fit, "no pod waits whose type the kernel could still create on its node", "; ".join(would_fit))
        strict_types = {self.want[n][1] for n in bound if self.want[n][0] == "strict"}
        if "strict" in self.nodes:
            r.check(len(strict_types) == 2, "strict: exactly two types bound on its two GPUs (%s)" % sorted(strict_types))
        for node in self.nodes.values():
            refused = node.refused_requests()
            r.check(not refused, "%s: the daemon's ServiceAccount was refused nothing (no 403 in its log)" % node.name,
                    "\n".join(refused[:5]))

    def stop(self):
        for node in self.nodes.values():
            node.stop()


def quantity_mib(q):
    m = re.fullmatch(r"(\d+)(Mi|Gi|Ti)?", q or "")
    if not m:
        return None
    return int(m.group(1)) * {"Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, None: 1.0 / (1024 * 1024)}[m.group(2)]


def gate_off_check(args, bin_dir, protos, report, tmp):
    """1.37, the gate off in the API server: slices accepted without groups, and kept still."""
    with controlplane.ControlPlane(bin_dir, workdir=os.path.join(tmp, "plane-gate-off"),
                                  feature_gates={GROUPS_GATE: "false"}) as cp:
        scenario = Scenario(cp, report, os.path.join(tmp, "gate-off"), args, protos, groups_expected=False)
        os.makedirs(scenario.dir)
        try:
            print("--- %s off (the API server alone):" % GROUPS_GATE)
            scenario.setup([NODES[0]])
            scenario.check_slices()
            node = scenario.nodes[NODES[0][0]]
            first = complete_pool(node_slices(cp, node.name))
            generation = first[0]["spec"]["pool"]["generation"] if first else None
            time.sleep(SETTLED_FOR)
            later = complete_pool(node_slices(cp, node.name))
            report.check(later is not None and later[0]["spec"]["pool"]["generation"] == generation,
                         "gate off: the daemon does not rewrite its pool once published (generation %s stays)"
                         % generation, str(later and later[0]["spec"]["pool"]))
        except BaseException:
            for node in scenario.nodes.values():
                print("--- %s's log ends:\n%s" % (node.name, node.daemon.log_tail() if node.daemon else ""))
            raise
        finally:
            scenario.stop()


def strict_told_equal_size(node, config_text):
    """The strict node's daemon configured for equal-size T4s: it confirms two 1 GiB types on one
    GPU (and on 1.37 declares groups that let the scheduler put them there)."""
    config = yaml.safe_load(config_text)
    if node == "strict":
        # Both, as on the equal node: schedulerState.version 1 would keep the per-type lock.
        config["occupancyMode"] = "equal-size"
        config.setdefault("schedulerState", {})["version"] = 2
    return yaml.safe_dump(config)


def without_driver_status_rule(objects):
    """The overlay's claims role without its resourceclaims/driver rule: the daemon may read
    claims and patch their status, but not write its devices' conditions."""
    out = copy.deepcopy(objects)
    for o in out:
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "kvgpu-dra-claims":
            o["rules"] = [r for r in o["rules"] if "resourceclaims/driver" not in r.get("resources", [])]
    return out


# (what is broken, the daemon config's change, the RBAC's change, how long to wait for what will
# not come, parts of checks that must fail, that must still pass)
BITES = [
    ("a daemon that takes its strict T4s for equal-size ones", strict_told_equal_size, None, DEADLINE,
     ["strict: no GPU allocated two types", "kubelet's NodePrepareResources succeeds for every allocated claim"],
     ["strict: the daemon's ResourceSlices are accepted", "equal: no GPU allocated two framebuffers"]),
    # No pod binds (the scheduler waits for the conditions up to its 600 s bindingTimeout): the
    # settling is waited for a shorter while than the real checks allow.
    ("RBAC without the claims role's resourceclaims/driver rule", None, without_driver_status_rule, 60.0,
     ["every allocation carried the binding condition and the daemon confirmed it",
      "strict: the daemon's ServiceAccount was refused nothing"],
     ["strict: the daemon's ResourceSlices are accepted"]),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", required=True, help="a release pinned in tests/k8s/peers, e.g. 1.36")
    parser.add_argument("--deploy", default=os.path.join(REPO, "deploy"))
    parser.add_argument("--plugin", required=True, help="the kvgpu-device-plugin to test")
    parser.add_argument("--sim", required=True, help="kvgpu-sim")
    parser.add_argument("--bite", action="store_true", help="show that the checks fail on a broken daemon instead")
    args = parser.parse_args()

    bin_dir, status = controlplane.peers_or_exit_code(args.release)
    if bin_dir is None:
        return status
    for program in (args.plugin, args.sim):
        if not os.access(program, os.X_OK):
            print("FAIL: %s is not built" % program)
            return 1
    protos = load_protos()
    # 1.37 has KEP-5963's alpha gate: on in every component for the scenario.
    has_groups = args.release.startswith("1.37")
    gates = {GROUPS_GATE: "true"} if has_groups else {}

    started = time.monotonic()
    outer = check_deploy.Report()
    try:
        for what, broken, broken_objects, deadline, must_fail, must_pass in (
                BITES if args.bite else [(None, None, None, DEADLINE, [], [])]):
            report = check_deploy.Report() if args.bite else outer
            with tempfile.TemporaryDirectory(prefix="kvgpu-k8s-dra-") as tmp:
                with controlplane.ControlPlane(bin_dir, controller_manager=True, scheduler=True, feature_gates=gates,
                                               workdir=os.path.join(tmp, "plane")) as cp:
                    print("control plane of %s (gates %s) up in %.1f s" % (args.release, gates or "default",
                                                                           time.monotonic() - started))
                    if what:
                        print("--- %s, where FAIL is expected:" % what)
                    scenario = Scenario(cp, report, tmp, args, protos, groups_expected=has_groups, broken=broken,
                                        broken_objects=broken_objects, deadline=deadline)
                    try:
                        scenario.setup(NODES)
                        scenario.check_slices()
                        scenario.run(NODES)
                    except BaseException:
                        for node in scenario.nodes.values():
                            print("--- %s's log ends:\n%s" % (node.name, node.daemon.log_tail() if node.daemon else ""))
                        raise
                    finally:
                        scenario.stop()
                    if what:
                        print("---")
                if has_groups and not args.bite:
                    gate_off_check(args, bin_dir, protos, outer, tmp)
            if what:
                for part in must_fail:
                    outer.check(any(f.startswith(part) for f in report.failures), "%s: fails %r" % (what, part))
                for part in must_pass:
                    outer.check(any(p.startswith(part) for p in report.passes) and
                                not any(f.startswith(part) for f in report.failures),
                                "%s: still passes %r" % (what, part))
    except Skip as e:
        print("SKIP: %s" % e)
        return controlplane.SKIP
    print("(%.1f s in all)" % (time.monotonic() - started))
    return outer.finish()


if __name__ == "__main__":
    sys.exit(main())
