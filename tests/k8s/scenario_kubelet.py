#!/usr/bin/python3
"""Issue #43, scenario 1 (device plugin), against a real kubelet of one pinned release.

The node: tests/k8s/node.py (this release's kubelet, containerd v2 and Debian's runc, joined to
a tests/k8s/controlplane.py control plane with controller-manager and scheduler). On it, this
build's kvgpu-device-plugin on a kvgpu-sim mount (profile t4x2: two T4s, one vGPU type per GPU),
with the config of deploy/overlays/default's ConfigMap (the node's paths changed, a short
lifecycle grace period) and a token of its ServiceAccount under the overlay's RBAC.

What the node lacks that a real vGPU host has, and what stands in for it: the vfio device nodes.
Allocate answers /dev/vfio/vfio and /dev/vfio/<group>, and containerd refuses to create a
container whose device's host path is missing, so the test plays the host's udev: while the node
runs it makes /dev/vfio/<group> for each IOMMU group the simulated kernel shows (and removes
them after), character devices 1:3 (null) under the names the kernel would use.

Checks, each naming the guarantee it defends:
  one pod   the plugin registers with the real kubelet and the Node shows tencent.com/vgpu-<N>
            for the node's types; a pod asking one vGPU is admitted and runs (runc); Allocate
            created exactly that vGPU in the simulated kernel; the container's environment
            names it; kubelet's PodResources and its device-manager checkpoint name the pod's
            device; the pod deleted, the vGPU goes.
  lost books  (the simulated node's scenario) before the pod is deleted, kubelet restarted over
            its own checkpoint from before the pod's Allocate, as a write of kubelet's that
            landed out of order leaves it: kubelet lists the running pod without its device, and
            the pod keeps its vGPU (watched for 30 s, ten times the daemon's grace and passes).
  burst     60 pods of three types, a third deleted while the rest still arrive: every running
            pod holds a vGPU of its type no other pod holds; no running pod's vGPU ever
            disappears; with every pod deleted, no vGPU is left.
  restarts  (scenario 2) 45 pods the same way, kubelet restarted (SIGTERM, as a service
            restart) after a third of them and the daemon killed (SIGKILL, as a crash or an OOM
            kill) and started again after two thirds: pods created after each restart are
            admitted and run (the plugin registered again); the checks of the burst hold across
            both, and kubelet's PodResources gives every running pod one device no other holds.

usage: scenario_kubelet.py --release 1.36 --plugin kvgpu-device-plugin --sim kvgpu-sim [--bite]
       scenario_kubelet.py --release 1.37 --plugin kvgpu-device-plugin --real-kernel [--bite]
  --bite: the same checks against broken nodes, each must fail its check: a daemon whose grace
  period is an hour (the deleted pods' vGPUs stay: "none leaked" must fail), a vGPU removed
  behind the daemon's back while its pod runs ("no live vGPU removed" must fail), and a daemon
  started again after its crash without its state directory, as a DaemonSet whose state volume
  is not the host's would be ("no live vGPU removed" or "none leaked" must fail). Each break runs
  the one pod and only the burst its check belongs to: the first two the burst, the third the
  restarts.
  With --real-kernel, the one pod on a node whose /dev/vfio/<group> nodes are stand-ins (character
  devices 1:3 put where udev puts the group's node, as the simulated node has them): the
  container then has a /dev/vfio/<group> that is not the kernel's, and "the container gets the
  real kernel's /dev/vfio/<group>" must fail.
Exit 0 when every check passed (with --bite: when every break was caught), 1 otherwise, 77 when
the release is not built and Go is missing, FUSE is unusable, or the node cannot run here.
"""
import argparse
import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "deploy"))
sys.path.insert(0, os.path.join(REPO, "proto", "kubelet"))

import check_deploy  # noqa: E402
import controlplane  # noqa: E402
import messages  # noqa: E402
import node as kubelet_node  # noqa: E402
import yaml  # noqa: E402

NAMESPACE = "kata-vgpu"
ACCOUNT = "kvgpu-device-plugin"
TENANT = "tenant-a"
DOMAIN = "tencent.com"
DEADLINE = 300.0
GRACE = "3s"  # the daemon's lifecycle.gracePeriod here (the shipped one is 30 s)
BURST = 60
RESTART_BURST = 45
LIST = "/v1.PodResourcesLister/List"
# How long a deleted pod's vGPU may take to go: the grace period, the daemon's poll, kubelet's
# and containerd's teardown, on a loaded machine. Far below the bite's grace (an hour).
GONE_DEADLINE = 120.0
# The pods of a burst have settled when none changed phase or node for this long (after the
# scheduler's longest backoff, 10 s, so a pod it found no room for is tried again first).
SETTLE_STABLE = 30.0
# The same when no pod waits for the scheduler and nothing restarted: no retry can change the
# outcome then, and the running pods are watched keeping their vGPUs for over twice the daemon's
# grace period and pass (3 s and 1 s) before the checks. Under TCG (x5) this spares 100 s a burst.
SETTLE_STABLE_NONE_PENDING = 10.0
# How long a pod whose device kubelet's books lost is watched keeping its vGPU: ten times the
# daemon's grace period here (3 s) and its pass interval (1 s) with a restarted kubelet's settle.
LOST_BOOKS_WATCH = 30.0
# Pods of the real-kernel burst (--real-kernel): the sample driver mtty's two types share 24 ports.
REAL_KERNEL_BURST = 12
# The VM lab run of --real-kernel: memory for a node and the daemon, and the whole run's limit,
# boot included (TCG emulates every instruction). The limit only bounds a hang: 391 s quiet,
# 1,437 and 1,871 s (1.36.3) beside two CPU burners and the suite, with the control plane still in
# the guest then; ten times quiet.
REAL_KERNEL_VM_MEM = "4096"
REAL_KERNEL_VM_TIMEOUT = 4000
# Under TCG each program runs many times slower: the API server took 90 s to serve where it takes
# a few on the host. Every deadline of --real-kernel is this many times the host's.
REAL_KERNEL_SLOWDOWN = 5
# The control plane of --real-kernel runs on the host, not emulated: in the guest it took nearly
# half the guest's CPU (kube-apiserver, etcd, kube-controller-manager, kube-scheduler: 273 of
# 592 s). The guest reaches the host's loopback at QEMU's user-network host address, from its own
# address there (tests/vm/run-in-vm.sh, KVGPU_VM_NET=user).
LAB_HOST = "10.0.2.2"
LAB_GUEST = "10.0.2.15/24"
# kube-controller-manager, at full speed on the host, marks the Node not ready when its emulated
# kubelet has not renewed its lease for this long (upstream's default is 50 s, here times the
# TCG factor): a starved guest's late renewal must not take the node from the scheduler.
LAB_NODE_MONITOR_GRACE = "%ds" % (50 * REAL_KERNEL_SLOWDOWN)


