#!/usr/bin/python3
"""Issue #43, scenario 3 (DRA), against a real kubelet of one pinned release.

The node of scenario 1 (tests/k8s/node.py: the release's kubelet, containerd v2 and runc, joined
to a control plane with controller-manager and scheduler; containerd's cdi_spec_dirs is the
daemon's CDI directory) with this build's kvgpu-device-plugin
in DRA mode on a kvgpu-sim T4 node (profile t4x2: one vGPU type per GPU), with the config of
deploy/overlays/dra's ConfigMap (the node's paths changed) and its RBAC, under a token of its
ServiceAccount bound to a pod on the node (as kubelet projects into the DaemonSet's pod). Nothing
here plays kubelet: the daemon's sockets are in kubelet's own plugin directories, and every
NodePrepareResources and NodeUnprepareResources comes from the real kubelet.

Checks, each naming the guarantee it defends:
  register  the real kubelet registers the daemon's DRA plugin (its log: connected), the daemon's
            ResourceSlices are accepted as one complete pool for the node;
  refused   a claim of two vGPUs, one per GPU, whose second GPU's create the kernel refuses: the
            real kubelet's prepares fail (the pod's event says so), and no vGPU outlives a failed
            attempt (all or nothing); once the kernel takes creates again, kubelet's retry
            prepares it and the pod runs with one vGPU on each GPU; deleted, both go;
  one claim a pod with a template claim runs; the kernel holds exactly that claim's vGPU of the
            allocated type; kubelet's DRA checkpoint (dra_manager_state) records the claim with
            the CDI device the daemon answered, and the daemon's CDI spec defines that device;
  cdi       containerd resolved those CDI devices into the container: its OCI spec (`ctr -n
            k8s.io containers info`) holds every edit the daemon's specs make for them (the VFIO
            device nodes /dev/vfio/vfio and /dev/vfio/<group>, the env KVGPU_VGPU_ID=<vGPU>, the
            device-metadata file's bind mount), and the container's process printed
            KVGPU_VGPU_ID naming the vGPU the kernel holds;
  restart   kubelet restarted while that pod runs: kubelet deletes the node's ResourceSlices as
            it starts and the daemon publishes its pool again within a minute; the pod keeps
            running and its vGPU stays the same one, no second vGPU is made for it; a pod created
            after the restart is prepared (the plugin is registered with the new kubelet) and
            runs with a vGPU of its own;
  unprepare with the pods deleted, kubelet's unprepares leave the kernel without a vGPU.
kubelet hands DRA's CDI devices to the runtime only in the CRI field `CDIDevices`, which
containerd reads from 1.7 on (Debian 12's 1.6.20 ignores it: the container ran without them).

The /dev/vfio/<group> nodes the spec names do not exist on a host without the vfio driver; as in
scenario 1, VfioNodes plays the host's udev for the simulated kernel and makes them (character
devices 1:3), which containerd's CDI needs: it stats each node to fill in its type and numbers.

usage: scenario_kubelet_dra.py --release 1.36 --plugin kvgpu-device-plugin --sim kvgpu-sim [--break-cdi]
  --break-cdi: containerd reads CDI specs from an empty directory instead of the daemon's; the
  cdi checks (and the pod's start) must fail. Shown by hand (docs/development.md), not a CTest.
Exit 0 when every check passed, 1 otherwise, 77 when the release is not built and Go is missing,
FUSE is unusable, or the node cannot run here.
"""
import argparse
import contextlib
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "deploy"))

import check_deploy  # noqa: E402
import controlplane  # noqa: E402
import node as kubelet_node  # noqa: E402
import scenario_dra  # noqa: E402
import scenario_kubelet  # noqa: E402
import yaml  # noqa: E402

DRIVER = scenario_dra.DRIVER
NAMESPACE = "kata-vgpu"
ACCOUNT = "kvgpu-device-plugin"
TENANT = "tenant-a"
DEADLINE = 300.0
# How long kubelet's prepare retries are watched with the kernel refusing: several attempts
# (kubelet retries a pod's sync with a back-off starting at seconds).
REFUSED_FOR = 30.0
REPUBLISH_DEADLINE = 60.0  # for the pool to be written again after kubelet's wipe (~1 s unloaded)
WHOLE_GPU = "nvidia-234"  # T4-16Q: one per T4, so a claim of two takes both GPUs
SMALL = "nvidia-230"