def read_file(path):
    """The file's bytes; None when it is not there."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def type_of(resource):
    """The kernel's vGPU type a resource stands for: vgpu-230 is nvidia-230, vgpu-mtty-2 mtty-2
    (the daemon's naming, docs/configuration.md)."""
    suffix = resource.split("/vgpu-", 1)[1]
    return "nvidia-" + suffix if suffix.isdigit() else suffix


class Skip(Exception):
    pass


class Report:
    """Each check's outcome, printed as it comes; with `clock`, followed by the seconds since the
    report began (the real-kernel run's, to see where the emulated guest's time goes)."""

    def __init__(self, clock=False):
        self.failed = []
        self.started = time.monotonic() if clock else None

    def check(self, ok, what, detail=""):
        at = "" if self.started is None else " [%.0f s]" % (time.monotonic() - self.started)
        print("%s %s%s%s" % ("ok  " if ok else "FAIL", what, (": " + detail) if (detail and not ok) else "", at),
              flush=True)
        if not ok:
            self.failed.append(what)
        return ok


class VfioNodes:
    """The host's udev for the simulated kernel: /dev/vfio/vfio and /dev/vfio/<group> for each
    IOMMU group under <mount>/sys/kernel/iommu_groups, made as they appear, removed at the end."""

    def __init__(self, mount):
        self.groups = os.path.join(mount, "sys", "kernel", "iommu_groups")
        self.made = []
        self.made_dir = False
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        if not os.path.isdir("/dev/vfio"):
            os.mkdir("/dev/vfio", 0o755)
            self.made_dir = True
        self._make("vfio")
        self.thread.start()

    def _make(self, name):
        path = os.path.join("/dev/vfio", name)
        if not os.path.exists(path):
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            self.made.append(path)

    def _run(self):
        while not self.stopping.wait(0.1):
            with contextlib.suppress(OSError):
                for group in os.listdir(self.groups):
                    self._make(group)

    def stop(self):
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        for path in self.made:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if self.made_dir:
            with contextlib.suppress(OSError):
                os.rmdir("/dev/vfio")


class VfioImpostor(VfioNodes):
    """The bite of --real-kernel: each IOMMU group's /dev/vfio/<group> that the kernel makes is
    replaced, as soon as it appears, by a stand-in (1:3, as VfioNodes makes them for the simulated
    kernel), so a container gets a node at the right path that is not the kernel's group."""

    def __init__(self):
        super().__init__("/")
        self.groups = "/sys/class/vfio"
        self.replaced = []

    def start(self):
        self.thread.start()

    def _run(self):
        while not self.stopping.wait(0.02):
            with contextlib.suppress(OSError):
                for group in os.listdir(self.groups):
                    path = os.path.join("/dev/vfio", group)
                    if group == "vfio" or path in self.made:
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                    self._make(group)
                    self.replaced.append(group)
                    print("     --bite: /dev/vfio/%s replaced by a stand-in (1:3)" % group, flush=True)


class Sim:
    kind = "simulated"

    def __init__(self, sim_bin, workdir):
        self.mount = os.path.join(workdir, "mnt")
        os.makedirs(self.mount)
        self.process = controlplane._Process("kvgpu-sim", [sim_bin, "--profile", "t4x2", "--mount", self.mount,
                                                          "--quiet"], os.path.join(workdir, "kvgpu-sim.log"))
        end = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.mount, "sim", "state")):
            if not self.process.alive():
                if self.process.popen.returncode == 3:
                    raise Skip("FUSE is not usable here: " + self.process.log_tail())
                raise controlplane.ControlPlaneError("kvgpu-sim exited: " + self.process.log_tail())
            if time.monotonic() > end:
                raise controlplane.ControlPlaneError("kvgpu-sim did not mount in 60 s")
            time.sleep(0.1)

    def vgpus(self):
        """{vGPU id: (parent, type)} of the simulated kernel."""
        with open(os.path.join(self.mount, "sim", "state")) as f:
            return {p[1]: (p[2], p[3]) for p in (line.split() for line in f) if p and p[0] == "vgpu"}

    def remove(self, vgpu):
        with open(os.path.join(self.mount, "sys", "bus", "mdev", "devices", vgpu, "remove"), "w") as f:
            f.write("1")

    def stop(self):
        self.process.stop()
        if os.path.ismount(self.mount):
            subprocess.run(["fusermount3", "-u", "-z", self.mount], capture_output=True)


class RealKernel:
    """The VM lab's kernel (tests/vm/, Debian's 6.1 under QEMU): the sample drivers' parents (mtty,
    mdpy, mbochs) in its real sysfs; a vGPU is a real mdev, in an IOMMU group of its own whose
    /dev/vfio/<group> devtmpfs makes."""
    kind = "real"
    mount = "/"
    DEVICES = "/sys/bus/mdev/devices"

    def vgpus(self):
        """{mdev UUID: (parent, type)} of the kernel."""
        out = {}
        for uuid in os.listdir(self.DEVICES):
            device = os.path.join(self.DEVICES, uuid)
            with contextlib.suppress(OSError):
                out[uuid] = (os.path.basename(os.path.dirname(os.path.realpath(device))),
                             os.path.basename(os.readlink(os.path.join(device, "mdev_type"))))
        return out

    def group(self, uuid):
        with contextlib.suppress(OSError):
            return os.path.basename(os.readlink(os.path.join(self.DEVICES, uuid, "iommu_group")))
        return None

    @staticmethod
    def device_number(path):
        """(major, minor) the kernel gave the character device udev puts at `path`: from sysfs
        (/sys/class/vfio/<group>/dev, /sys/class/misc/vfio/dev), not from the node at `path`,
        which anyone could have made."""
        name = os.path.basename(path)
        sysfs = "/sys/class/misc/vfio/dev" if name == "vfio" else os.path.join("/sys/class/vfio", name, "dev")
        with contextlib.suppress(OSError, ValueError):
            with open(sysfs) as f:
                major, minor = f.read().strip().split(":")
            return (int(major), int(minor))
        return None

    def remove(self, uuid):
        with open(os.path.join(self.DEVICES, uuid, "remove"), "w") as f:
            f.write("1")

    def stop(self):
        pass


def prepare_lab_guest():
    """What the lab VM's init leaves to a node: cgroup v2 mounted (the guest kernel's own; kubelet
    and runc on the cgroupfs driver), the kernel modules the node's networking needs (veth for the
    ptp CNI plugin, virtio_net for the NIC on QEMU's user network) loaded from the lab's unpacked
    kernel, that NIC up with the default route kubelet takes its node IP from, through the host
    (whose loopback holds the control plane), and temporary files on tmpfs (containerd's overlayfs
    snapshots cannot have the guest's overlay root as their upper layer)."""
    kver = os.uname().release
    root = os.path.join(os.environ["KVGPU_LAB"], "root")
    for module in ("veth", "virtio_net"):
        subprocess.run(["modprobe", "-d", root, "-S", kver, module], check=True)
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        subprocess.run(["mount", "-t", "cgroup2", "cgroup2", "/sys/fs/cgroup"], check=True)
    # A NIC has a device behind it; lo and the veths pods get later do not.
    nics = sorted(n for n in os.listdir("/sys/class/net") if os.path.exists("/sys/class/net/%s/device" % n))
    if len(nics) != 1:
        raise controlplane.ControlPlaneError("the lab guest has NICs %s, not one (run-in-vm.sh's KVGPU_VM_NET=user)" % nics)
    for argv in (["ip", "addr", "add", LAB_GUEST, "dev", nics[0]],
                 ["ip", "link", "set", nics[0], "up"],
                 ["ip", "route", "add", "default", "via", LAB_HOST, "dev", nics[0]]):
        subprocess.run(argv, check=True)
    tmp = "/run/kvgpu-tmp"
    os.makedirs(tmp, exist_ok=True)
    os.environ["TMPDIR"] = tmp
    tempfile.tempdir = tmp


def process_cpu(pid):
    """(program name, own CPU s, reaped children's CPU s, start time) of a process from
    /proc/<pid>/stat; None when it is gone."""
    try:
        raw = read_file("/proc/%s/stat" % pid)
    except OSError:
        return None
    if not raw:
        return None
    # "pid (comm) state ppid ...": comm may hold blanks and parentheses; the fields after the last
    # ")" start at field 3, so utime (14), stime, cutime, cstime, starttime (22).
    tick = os.sysconf("SC_CLK_TCK")
    comm = raw[raw.index(b"(") + 1:raw.rindex(b")")].decode(errors="replace")
    rest = raw[raw.rindex(b")") + 2:].split()
    return comm, (int(rest[11]) + int(rest[12])) / tick, (int(rest[13]) + int(rest[14])) / tick, rest[19]


class GuestCpu:
    """Where the lab guest's CPU goes, by program: every process's own CPU time and that of the
    children it reaped (runc under its shim, the CNI plugins under containerd), read from
    /proc/<pid>/stat every few seconds and kept per process (pid and start time), summed by name.
    A program that exits between two reads loses at most one interval; the reaped column counts
    a child that was also read alive twice (the node's programs under this script)."""

    INTERVAL = 5.0

    def __init__(self):
        self.seen = {}
        self.sample()
        # What ran before the account began counts from there (the guest's init, the kernel's
        # threads).
        self.before = dict(self.seen)
        self.busy_at_start = self.busy()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def busy():
        """The whole guest's busy CPU seconds so far (/proc/stat: every field but idle and iowait)."""
        fields = [int(v) for v in read_file("/proc/stat").split(b"\n", 1)[0].split()[1:]]
        return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        while not self.done.wait(self.INTERVAL):
            self.sample()

    def sample(self):
        for pid in os.listdir("/proc"):
            cpu = process_cpu(pid) if pid.isdigit() else None
            if cpu:
                comm, own, reaped, started = cpu
                self.seen[(pid, started)] = (comm, own, reaped)

    def stop(self):
        self.done.set()
        self.thread.join()
        self.sample()

    def table(self, top=12):
        by_name = {}
        for key, (comm, own, reaped) in self.seen.items():
            _, own_before, reaped_before = self.before.get(key, (comm, 0.0, 0.0))
            was = by_name.get(comm, (0.0, 0.0))
            by_name[comm] = (was[0] + own - own_before, was[1] + reaped - reaped_before)
        rows = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
        lines = ["guest CPU: %.0f s busy in all; by program, own s / reaped children's s:"
                 % (self.busy() - self.busy_at_start)]
        lines += ["  %-28s %7.1f %7.1f" % (name, own, reaped) for name, (own, reaped) in rows]
        return "\n".join(lines)


def run_in_lab_vm(argv, bin_dir):
    """This scenario again, inside the VM lab (tests/vm/run-in-vm.sh), against a control plane
    started here on the host, which the guest reaches over QEMU's user network; its exit status.
    Ends with the CPU the control plane took here."""
    with controlplane.ControlPlane(bin_dir, controller_manager=True, scheduler=True, extra_addresses=(LAB_HOST,),
                                   controller_manager_args=["--node-monitor-grace-period",
                                                            LAB_NODE_MONITOR_GRACE]) as cp:
        port = cp.server.rsplit(":", 1)[1]
        env = dict(os.environ, KVGPU_VM_MEM=os.environ.get("KVGPU_VM_MEM", REAL_KERNEL_VM_MEM), KVGPU_VM_NET="user",
                   KVGPU_LAB_K8S_SERVER="https://%s:%s" % (LAB_HOST, port), KVGPU_LAB_K8S_PKI=cp.pki)
        command = [os.path.join(REPO, "tests", "vm", "run-in-vm.sh"), "--timeout", str(REAL_KERNEL_VM_TIMEOUT),
                   "/usr/bin/python3", os.path.abspath(__file__)] + argv
        code = subprocess.run(command, env=env).returncode
        used = [process_cpu(p.popen.pid) for p in cp.processes]
        print("host CPU of the control plane: " + ", ".join(
            "%s %.0f s" % (cpu[0], cpu[1] + cpu[2]) for cpu in used if cpu), flush=True)
        return code