class Scenario:
    def __init__(self, args, report):
        self.args, self.report = args, report

    def run(self, bin_dir):
        with tempfile.TemporaryDirectory(prefix="kvgpu-k8s-kubelet-dra-") as workdir, \
                controlplane.ControlPlane(bin_dir, controller_manager=True, scheduler=True) as cp:
            # Where the daemon writes its CDI specs (start_daemon); --break-cdi: a directory nothing
            # writes.
            cdi_dir = os.path.join(workdir, "cdi-unused" if self.args.break_cdi else "cdi")
            node = kubelet_node.KubeletNode(cp, bin_dir, cdi_dirs=[cdi_dir])
            with node:
                self._run(cp, node, workdir)
            left = node.leftovers()
            self.report.check(not left and not os.path.exists(node.root),
                              "the node stopped cleanly: no process, shim, mount or cgroup of it left, %s removed"
                              % node.root, "; ".join(left[:10]))

    def _run(self, cp, node, workdir):
        self.cp, self.node, self.dir = cp, node, workdir
        self.sim = scenario_kubelet.Sim(self.args.sim, workdir)
        vfio = scenario_kubelet.VfioNodes(self.sim.mount)
        self.daemon = None
        try:
            vfio.start()
            self.daemon = self.start_daemon()
            if self.registered():
                # Broken, no pod could run: the refused claim's pod would wait out its deadline.
                if not self.args.break_cdi:
                    self.refused_claim()
                self.one_claim_and_restart()
            refused = self.refused()
            self.report.check(not refused, "the daemon's requests were all allowed by the overlay's RBAC",
                              "; ".join(refused[:3]))
        finally:
            self.cp.kubectl("delete", "pod", "-n", TENANT, "--all", "--wait=false", check=False)
            if self.daemon:
                self.daemon.stop()
            vfio.stop()
            self.sim.stop()

    # --- setup -------------------------------------------------------------------------------

    def start_daemon(self):
        with check_deploy.scratch_deploy(os.path.join(REPO, "deploy")) as deploy:
            objects, error = check_deploy.render(os.path.join(self.cp.bin_dir, "kubectl"),
                                                 os.path.join(deploy, "overlays", "dra"))
        if objects is None:
            raise controlplane.ControlPlaneError("overlays/dra does not render: %s" % error)
        kinds = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                 "DeviceClass")
        setup = [o for o in objects if o["kind"] in kinds]
        setup.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT}})
        self.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(setup))
        config = yaml.safe_load(check_deploy.one(objects, "ConfigMap", "kvgpu-device-plugin-config")["data"]["config.yaml"])
        config["udevEvents"] = False
        self.cdi_dir = os.path.join(self.dir, "cdi")
        config.setdefault("cdi", {})["dir"] = self.cdi_dir
        config_path = os.path.join(self.dir, "config.yaml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)
        kubeconfig = os.path.join(self.dir, "daemon.kubeconfig")
        self.cp.write_token_kubeconfig(kubeconfig, self.daemon_pod_token(), NAMESPACE)
        return controlplane._Process("kvgpu-device-plugin", [
            self.args.plugin, "--sysfs-root", self.sim.mount, "--kubelet-dir", self.node.root,
            "--state-dir", os.path.join(self.dir, "state"), "--node-name", self.node.name,
            "--config", config_path, "--kubeconfig", kubeconfig], os.path.join(self.dir, "daemon.log"))

    def daemon_pod_token(self):
        """A token of the daemon's ServiceAccount bound to a pod of that account on this node, as
        kubelet projects one into the DaemonSet's pod: the API server reads the node from it,
        which the claims role's node-aware verb needs (scenario_dra.py's daemon_pod_token). The
        pod is the workload image (the daemon's image is not on this node): kubelet runs it."""
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "kvgpu-device-plugin-" + self.node.name, "namespace": NAMESPACE},
               "spec": {"serviceAccountName": ACCOUNT, "nodeName": self.node.name,
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "main", "image": kubelet_node.POD_IMAGE, "imagePullPolicy": "Never",
                                        "args": ["KVGPU_"]}]}}
        status, answer = self.cp.request("POST", "/api/v1/namespaces/%s/pods" % NAMESPACE, pod)
        if status != 201:
            raise controlplane.ControlPlaneError("creating the daemon's pod: HTTP %d %s" % (status, answer))
        return self.cp.kubectl("create", "token", ACCOUNT, "-n", NAMESPACE, "--duration", "2h",
                               "--bound-object-kind", "Pod", "--bound-object-name", answer["metadata"]["name"],
                               "--bound-object-uid", answer["metadata"]["uid"]).stdout.strip()

    def refused(self):
        return self.daemon.refused_calls()

    # --- helpers -----------------------------------------------------------------------------

    def wait_for(self, ready, deadline=DEADLINE):
        return controlplane.wait_until(ready, deadline, (self.daemon, self.node.kubelet, self.node.containerd))

    def pod(self, name):
        status, answer = self.cp.request("GET", "/api/v1/namespaces/%s/pods/%s" % (TENANT, name))
        return answer if status == 200 else None

    def running(self, name):
        p = self.pod(name)
        return p if p and p.get("status", {}).get("phase") == "Running" else None

    def phase(self, name):
        return json.dumps((self.pod(name) or {}).get("status", {}))[:1500]

    def events(self, name, reason):
        status, answer = self.cp.request("GET", "/api/v1/namespaces/%s/events?fieldSelector=%s" % (
            TENANT, "involvedObject.name%3D" + name))
        return [e for e in answer.get("items", []) if e.get("reason") == reason] if status == 200 else []

    def claim_of(self, pod):
        """The pod's ResourceClaim (made from its template), or None."""
        for s in pod.get("status", {}).get("resourceClaimStatuses") or []:
            status, claim = self.cp.request("GET", "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s" % (
                TENANT, s.get("resourceClaimName")))
            if status == 200:
                return claim
        return None

    def create_pod(self, name, vgpu_type, count):
        template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": name, "namespace": TENANT},
                    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                        "deviceClassName": "vgpu-%s.%s" % (vgpu_type.split("-")[-1], DRIVER),
                        "allocationMode": "ExactCount", "count": count}}]}}}}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT},
               "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 2,
                        "nodeSelector": {"kubernetes.io/hostname": self.node.name},
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
                        "containers": [{"name": "main", "image": kubelet_node.POD_IMAGE, "imagePullPolicy": "Never",
                                        "args": ["KVGPU_"], "resources": {"claims": [{"name": "gpu"}]}}]}}
        self.cp.kubectl("create", "-f", "-", input=yaml.safe_dump_all([template, pod]))

    def delete_pod(self, name):
        self.cp.kubectl("delete", "pod", name, "-n", TENANT, "--wait=true", timeout=DEADLINE)

    def sim_control(self, command):
        with open(os.path.join(self.sim.mount, "sim", "control"), "w") as f:
            f.write(command + "\n")

    def kubelet_claims(self):
        """{claim uid: [CDI device ids of our driver]} of kubelet's DRA checkpoint
        (`<root>/dra_manager_state`: `{"Data": "<JSON of CheckpointData>", "Checksum": n}`, whose
        `ClaimInfoStateList` holds per claim `DriverState[driver].Devices[].CDIDeviceIDs`;
        pkg/kubelet/cm/dra/state of the pinned releases)."""
        out = {}
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            with open(os.path.join(self.node.root, "dra_manager_state")) as f:
                data = json.loads(json.load(f)["Data"])
            for claim in data.get("ClaimInfoStateList") or []:
                devices = ((claim.get("DriverState") or {}).get(DRIVER) or {}).get("Devices") or []
                out[claim["ClaimUID"]] = sorted(i for d in devices for i in d.get("CDIDeviceIDs") or [])
        return out

    def cdi_defined(self):
        """Every CDI id `<kind>=<device>` the daemon's spec files define."""
        ids = set()
        with contextlib.suppress(OSError):
            for name in os.listdir(self.cdi_dir):
                with contextlib.suppress(OSError, ValueError), open(os.path.join(self.cdi_dir, name)) as f:
                    spec = json.load(f)
                for d in spec.get("devices") or []:
                    ids.add("%s=%s" % (spec.get("kind"), d.get("name")))
        return ids

    def cdi_edits(self, ids):
        """{id: the containerEdits the daemon's spec files make for CDI id `<kind>=<device>`: the
        spec's own plus the device's}; an id no spec defines is left out."""
        out = {}
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(self.cdi_dir)):
                with contextlib.suppress(OSError, ValueError), open(os.path.join(self.cdi_dir, name)) as f:
                    spec = json.load(f)
                for d in spec.get("devices") or []:
                    cid = "%s=%s" % (spec.get("kind"), d.get("name"))
                    if cid in ids:
                        out[cid] = [spec.get("containerEdits") or {}, d.get("containerEdits") or {}]
        return out

    def container_id(self, pod, container="main"):
        for s in (pod or {}).get("status", {}).get("containerStatuses") or []:
            if s.get("name") == container and (s.get("containerID") or "").startswith("containerd://"):
                return s["containerID"][len("containerd://"):]
        return None

    def container_errors(self, name):
        """The waiting reasons and messages of the pod's containers (CreateContainerError names
        the CDI device containerd could not resolve)."""
        waiting = [s.get("state", {}).get("waiting") for s in
                   (self.pod(name) or {}).get("status", {}).get("containerStatuses") or []]
        return "".join("waiting: %s: %s;" % (w.get("reason"), w.get("message")) for w in waiting if w)

    def container_has_cdi(self, pod, ids, vgpu):
        """The CDI devices kubelet recorded for the pod's claim reached its container: containerd's
        OCI spec of it (ctr containers info) holds every edit the daemon's CDI specs make for them,
        and its process saw the vGPU's id in its environment."""
        r = self.report
        cid = self.container_id(pod)
        info = self.node.ctr("containers", "info", cid, check=False) if cid else None
        try:
            oci = json.loads(info.stdout)["Spec"] if info and info.returncode == 0 else {}
        except (ValueError, KeyError):
            oci = {}
        env = set(oci.get("process", {}).get("env") or [])
        devices = {d.get("path"): d for d in (oci.get("linux", {}).get("devices") or [])}
        allowed = oci.get("linux", {}).get("resources", {}).get("devices") or []
        mounts = {(m.get("destination"), m.get("source")) for m in oci.get("mounts") or []}
        edits = self.cdi_edits(set(ids))
        missing = []
        wanted = 0
        for cdi_id in ids:
            if cdi_id not in edits:
                missing.append("%s: defined by no spec in %s" % (cdi_id, self.cdi_dir))
                continue
            for e in edits[cdi_id]:
                for var in e.get("env") or []:
                    wanted += 1
                    if var not in env:
                        missing.append("%s: env %s" % (cdi_id, var))
                for node in e.get("deviceNodes") or []:
                    wanted += 1
                    path = node.get("path")
                    d = devices.get(path)
                    # containerd fills in the host node's type and numbers (stat) and lets the
                    # container's device cgroup open it.
                    try:
                        rdev = os.stat(node.get("hostPath") or path).st_rdev
                    except OSError as err:
                        missing.append("%s: device node %s: %s on the host" % (cdi_id, path, err))
                        continue
                    if d is None or (d.get("major"), d.get("minor")) != (os.major(rdev), os.minor(rdev)):
                        missing.append("%s: device node %s (%s)" % (cdi_id, path, d))
                    elif not any(a.get("allow") and a.get("major") == d.get("major") and
                                 a.get("minor") == d.get("minor") for a in allowed):
                        missing.append("%s: device node %s not allowed by the device cgroup" % (cdi_id, path))
                for m in e.get("mounts") or []:
                    wanted += 1
                    if (m.get("containerPath"), m.get("hostPath")) not in mounts:
                        missing.append("%s: mount %s -> %s" % (cdi_id, m.get("hostPath"), m.get("containerPath")))
        r.check(bool(oci) and bool(ids) and wanted > 0 and not missing,
                "containerd resolved the claim's CDI devices (%s) into the container: its OCI spec holds all %d "
                "edits the daemon's CDI specs make for them" % (", ".join(ids), wanted),
                "container %s (%s); missing: %s; OCI env %s, devices %s, mounts %s" % (
                    cid, (info.stderr.strip() if info else "no container id"), missing, sorted(env),
                    sorted(devices), sorted(mounts))[:3000])
        seen = self.node.container_env(pod).get("KVGPU_VGPU_ID")
        r.check(vgpu is not None and seen == vgpu,
                "the container's process sees KVGPU_VGPU_ID=%s, the vGPU the kernel holds (from the CDI spec)" % vgpu,
                "printed %r" % seen)

    # --- register ------------------------------------------------------------------------------

    def registered(self):
        r = self.report

        def connected():
            with contextlib.suppress(OSError), open(self.node.kubelet.log_path, errors="replace") as f:
                return any("Connection changed" in line and DRIVER in line and "connected=true" in line for line in f)
            return False
        ok = r.check(bool(self.wait_for(connected)), "the real kubelet registers the daemon's DRA plugin (its log: "
                     "connected)", self.daemon.log_tail())
        pool = self.wait_for(lambda: scenario_dra.complete_pool(scenario_dra.node_slices(self.cp, self.node.name)))
        ok = r.check(pool is not None, "the daemon's ResourceSlices are accepted: one complete pool for the node",
                     json.dumps(scenario_dra.node_slices(self.cp, self.node.name))[:1500]) and ok
        if pool:
            self.devices = scenario_dra.devices_of(pool)
        return ok

    # --- refused -------------------------------------------------------------------------------

    def refused_claim(self):
        r = self.report
        gpus = sorted(self.sim_gpus())
        # The create of the GPU last in PCI order: the daemon makes a claim's vGPUs in device order,
        # so the first is made and must be undone.
        refused_gpu = gpus[-1]
        self.sim_control("fault write %s/mdev_supported_types/%s/create EIO -1" % (refused_gpu, WHOLE_GPU))
        self.create_pod("pair", WHOLE_GPU, 2)
        failed = self.wait_for(lambda: len(self.events("pair", "FailedPrepareDynamicResources")) >= 1)
        r.check(bool(failed), "a claim of two %s whose second GPU's create the kernel refuses: the real kubelet's "
                "prepare fails (event FailedPrepareDynamicResources)" % WHOLE_GPU, self.phase("pair"))
        # Readings 2 s apart across kubelet's retries: a vGPU left behind by a failed attempt keeps
        # its id from one reading to the next; one in the middle of an attempt does not.
        readings = []
        end = time.monotonic() + REFUSED_FOR
        while time.monotonic() < end:
            readings.append(set(self.sim.vgpus()))
            time.sleep(2)
        kept = set.intersection(*readings) if readings else set()
        attempts = len(self.events("pair", "FailedPrepareDynamicResources"))
        r.check(not kept and not self.running("pair"),
                "no vGPU outlives a failed prepare (%d readings over %.0f s of kubelet's retries) and the pod does "
                "not run" % (len(readings), REFUSED_FOR), "kept %s; %s" % (sorted(kept), self.phase("pair")))
        print("     kubelet's failed prepares seen as events: %s" % attempts)
        self.sim_control("clear-faults")
        running = self.wait_for(lambda: self.running("pair"))
        vgpus = self.sim.vgpus()
        on = sorted(parent for parent, vgpu_type in vgpus.values() if vgpu_type == WHOLE_GPU)
        r.check(bool(running) and on == gpus and len(vgpus) == 2,
                "the kernel taking creates again, kubelet's retry prepares the claim: the pod runs with one %s on "
                "each GPU" % WHOLE_GPU, "kernel %s; %s" % (vgpus, self.phase("pair")))
        self.delete_pod("pair")
        gone = self.wait_for(lambda: not self.sim.vgpus() or None)
        r.check(bool(gone), "the pod deleted, kubelet's unprepare removes both vGPUs", str(self.sim.vgpus()))

    def sim_gpus(self):
        with open(os.path.join(self.sim.mount, "sim", "state")) as f:
            return [line.split()[1] for line in f if line.startswith("gpu ") and line.split()[2] == "present"]

    # --- one claim, kubelet's restart, unprepare ------------------------------------------------

    def one_claim_and_restart(self):
        r = self.report
        self.create_pod("one", SMALL, 1)
        # Broken (--break-cdi), containerd refuses the container at once and kubelet retries:
        # a minute shows it.
        running = self.wait_for(lambda: self.running("one"), deadline=60 if self.args.break_cdi else DEADLINE)
        r.check(bool(running), "a pod with a template claim of one %s is prepared by the real kubelet and runs"
                % SMALL, self.container_errors("one") + " " + self.phase("one"))
        if not running:
            return
        claim = self.claim_of(running)
        results = ((claim or {}).get("status", {}).get("allocation") or {}).get("devices", {}).get("results") or []
        vgpus = self.sim.vgpus()
        r.check(len(results) == 1 and len(vgpus) == 1 and list(vgpus.values())[0][1] == SMALL and
                self.devices.get(results[0]["device"], (None, None))[1] == SMALL and
                self.devices[results[0]["device"]][0] == list(vgpus.values())[0][0],
                "the kernel holds exactly the claim's vGPU, of the allocated type on the allocated GPU",
                "kernel %s; allocation %s" % (vgpus, results))
        uid = (claim or {}).get("metadata", {}).get("uid")
        cdi = self.kubelet_claims().get(uid, [])
        defined = self.cdi_defined()
        r.check(bool(cdi) and all(c in defined for c in cdi),
                "kubelet's DRA checkpoint records the claim with the CDI device the daemon answered, and the "
                "daemon's CDI spec defines it", "checkpoint %s; defined %s" % (self.kubelet_claims(), sorted(defined)))
        self.container_has_cdi(running, cdi, list(vgpus)[0] if len(vgpus) == 1 else None)

        before = dict(vgpus)
        self.node.restart_kubelet()
        # kubelet deletes every ResourceSlice of its node when it starts; until the daemon writes
        # the pool again, no pod can be allocated a device here. A pass takes a second or two.
        republished = self.wait_for(lambda: scenario_dra.complete_pool(
            scenario_dra.node_slices(self.cp, self.node.name)), deadline=REPUBLISH_DEADLINE)
        r.check(republished is not None, "kubelet restarted (it deletes the node's ResourceSlices when it starts): "
                "the daemon publishes its pool again within %.0f s" % REPUBLISH_DEADLINE,
                json.dumps(scenario_dra.node_slices(self.cp, self.node.name))[:500])
        kept = self.wait_for(lambda: self.running("one") and self.sim.vgpus() == before and
                             self.node.node_ready() or None, deadline=DEADLINE)
        r.check(bool(kept), "kubelet restarted: the pod keeps running with the same vGPU, none made again for it",
                "kernel %s (before %s); %s" % (self.sim.vgpus(), before, self.phase("one")))
        self.create_pod("two", SMALL, 1)
        after = self.wait_for(lambda: self.running("two"))
        vgpus = self.sim.vgpus()
        r.check(bool(after) and len(vgpus) == 2 and set(before) < set(vgpus),
                "a pod created after kubelet's restart is prepared by it and runs with a vGPU of its own",
                "kernel %s; %s" % (vgpus, self.phase("two")))
        self.delete_pod("one")
        self.delete_pod("two")
        gone = self.wait_for(lambda: not self.sim.vgpus() or None)
        r.check(bool(gone), "the pods deleted, kubelet's unprepares leave the kernel without a vGPU",
                str(self.sim.vgpus()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", required=True)
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--sim", required=True)
    parser.add_argument("--break-cdi", action="store_true",
                        help="containerd reads CDI specs from an empty directory: the cdi checks must fail")
    args = parser.parse_args()
    bin_dir, code = controlplane.peers_or_exit_code(args.release)
    if bin_dir is None:
        return code
    if not os.access(os.path.join(bin_dir, "kubelet"), os.X_OK):
        print("FAIL: %s/kubelet is not built: run tests/k8s/build-peers.sh %s" % (bin_dir, args.release))
        return 1
    missing = kubelet_node.missing_capabilities()
    if missing:
        print("SKIP: the real kubelet node cannot run here: " + "; ".join(missing))
        return controlplane.SKIP
    started = time.monotonic()
    report = scenario_kubelet.Report()
    try:
        Scenario(args, report).run(bin_dir)
    except scenario_kubelet.Skip as e:
        print("SKIP: %s" % e)
        return controlplane.SKIP
    except controlplane.ControlPlaneError as e:
        print("FAIL: %s" % e)
        return 1
    print("%s in %.0f s" % ("PASS" if not report.failed else "FAILED: %d checks" % len(report.failed),
                            time.monotonic() - started))
    return 0 if not report.failed else 1


if __name__ == "__main__":
    sys.exit(main())