class Scenario:
    def __init__(self, args, report, grace=GRACE, remove_live=False, restart_stateless=False,
                 vfio_impostor=False, bursts=("lost-books", "burst", "restart")):
        self.args, self.report, self.grace, self.remove_live = args, report, grace, remove_live
        self.restart_stateless, self.vfio_impostor = restart_stateless, vfio_impostor
        # Which of the simulated node's steps after the one pod run: all for the scenario; a bite
        # runs only the one whose check its break must fail.
        self.bursts = bursts
        self.slowdown = REAL_KERNEL_SLOWDOWN if args.real_kernel else 1
        self.pr = messages.load("podresources_v1")

    def run(self, bin_dir):
        guest_cpu = GuestCpu().start() if self.args.real_kernel else None
        try:
            self._run_node(bin_dir)
        finally:
            if guest_cpu:
                guest_cpu.stop()
                print(guest_cpu.table(), flush=True)

    def _control_plane(self, bin_dir):
        """The lab guest's: the host's, which run_in_lab_vm started (prepare_lab_guest has already
        refused a guest without the network to it); else one of its own on this loopback."""
        if self.args.real_kernel:
            if "KVGPU_LAB_K8S_SERVER" not in os.environ:
                raise controlplane.ControlPlaneError("no KVGPU_LAB_K8S_SERVER: --real-kernel boots the lab itself")
            return controlplane.ControlPlane.remote(bin_dir, os.environ["KVGPU_LAB_K8S_PKI"],
                                                    os.environ["KVGPU_LAB_K8S_SERVER"], deadline=120.0 * self.slowdown)
        return controlplane.ControlPlane(bin_dir, controller_manager=True, scheduler=True,
                                         deadline=120.0 * self.slowdown)

    def _run_node(self, bin_dir):
        with tempfile.TemporaryDirectory(prefix="kvgpu-k8s-kubelet-") as workdir, \
                self._control_plane(bin_dir) as cp:
            node = kubelet_node.KubeletNode(cp, bin_dir, deadline=180.0 * self.slowdown)
            with node:
                self._run(cp, node, workdir)
            left = node.leftovers()
            self.report.check(not left and not os.path.exists(node.root),
                              "the node stopped cleanly: no process, shim, mount or cgroup of it left, %s removed"
                              % node.root, "; ".join(left[:10] + (["%s holds %s" % (node.root, sorted(
                                  os.listdir(node.root))[:10])] if os.path.exists(node.root) else [])))

    def _run(self, cp, node, workdir):
        self.cp, self.node, self.dir = cp, node, workdir
        # The VM lab's kernel makes real mdevs and their /dev/vfio nodes; the simulated one needs
        # the test to play udev.
        kernel = RealKernel() if self.args.real_kernel else Sim(self.args.sim, workdir)
        vfio = (VfioImpostor() if self.vfio_impostor else None) if self.args.real_kernel else VfioNodes(kernel.mount)
        self.daemon = None
        try:
            if vfio:
                vfio.start()
            self.kernel = kernel
            self.daemon = self.start_daemon(kernel)
            self.one_pod()
            if self.vfio_impostor:
                pass  # the bite's check is the one pod's
            elif self.args.real_kernel:
                # Under TCG every pod costs seconds of emulated runc and containerd: one burst,
                # of the sample driver's types (the restarts are the simulated node's scenario).
                self.burst(count=REAL_KERNEL_BURST)
            else:
                if "burst" in self.bursts:
                    self.burst()
                if "restart" in self.bursts:
                    self.burst("restart", RESTART_BURST, restarts=True)
            self.report.check(not self.refused(), "the daemon's requests were all allowed by the overlay's RBAC",
                              "; ".join(self.refused()[:3]))
        finally:
            # The daemon running now: after a crash and restart, not the one started first.
            if self.daemon:
                self.daemon.stop()
            if vfio:
                vfio.stop()
            kernel.stop()

    # --- setup -------------------------------------------------------------------------------

    def start_daemon(self, kernel, state_dir="state"):
        with check_deploy.scratch_deploy(os.path.join(REPO, "deploy")) as deploy:
            objects, error = check_deploy.render(os.path.join(self.cp.bin_dir, "kubectl"),
                                                 os.path.join(deploy, "overlays", "default"))
        if objects is None:
            raise controlplane.ControlPlaneError("overlays/default does not render: %s" % error)
        kinds = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        setup = [o for o in objects if o["kind"] in kinds and
                 (o["kind"] == "Namespace" or "device-plugin" in o["metadata"]["name"])]
        setup.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT}})
        self.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(setup))
        config = yaml.safe_load(check_deploy.one(objects, "ConfigMap", "kvgpu-device-plugin-config")["data"]["config.yaml"])
        config["udevEvents"] = False
        config.setdefault("cdi", {})["dir"] = os.path.join(self.dir, "cdi")
        config.setdefault("lifecycle", {}).update({"gracePeriod": self.grace, "pollInterval": "1s"})
        config_path = os.path.join(self.dir, "config.yaml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)
        # The token kubelet would project into the DaemonSet's pod; bound here to the Node (no
        # pod of the daemon runs: its image is not on this node).
        _, node = self.cp.call("GET", "/api/v1/nodes/" + self.node.name, ok=(200,),
                               deadline=DEADLINE * self.slowdown)
        token = self.cp.kubectl("create", "token", ACCOUNT, "-n", NAMESPACE, "--duration", "2h",
                                "--bound-object-kind", "Node", "--bound-object-name", self.node.name,
                                "--bound-object-uid", node["metadata"]["uid"]).stdout.strip()
        kubeconfig = os.path.join(self.dir, "daemon.kubeconfig")
        self.cp.write_token_kubeconfig(kubeconfig, token, NAMESPACE)
        argv = [self.args.plugin, "--sysfs-root", kernel.mount, "--kubelet-dir", self.node.root,
                "--state-dir", os.path.join(self.dir, state_dir), "--node-name", self.node.name,
                "--config", config_path, "--kubeconfig", kubeconfig]
        if self.args.real_kernel:
            # The lab VM has neither /dev/kvm nor /dev/vhost-vsock (TCG, no Kata): a real Kata
            # host's readiness would hold every vGPU back here.
            argv.append("--node-readiness-check=false")
        return controlplane._Process("kvgpu-device-plugin", argv, os.path.join(self.dir, "daemon.log"))

    def crash_and_restart_daemon(self):
        """The daemon killed (SIGKILL: no clean-up of its sockets or state) and started again, with
        its state directory (or, for the bite, a new empty one)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.daemon.popen.pid, signal.SIGKILL)
        self.daemon.popen.wait()
        self.daemon = self.start_daemon(self.kernel, "state-after-crash" if self.restart_stateless else "state")

    def refused(self):
        return self.daemon.refused_calls()

    # --- helpers -----------------------------------------------------------------------------

    def wait_for(self, ready, deadline=DEADLINE):
        return controlplane.wait_until(ready, deadline * self.slowdown, (self.daemon, self.node.kubelet, self.node.containerd))

    # Reads go through ControlPlane.call, asked again while they fail on the network: in the VM
    # lab's TCG guest under load, one GET outside any wait outlived its 30 s.
    def capacity(self, field="capacity"):
        _, node = self.cp.call("GET", "/api/v1/nodes/" + self.node.name, ok=(200,),
                               deadline=DEADLINE * self.slowdown)
        return {k: v for k, v in node["status"].get(field, {}).items() if k.startswith(DOMAIN + "/vgpu-")}

    def allocatable(self):
        """What kubelet counts healthy: none of a plugin's devices while it does not serve."""
        return self.capacity("allocatable")

    def pods(self):
        _, answer = self.cp.call("GET", "/api/v1/namespaces/%s/pods" % TENANT, ok=(200,),
                                 deadline=DEADLINE * self.slowdown)
        return {p["metadata"]["name"]: p for p in answer["items"]}

    def pod(self, name, resource):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT},
                "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 2,
                         "nodeSelector": {"kubernetes.io/hostname": self.node.name},
                         "containers": [{"name": "main", "image": kubelet_node.POD_IMAGE,
                                         "imagePullPolicy": "Never", "args": ["KVGPU_"],
                                         "resources": {"limits": {resource: "1"}}}]}}

    def create_pod(self, name, resource):
        self.cp.call("POST", "/api/v1/namespaces/%s/pods" % TENANT, self.pod(name, resource), ok=(201, 409),
                     deadline=DEADLINE * self.slowdown)

    def delete_pods(self, names):
        """Deletes the pods (their grace period as the spec gives it), without waiting for them."""
        for name in names:
            self.cp.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (TENANT, name), ok=(200, 202, 404),
                         deadline=DEADLINE * self.slowdown)

    def delete_pods_and_wait(self, names=None, deadline=DEADLINE):
        """Deletes the pods (None: every pod of the namespace), then waits until the API server holds
        none of them, as `kubectl delete --wait` does."""
        if names is None:
            self.cp.call("DELETE", "/api/v1/namespaces/%s/pods" % TENANT, deadline=DEADLINE * self.slowdown)
        else:
            self.delete_pods(names)

        def left():
            pods = set(self.pods())
            return sorted(pods & set(names) if names is not None else pods)

        if not self.wait_for(lambda: not left() or None, deadline=deadline):
            raise controlplane.ControlPlaneError("pods %s still there %.0f s after their deletion"
                                                 % (left()[:10], deadline * self.slowdown))

    def pod_vgpus(self, pod):
        return [u for k, v in self.node.container_env(pod).items() if k.endswith("_UUIDS") for u in v.split(",") if u]

    def pod_resources(self):
        """{(namespace, pod): [(resource, device ids)]} from kubelet's PodResources List."""
        import grpc
        with grpc.insecure_channel("unix://" + self.node.pod_resources_socket) as channel:
            answer = channel.unary_unary(LIST, request_serializer=self.pr.ListPodResourcesRequest.SerializeToString,
                                         response_deserializer=self.pr.ListPodResourcesResponse.FromString)(
                self.pr.ListPodResourcesRequest(), timeout=30)
        out = {}
        for p in answer.pod_resources:
            out[(p.namespace, p.name)] = [(d.resource_name, list(d.device_ids)) for c in p.containers for d in c.devices]
        return out

    def checkpoint(self):
        """{pod uid: {resource: [device ids]}} of kubelet's device-manager checkpoint."""
        with open(self.node.checkpoint) as f:
            data = json.load(f)["Data"]
        out = {}
        for e in data.get("PodDeviceEntries") or []:
            ids = [i for numa in (e.get("DeviceIDs") or {}).values() for i in numa]
            out.setdefault(e["PodUID"], {}).setdefault(e["ResourceName"], []).extend(ids)
        return out

    # --- one pod -----------------------------------------------------------------------------

    def one_pod(self):
        r = self.report
        caps = self.wait_for(lambda: self.capacity() if len(self.capacity()) >= 3 else None)
        if not r.check(bool(caps), "the plugin registers with the real kubelet: the Node shows %s/vgpu-<N> capacities"
                       % DOMAIN, "capacity %s; the daemon's log ends:\n%s" % (self.capacity(), self.daemon.log_tail())):
            raise controlplane.ControlPlaneError("no capacity: nothing more to check")
        self.resources = sorted(caps)
        print("     capacities: %s" % ", ".join("%s=%s" % kv for kv in sorted(caps.items())))
        resource = next((DOMAIN + "/vgpu-" + t for t in ("230", "mtty-2") if DOMAIN + "/vgpu-" + t in caps),
                        self.resources[0])
        vgpu_type = type_of(resource)
        lost_books = "lost-books" in self.bursts and not self.args.real_kernel
        if lost_books:
            # kubelet's checkpoint as it stands before the pod: written at the plugin's
            # registration and each of its lists since.
            stale = self.wait_for(lambda: read_file(self.node.checkpoint))
        self.create_pod("one", resource)
        running = self.wait_for(lambda: self._running("one"))
        r.check(bool(running), "a pod asking one %s is admitted and runs under runc" % resource,
                json.dumps((self.pods().get("one") or {}).get("status", {}))[:1500])
        if not running:
            return
        vgpus = self.kernel.vgpus()
        held = self.pod_vgpus(running)
        r.check(len(vgpus) == 1 and held and held[0] in vgpus and vgpus[held[0]][1] == vgpu_type,
                "Allocate created exactly the pod's vGPU (%s) in the %s kernel, and the container's "
                "environment names it" % (vgpu_type, self.kernel.kind),
                "kernel %s, the pod's env %s" % (vgpus, self.node.container_env(running)))
        if self.args.real_kernel and held:
            group = self.kernel.group(held[0])
            devices = self.node.container_vfio_devices(running)
            want = self.kernel.device_number("/dev/vfio/" + group) if group else None
            r.check(want is not None and devices.get("/dev/vfio/" + group) == want and
                    devices.get("/dev/vfio/vfio") == self.kernel.device_number("/dev/vfio/vfio"),
                    "the container gets the real kernel's /dev/vfio/<group> of its mdev (and /dev/vfio/vfio), "
                    "the same character devices",
                    "the mdev's IOMMU group %s is %s in sysfs; the container shows %s"
                    % (group, want, devices))
        listed = self.pod_resources().get((TENANT, "one"), [])
        r.check(len(listed) == 1 and listed[0][0] == resource and len(listed[0][1]) == 1,
                "kubelet's PodResources List names the pod's one %s device" % resource, str(listed))
        entries, nudged = self.checkpoint_entries(running["metadata"]["uid"], resource)
        r.check(entries.get(resource) and listed and entries[resource] == listed[0][1],
                "kubelet's checkpoint holds the same device for the pod%s" % (
                    " (after one more Allocate made kubelet write it again)" if nudged else ""),
                "%s vs %s" % (entries, listed))
        if lost_books and held:
            self.restart_over_stale_checkpoint(stale, held[0], running["metadata"]["uid"])
        self.delete_pods_and_wait(["one"] + (["nudge"] if nudged else []), DEADLINE)
        gone = self.wait_for(lambda: not self.kernel.vgpus() or None, deadline=GONE_DEADLINE)
        r.check(bool(gone), "the pod deleted, its vGPU goes (grace %s)" % self.grace, str(self.kernel.vgpus()))

    def restart_over_stale_checkpoint(self, stale, vgpu, uid):
        """kubelet restarted over `stale`, its checkpoint from before pod one's Allocate. A running
        container is admitted again without devices (upstream's devicesToAllocate, a restart's
        case), so kubelet's books lose the pod's device, as they would after any write that
        landed out of order before a restart. The pod still runs with its vGPU: it must stay.
        The daemon keeps it by the pod's UID, which it records with the owner once kubelet lists
        the pod holding the device and the API server shows the pod: waited for first (a restart
        in the moment before that, a pass at most, is a gap docs/device-plugin.md names)."""
        r = self.report
        recorded = self.wait_for(lambda: self.owner_recorded(vgpu, uid))
        r.check(bool(recorded), "the daemon records pod one, by its UID, as its vGPU's owner (state file)",
                str(read_file(self.state_file())))
        if not recorded:
            return
        print("     restarting kubelet over its checkpoint from before the pod's Allocate", flush=True)

        def put_back():
            with open(self.node.checkpoint, "wb") as f:
                f.write(stale)

        self.node.restart_kubelet(before_start=put_back)

        def lost():
            import grpc
            try:
                listed = self.pod_resources()
            except grpc.RpcError:
                return None
            return (TENANT, "one") in listed and not listed[(TENANT, "one")] and self._running("one")

        shown = self.wait_for(lost)
        r.check(bool(shown), "kubelet restarted over its checkpoint from before the pod's Allocate lists the "
                "running pod without its device (its books lost it)", "PodResources lists %s; the pod %s" % (
                    self.pod_resources().get((TENANT, "one")), (self.pods().get("one") or {}).get("status", {}).get("phase")))
        if not shown:
            return
        gone_at = None
        end = time.monotonic() + LOST_BOOKS_WATCH * self.slowdown
        while gone_at is None and time.monotonic() < end:
            if vgpu not in self.kernel.vgpus():
                gone_at = LOST_BOOKS_WATCH * self.slowdown - (end - time.monotonic())
            time.sleep(0.5)
        title = "a running pod whose device kubelet's books lost keeps its vGPU (watched %.0f s)" % (
            LOST_BOOKS_WATCH * self.slowdown)
        if gone_at is not None:
            # The daemon removes the vGPU of a pod the API server shows ended, rightly, and kubelet
            # may end pod one: once its pod sources are all ready it allocates again for a running
            # container (upstream devicesToAllocate), which fails before the plugin registers
            # again. Whether pod one still ran is read now: the removal does not end a pod.
            pod = self.pods().get("one") or {}
            status = pod.get("status", {})
            live = (pod.get("metadata", {}).get("uid") == uid and status.get("phase") == "Running"
                    and not pod.get("metadata", {}).get("deletionTimestamp"))
            if not live:
                print("     kubelet ended pod one before the watch did (phase %s, reason %s, %s): the vGPU "
                      "went with it, as it must; the step shows nothing this run" % (
                          status.get("phase"), status.get("reason"), status.get("message")), flush=True)
                return
        r.check(gone_at is None, title, "its vGPU %s left the kernel %.1f s after kubelet was back while the API "
                "server showed pod one running; the daemon's log of it and of the API server:\n%s" % (
                    vgpu, gone_at or 0, self.daemon.log_lines([vgpu, "API server", "%s/one" % TENANT])))

    def state_file(self):
        """The first daemon's state record (start_daemon's default state directory)."""
        return os.path.join(self.dir, "state", "device-plugin-state.json")

    def owner_recorded(self, vgpu, uid):
        """Whether the daemon's state file names pod `uid` as the owner of `vgpu`."""
        try:
            state = json.loads(read_file(self.state_file()) or b"{}")
        except ValueError:
            return False  # not a record the daemon wrote: asked again
        return any(v.get("vgpu") == vgpu and v.get("ownerUid") == uid for v in state.get("vgpus", []))

    def checkpoint_entries(self, uid, resource):
        """The checkpoint's entries for pod `uid` once they name its `resource`, and whether another
        pod had to be admitted first. kubelet snapshots its books under a lock but writes the file
        outside it, so a write begun by one of the daemon's ListAndWatch updates (sent during the
        Allocate) can land after the Allocate's own, with the books from before the pod: the file
        then lacks the pod until kubelet's next write. Another Allocate is such a write."""
        def named():
            entries = self.checkpoint().get(uid, {})
            return entries if entries.get(resource) else None

        entries = self.wait_for(named, deadline=10.0)
        if entries:
            return entries, False
        print("     the checkpoint does not name the pod yet: admitting another pod asking %s, so that "
              "kubelet writes it again" % resource, flush=True)
        self.create_pod("nudge", resource)
        self.wait_for(lambda: self._running("nudge"))
        return self.wait_for(named, deadline=30.0) or self.checkpoint().get(uid, {}), True

    def _running(self, name):
        p = self.pods().get(name)
        if p and p.get("status", {}).get("phase") == "Running" and self.pod_vgpus(p):
            return p
        return None

    # --- the burst ---------------------------------------------------------------------------

    def shared_story(self, shared, running):
        """What the daemon and kubelet logged about vGPUs two pods hold, and what kubelet's books
        say of those pods now."""
        if not shared:
            return ""
        names = sorted({n for ns in shared.values() for n in ns})
        uids = [running[n]["metadata"]["uid"] for n in names if n in running]
        listed = self.pod_resources()
        return "\nkubelet's PodResources: %s\nthe checkpoint: %s\nthe daemon's log:\n%s\nkubelet's log:\n%s" % (
            {n: listed.get((TENANT, n)) for n in names}, {u: self.checkpoint().get(u) for u in uids},
            "\n".join(self.daemon.log_lines(list(shared), limit=60)),
            "\n".join(self.node.kubelet.log_lines(names + uids, limit=60)))

    def running_vgpu(self, deleted):
        """(pod, vGPU) of a running pod not among `deleted`, if there is one."""
        return next(((n, v) for n, p in self.pods().items() if p.get("status", {}).get("phase") == "Running"
                     and n not in deleted for v in self.pod_vgpus(p)), None)

    def burst(self, prefix="burst", count=BURST, restarts=False):
        r = self.report
        what = "the burst" if not restarts else "across the restarts"
        types = [t for t in self.resources if "-mtty-" in t] if self.args.real_kernel else self.resources[:3]
        names = ["%s-%02d" % (prefix, i) for i in range(count)]
        restarted = {}  # what restarted -> the index of the first pod created after it
        want = {n: types[i % len(types)] for i, n in enumerate(names)}
        seen = {}  # vGPU id -> pod name, for every vGPU a running pod ever held
        live_removed = []

        def watch():
            """Every running pod's vGPU must still be in the kernel while the pod runs."""
            kernel = self.kernel.vgpus()
            for name, p in self.pods().items():
                if p.get("status", {}).get("phase") != "Running" or p["metadata"].get("deletionTimestamp"):
                    continue
                for v in self.pod_vgpus(p):
                    seen.setdefault(v, name)
                    if v not in kernel and (name, v) not in live_removed:
                        # Confirm: the pod is still running and not being deleted.
                        q = self.pods().get(name)
                        if q and q["metadata"]["uid"] == p["metadata"]["uid"] and \
                                not q["metadata"].get("deletionTimestamp") and v not in self.kernel.vgpus():
                            live_removed.append((name, v))

        deleted = set()
        for i, name in enumerate(names):
            self.create_pod(name, want[name])
            if i % 10 == 9:
                watch()
            if i == count // 2:
                # A third of the first half deleted while the rest still arrive.
                doomed = [n for n in names[:count // 2] if int(n[-2:]) % 3 == 0]
                self.delete_pods(doomed)
                deleted.update(doomed)
            if restarts and i == count // 3:
                print("     restarting kubelet after %s" % name, flush=True)
                self.node.restart_kubelet()
                restarted["kubelet"] = i + 1
            if restarts and i == 2 * count // 3:
                # The crash must find vGPUs of running pods to keep (on a busy machine the pods so
                # far may not have reached kubelet yet).
                self.wait_for(lambda: self.running_vgpu(deleted))
                print("     killing the daemon (SIGKILL) after %s and starting it again%s" % (
                    name, " without its state directory" if self.restart_stateless else ""), flush=True)
                self.crash_and_restart_daemon()
                restarted["the daemon"] = i + 1
            if self.remove_live and i == count // 2 + 5:
                victim = self.wait_for(lambda: self.running_vgpu(deleted))
                if victim:
                    print("     --bite: removing %s's vGPU %s behind the daemon's back" % victim)
                    self.kernel.remove(victim[1])

        stable = {"outcome": None, "since": 0.0}

        def settled():
            watch()
            pods = self.pods()
            if set(pods) & deleted:
                return None
            for p in pods.values():
                phase = p.get("status", {}).get("phase")
                if phase == "Running" and not self.pod_vgpus(p):
                    return None
                if phase == "Pending":
                    # Pending for good only when the scheduler says no room.
                    cond = [c for c in p.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"]
                    if not cond or cond[0].get("reason") != "Unschedulable":
                        return None
            # A restarted daemon or kubelet: until the plugin serves kubelet again, the Node shows
            # no allocatable vGPU and the scheduler finds no room for any pod, which it takes back
            # once the Node does (a busy machine took longer than the pods' creation to get there).
            if restarted and not any(int(self.allocatable().get(t, "0")) > 0 for t in types):
                return None
            # Settled when nothing changed for a while: a pod the scheduler found no room for a
            # moment ago is tried again when the Node changes (its backoff is 10 s at most).
            outcome = sorted((n, p.get("status", {}).get("phase"), p.get("spec", {}).get("nodeName"))
                             for n, p in pods.items())
            now = time.monotonic()
            if outcome != stable["outcome"]:
                stable.update(outcome=outcome, since=now)
            pending = any(phase == "Pending" for _, phase, _ in outcome)
            window = SETTLE_STABLE if pending or restarted else SETTLE_STABLE_NONE_PENDING
            return pods if now - stable["since"] >= window * self.slowdown else None

        pods = self.wait_for(settled, deadline=DEADLINE * 2)
        if not r.check(pods is not None, "%s: the pods settle: each running, failed or unschedulable" % what,
                       str({n: p.get("status", {}).get("phase") for n, p in self.pods().items()})):
            pods = self.pods()
        for _ in range(10):
            watch()
            time.sleep(0.5)
        phases = {}
        for p in pods.values():
            phases[p.get("status", {}).get("phase")] = phases.get(p.get("status", {}).get("phase"), 0) + 1
        print("     %s: %d pods created, %d deleted early; phases %s" % (prefix, count, len(deleted), phases))
        for n, p in sorted(pods.items()):
            if p.get("status", {}).get("phase") == "Failed":
                print("     %s failed: %s: %s" % (n, p["status"].get("reason"), p["status"].get("message", "")[:200]))
        running = {n: p for n, p in pods.items() if p.get("status", {}).get("phase") == "Running"}
        kernel = self.kernel.vgpus()
        holders = {}
        wrong_type = []
        for n, p in running.items():
            for v in self.pod_vgpus(p):
                holders.setdefault(v, []).append(n)
                t = type_of(want[n])
                if kernel.get(v, (None, t))[1] != t:
                    wrong_type.append("%s holds %s of type %s" % (n, v, kernel[v][1]))
        shared = {v: ns for v, ns in holders.items() if len(ns) > 1}
        r.check(len(running) > 0 and all(len(self.pod_vgpus(p)) == 1 for p in running.values()) and not shared
                and not wrong_type,
                "no vGPU shared (%s): each of the %d running pods holds one vGPU of its type, its own"
                % (what, len(running)), "shared %s; %s; running pods not holding one vGPU: %s%s"
                % (shared, wrong_type[:5], {n: (self.node.container_env(p), p.get("status", {}).get(
                    "containerStatuses")) for n, p in running.items() if len(self.pod_vgpus(p)) != 1},
                   self.shared_story(shared, running)))
        r.check(not live_removed, "no live vGPU removed (%s): every running pod's vGPU stayed in the kernel" % what,
                str(live_removed[:5]))
        for restart, first in sorted(restarted.items()):
            after = sorted(n for n in running if int(n[-2:]) >= first)
            r.check(bool(after), "after %s restarted, the plugin serves kubelet again: pods created after it "
                    "are admitted and run (%d of them)" % (restart, len(after)),
                    "phases of those pods: %s; the Node's allocatable %s; the daemon's log ends:\n%s"
                    % ({n: p.get("status", {}).get("phase") for n, p in pods.items() if int(n[-2:]) >= first},
                       self.allocatable(), self.daemon.log_tail()))
        if restarts:
            listed = self.pod_resources()
            devices = {}
            for n in running:
                for resource, ids in listed.get((TENANT, n), []):
                    for device in ids:
                        devices.setdefault((resource, device), []).append(n)
            short = sorted(n for n in running if sum(len(ids) for _, ids in listed.get((TENANT, n), [])) != 1)
            twice = {d: ns for d, ns in devices.items() if len(ns) > 1}
            r.check(not short and not twice, "after both restarts kubelet's PodResources gives each running pod "
                    "one device, none to two pods", "not one device: %s; shared: %s" % (short[:5], twice))
        self.delete_pods_and_wait(deadline=DEADLINE * 2)
        leftover = self.wait_for(lambda: not self.kernel.vgpus() or None, deadline=GONE_DEADLINE)
        r.check(bool(leftover), "none leaked (%s): with every pod deleted, the kernel holds no vGPU (grace %s)"
                % (what, self.grace), str(self.kernel.vgpus()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", required=True)
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--sim", help="kvgpu-sim (not with --real-kernel)")
    parser.add_argument("--bite", action="store_true")
    parser.add_argument("--real-kernel", action="store_true",
                        help="scenario 4: one pod and a burst on the VM lab's real kernel (boots it)")
    args = parser.parse_args()
    if not args.real_kernel and not args.sim:
        parser.error("--sim is required without --real-kernel")
    bin_dir, code = controlplane.peers_or_exit_code(args.release)
    if bin_dir is None:
        return code
    if args.real_kernel and os.environ.get("KVGPU_IN_VM") != "1":
        try:
            return run_in_lab_vm(sys.argv[1:], bin_dir)
        except controlplane.ControlPlaneError as e:
            print("FAIL: %s" % e)
            return 1
    if args.real_kernel:
        prepare_lab_guest()
    if not os.access(os.path.join(bin_dir, "kubelet"), os.X_OK):
        print("FAIL: %s/kubelet is not built: run tests/k8s/build-peers.sh %s" % (bin_dir, args.release))
        return 1
    missing = kubelet_node.missing_capabilities()
    if missing:
        print("SKIP: the real kubelet node cannot run here: " + "; ".join(missing))
        return controlplane.SKIP
    started = time.monotonic()
    try:
        if not args.bite:
            report = Report(clock=args.real_kernel)
            Scenario(args, report).run(bin_dir)
            print("%s in %.0f s" % ("PASS" if not report.failed else "FAILED: %d checks" % len(report.failed),
                                    time.monotonic() - started))
            return 0 if not report.failed else 1
        caught = []
        bites = (
            ("a daemon whose grace period is an hour", {"grace": "60m", "bursts": ("burst",)},
             ("none leaked (the burst)",)),
            ("a vGPU removed while its pod runs", {"remove_live": True, "bursts": ("burst",)},
             ("no live vGPU removed (the burst)",)),
            ("a daemon started again after its crash without its state directory",
             {"restart_stateless": True, "bursts": ("restart",)},
             ("no live vGPU removed (across", "none leaked (across")))
        if args.real_kernel:
            bites = (("the node's /dev/vfio/<group> a stand-in, not the kernel's group device",
                      {"vfio_impostor": True}, ("the container gets the real kernel's /dev/vfio/<group>",)),)
        for what, kwargs, must_fail in bites:
            print("--- bite: %s (must fail: %s)" % (what, " or ".join(must_fail)), flush=True)
            report = Report()
            Scenario(args, report, **kwargs).run(bin_dir)
            hit = any(f.startswith(must_fail) for f in report.failed)
            print("%s: %s" % ("caught" if hit else "NOT CAUGHT", what))
            caught.append(hit)
        print("%s in %.0f s" % ("PASS (every break caught)" if all(caught) else "FAILED", time.monotonic() - started))
        return 0 if all(caught) else 1
    except Skip as e:
        print("SKIP: %s" % e)
        return controlplane.SKIP
    except controlplane.ControlPlaneError as e:
        print("FAIL: %s" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
