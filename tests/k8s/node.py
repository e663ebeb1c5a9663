#!/usr/bin/python3
"""A real Kubernetes node for tests: the pinned release's kubelet and containerd v2 (containerd,
its runc shim and ctr; both built from source by tests/k8s/build-peers.sh, containerd pinned by
tests/k8s/containerd/) with Debian's runc, joined to a tests/k8s/controlplane.py control plane
on loopback. Nothing is pulled: the pod sandbox image and the workload image are made here, a
static program (tests/k8s/image/kvgpu-pod.cpp) in an OCI image imported with `ctr`.

    with controlplane.ControlPlane(bin_dir, controller_manager=True, scheduler=True) as cp, \\
            KubeletNode(cp, bin_dir) as node:
        cp.kubectl("get", "node", node.name)     # Ready
        node.restart_kubelet()

What is fixed by upstream, and so shared by every node on this machine:
  - kubelet's device-plugin directory is /var/lib/kubelet/device-plugins (the device manager
    takes pluginapi.KubeletSocket, whatever --root-dir says), so the kubelet's root is
    /var/lib/kubelet itself: one node at a time (an flock on /run/kvgpu-kubelet-node.lock; a
    second waits). A root left by a killed run is recognised by its marker file and wiped; a
    root without the marker belongs to someone else and the node refuses to start.
  - kubelet sets four kernel tunables at start (vm.overcommit_memory=1, vm.panic_on_oom=0,
    kernel.panic=10, kernel.panic_on_oops=1; protectKernelDefaults=false lets it): they are read
    before and written back at stop.
Everything else lives in a temporary directory: containerd's root, state, socket and network
namespaces (netns_mounts_under_state_dir), the CNI configuration (ptp + host-local from
Debian's containernetworking-plugins, an address range of its own), the certificates. The
kubelet's cgroups live under a cgroup root of its own in each cgroup v1 hierarchy.

cgroups: this machine is cgroup v1 (hybrid: /sys/fs/cgroup is a tmpfs of v1 hierarchies plus
`unified`); kubelet 1.35 and later refuse v1 unless the configuration says `failCgroupV1: false`
(KEP-5573), which it does. The cgroup driver is cgroupfs on both sides (no systemd here):
containerd's runc runtime says SystemdCgroup = false, which containerd v2 answers in the
RuntimeConfig CRI call kubelet asks (cmd/kubelet/app/server.go, getCgroupDriverFromCRI).
containerd v2 still runs on cgroup v1 (deprecated since 2.2, its log warns).

CDI: containerd v2 resolves the CDI devices kubelet hands it (CRI's CDIDevices, from a DRA
driver's NodePrepareResources answer) from the spec files in `cdi_spec_dirs`: the node's
`cdi_dirs` (by default the standard /etc/cdi and /var/run/cdi), where the DRA scenario points
them at its daemon's CDI directory.

Stopping leaves nothing: kubelet and containerd stopped, every process left in the node's
cgroups and every containerd shim of its socket killed (by pid), every mount under its
directories unmounted, its cgroups removed, the tunables restored.

Started by hand (docs/development.md):

    /usr/bin/python3 tests/k8s/node.py up --release 1.36

starts a control plane (with controller-manager and scheduler) and the node, prints the
kubeconfig, and runs until interrupted.

Only the Python standard library, openssl, g++ (the static program), and the cached containerd.
"""
import argparse
import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import controlplane  # noqa: E402

KUBELET_ROOT = "/var/lib/kubelet"
ROOT_MARKER = ".kvgpu-test-node"
LOCK_PATH = "/run/kvgpu-kubelet-node.lock"
PAUSE_IMAGE = "kvgpu.local/pause:1"
POD_IMAGE = "kvgpu.local/pod:1"
CNI_BIN = "/usr/lib/cni"
POD_CIDR = "10.244.77.0/24"
# kubelet's setupKernelTunables (pkg/kubelet/cm/container_manager_linux.go).
TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops")
CGROUP_V1 = "/sys/fs/cgroup"
CONTAINERD_PROGRAMS = ("containerd", "ctr", "containerd-shim-runc-v2")
# containerd's own defaults (pkg/cdi's DefaultStaticDir and DefaultDynamicDir).
DEFAULT_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


def containerd_bin_dir():
    """The cache directory build-peers.sh builds the pinned containerd v2 into."""
    out = subprocess.run(["bash", os.path.join(HERE, "build-peers.sh"), "--print-bin-dir", "containerd"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def containerd_built(bin_dir=None):
    bin_dir = bin_dir or containerd_bin_dir()
    return all(os.access(os.path.join(bin_dir, p), os.X_OK) for p in CONTAINERD_PROGRAMS)


def missing_capabilities():
    """What this machine lacks to run a node (an empty list when nothing); each a sentence."""
    missing = []
    for program in ("runc", "g++", "openssl"):
        if shutil.which(program) is None:
            missing.append("%s is not installed (scripts/deps/kubelet-node.txt)" % program)
    # Built by tests/k8s/build-peers.sh (CTest's k8s.build_containerd fixture); where Go is
    # missing to build it, the node cannot run. Where Go is here and it is not built, KubeletNode
    # fails, naming the command.
    if not containerd_built() and shutil.which("go") is None and not os.access("/usr/local/go/bin/go", os.X_OK):
        missing.append("containerd v2 is not built in %s and Go is not installed to build it "
                       "(tests/k8s/build-peers.sh containerd)" % containerd_bin_dir())
    for plugin in ("ptp", "host-local", "loopback"):
        if not os.access(os.path.join(CNI_BIN, plugin), os.X_OK):
            missing.append("the CNI plugin %s/%s is missing (containernetworking-plugins)" % (CNI_BIN, plugin))
    if os.geteuid() != 0:
        missing.append("not root: kubelet and containerd need root")
    if not os.path.isdir(os.path.join(CGROUP_V1, "memory")) and \
            not os.path.exists(os.path.join(CGROUP_V1, "cgroup.controllers")):
        missing.append("no cgroup hierarchy at %s" % CGROUP_V1)
    return missing


def cgroup_v1():
    """True on a cgroup v1 (or hybrid) machine, False on a unified (v2) one."""
    return not os.path.exists(os.path.join(CGROUP_V1, "cgroup.controllers"))


# --- images ----------------------------------------------------------------------------------

def _blob(blobs, data, media_type):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def oci_archive(path, name, files, entrypoint):
    """Writes an OCI image layout archive of one image `name` (repository:tag): one layer with
    `files` ({path in the image: (bytes, mode)}), run as `entrypoint`. `ctr images import` takes
    the name from the io.containerd.image.name annotation."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({os.path.dirname(p).strip("/") for p in files} - {""})
        for d in dirs:
            info = tarfile.TarInfo(d + "/")
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for p, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(p.strip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    raw = layer.getvalue()
    compressed = gzip.compress(raw, mtime=0)
    blobs = {}
    layer_desc = _blob(blobs, compressed, "application/vnd.oci.image.layer.v1.tar+gzip")
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": entrypoint, "Env": ["PATH=/"], "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}}
    config_desc = _blob(blobs, json.dumps(config, sort_keys=True).encode(),
                        "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc, "layers": [layer_desc]}
    manifest_desc = _blob(blobs, json.dumps(manifest, sort_keys=True).encode(),
                          "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {"io.containerd.image.name": name,
                                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest_desc]}
    with tarfile.open(path, "w") as tar:
        def add(member, data):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add("blobs/sha256/" + digest.split(":", 1)[1], data)


def build_program(out_dir):
    """tests/k8s/image/kvgpu-pod.cpp, static, into out_dir; its path."""
    binary = os.path.join(out_dir, "kvgpu-pod")
    result = subprocess.run(["g++", "-std=c++20", "-static", "-O2", "-o", binary,
                             os.path.join(HERE, "image", "kvgpu-pod.cpp")], capture_output=True, text=True)
    if result.returncode != 0:
        raise controlplane.ControlPlaneError("building kvgpu-pod failed:\n" + result.stderr)
    return binary


# --- the node --------------------------------------------------------------------------------

class KubeletNode:
    """kubelet + containerd + runc joined to a ControlPlane, as Node `name`."""

    def __init__(self, cp, bin_dir, name="kvgpu-node", workdir=None, kubelet_config=None, keep=False,
                 deadline=180.0, lock_wait=1800.0, cdi_dirs=DEFAULT_CDI_DIRS):
        self.cp = cp
        self.bin_dir = bin_dir
        self.name = name
        self.extra_config = dict(kubelet_config or {})
        self.keep = keep
        self.deadline = deadline
        self.lock_wait = lock_wait
        self._own_dir = workdir is None
        self.dir = workdir
        self.kubelet = self.containerd = None
        self._lock = None
        self._tunables = {}
        self._cgroup_root = None
        self.root = KUBELET_ROOT
        self.cdi_dirs = list(cdi_dirs)
        kubelet = os.path.join(bin_dir, "kubelet")
        if not os.access(kubelet, os.X_OK):
            raise controlplane.ControlPlaneError("%s is missing: build it with tests/k8s/build-peers.sh" % kubelet)
        self.containerd_dir = containerd_bin_dir()
        if not containerd_built(self.containerd_dir):
            raise controlplane.ControlPlaneError("containerd v2 is not built in %s: build it with "
                                                 "tests/k8s/build-peers.sh containerd" % self.containerd_dir)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    @property
    def containerd_socket(self):
        return self.path("containerd", "containerd.sock")

    @property
    def device_plugin_dir(self):
        return os.path.join(self.root, "device-plugins")

    @property
    def checkpoint(self):
        return os.path.join(self.device_plugin_dir, "kubelet_internal_checkpoint")

    @property
    def pod_resources_socket(self):
        return os.path.join(self.root, "pod-resources", "kubelet.sock")

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # --- start -----------------------------------------------------------------------------

    def start(self):
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="kvgpu-node-")
        os.makedirs(self.dir, exist_ok=True)
        try:
            self._take_lock()
            self._claim_root()
            self._cgroup_root = "/kvgpu-node-%d" % os.getpid()
            self._make_cgroup_root()
            self._tunables = {t: self._read_tunable(t) for t in TUNABLES}
            self._start_containerd()
            self._import_images()
            self._write_cni()
            self._make_credentials()
            self._write_kubelet_config()
            self.start_kubelet()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def _take_lock(self):
        self._lock = open(LOCK_PATH, "w")
        end = time.monotonic() + self.lock_wait
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > end:
                    raise controlplane.ControlPlaneError("another kubelet node holds %s for over %.0f s"
                                                         % (LOCK_PATH, self.lock_wait))
                time.sleep(1)

    def _claim_root(self):
        if os.path.isdir(self.root) and os.listdir(self.root):
            if not os.path.exists(os.path.join(self.root, ROOT_MARKER)):
                raise controlplane.ControlPlaneError(
                    "%s exists and is not a test node's (no %s): a kubelet of this machine's own? "
                    "Not touching it." % (self.root, ROOT_MARKER))
            # A run killed before it could stop: its mounts first, then its files.
            _unmount_under(self.root)
            shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(self.root, exist_ok=True)
        with open(os.path.join(self.root, ROOT_MARKER), "w") as f:
            f.write("made by tests/k8s/node.py for %s; removed when it stops\n" % self.dir)

    def _subsystems(self):
        if not cgroup_v1():
            return [CGROUP_V1]
        return [os.path.join(CGROUP_V1, s) for s in sorted(os.listdir(CGROUP_V1))
                if s != "unified" and os.path.isdir(os.path.join(CGROUP_V1, s))]

    def _make_cgroup_root(self):
        if not cgroup_v1():
            # cgroup v2: kubelet wants cpu, cpuset, memory and pids in its --cgroup-root's
            # cgroup.controllers, which are what the parent (the root here) enables for its children.
            with open(os.path.join(CGROUP_V1, "cgroup.controllers")) as f:
                available = f.read().split()
            for controller in available:
                with contextlib.suppress(OSError), open(os.path.join(CGROUP_V1, "cgroup.subtree_control"), "w") as f:
                    f.write("+" + controller)
        # kubelet wants its --cgroup-root to exist in every hierarchy (container manager).
        for hierarchy in self._subsystems():
            path = hierarchy + self._cgroup_root
            os.makedirs(path, exist_ok=True)
            if os.path.basename(hierarchy) == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    with open(os.path.join(hierarchy, f)) as src, open(os.path.join(path, f), "w") as dst:
                        dst.write(src.read())

    @staticmethod
    def _read_tunable(name):
        with open("/proc/sys/" + name) as f:
            return f.read().strip()

    def _start_containerd(self):
        base = self.path("containerd")
        os.makedirs(base, exist_ok=True)
        config = self.path("containerd", "config.toml")
        runc = os.environ.get("KVGPU_NODE_RUNC")
        with open(config, "w") as f:
            f.write("""# containerd v2 (tests/k8s/containerd/, built by tests/k8s/build-peers.sh), written by
# tests/k8s/node.py. Version 3 is containerd 2.0's format (the CRI plugin split in three:
# io.containerd.grpc.v1.cri serves, io.containerd.cri.v1.images and io.containerd.cri.v1.runtime
# hold the settings); 2.4 reads it as it is.
version = 3
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.blockfile",
                    "io.containerd.snapshotter.v1.erofs",
                    "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{base}/containerd.sock"
[ttrpc]
  address = "{base}/containerd.sock.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"
[plugins."io.containerd.nri.v1.nri"]
  # No NRI plugin here; its default socket would be the machine's /var/run/nri/nri.sock.
  disable = true
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # Made here, never pulled (tests/k8s/image/kvgpu-pod.cpp).
    sandbox = "{pause}"
[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  # This machine's root lacks CAP_SYS_RESOURCE (a container), so no process here may lower its
  # oom_score_adj: kubelet's -998 for a sandbox fails runc's nsexec ("failed to update
  # /proc/self/oom_score_adj: Permission denied"). containerd raises such values to its own.
  restrict_oom_score_adj = true
  # CDI is always on in containerd 2.x: the devices kubelet names (CRI's CDIDevices) are
  # resolved from the specs in these directories.
  cdi_spec_dirs = {cdi_dirs}
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{base}/runc"{binary}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{base}/net.d"
""".format(base=base, pause=PAUSE_IMAGE, cni_bin=CNI_BIN, cdi_dirs=json.dumps(self.cdi_dirs),
           binary='\n        BinaryName = "%s"' % runc if runc else ""))
        # The shim (containerd-shim-runc-v2) is found on PATH: the cached one first.
        env = dict(os.environ, PATH=self.containerd_dir + os.pathsep + os.environ.get("PATH", ""))
        self.containerd = controlplane._Process("containerd", [os.path.join(self.containerd_dir, "containerd"),
                                                               "--config", config],
                                                self.path("containerd.log"), env=env)
        self._wait("containerd serves its socket", lambda: self.ctr("version", check=False).returncode == 0,
                   [self.containerd])

    def _container_log(self, pod, container):
        """The lines a container's processes printed, from its logs under kubelet's podLogsDir,
        oldest attempt first (<restart count>.log: an attempt kubelet's restart cut short before
        it ran leaves an empty 0.log, and the next attempt logs to 1.log); [] before it logged."""
        meta = pod["metadata"]
        directory = os.path.join(self.path("pod-logs"), "%s_%s_%s" % (meta["namespace"], meta["name"], meta["uid"]),
                                 container)
        lines = []
        with contextlib.suppress(OSError):
            attempts = sorted(int(n[:-4]) for n in os.listdir(directory) if re.fullmatch(r"\d+\.log", n))
            for attempt in attempts:
                with contextlib.suppress(OSError), open(os.path.join(directory, "%d.log" % attempt)) as f:
                    lines.extend(line.rstrip("\n") for line in f)
        return lines

    def container_env(self, pod, prefix="KVGPU_", container="main"):
        """The variables a container's process printed (the test workload prints its environment
        as ` env NAME=value` lines); {} before it logged."""
        env = {}
        for line in self._container_log(pod, container):
            m = re.search(r" env (%s\w+)=(.*)$" % prefix, line)
            if m:
                env[m.group(1)] = m.group(2)
        return env

    def container_vfio_devices(self, pod, container="main"):
        """{path: (major, minor)} of the character devices under /dev/vfio the container's process
        found (the test workload prints them as ` dev PATH MAJOR:MINOR` lines)."""
        devices = {}
        for line in self._container_log(pod, container):
            m = re.search(r" dev (/dev/vfio/\S+) (\d+):(\d+)$", line)
            if m:
                devices[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        return devices

    def ctr(self, *args, check=True):
        result = subprocess.run([os.path.join(self.containerd_dir, "ctr"), "--address", self.containerd_socket, "--namespace", "k8s.io", *args],
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise controlplane.ControlPlaneError("ctr %s failed: %s%s" % (" ".join(args), result.stdout,
                                                                            result.stderr))
        return result

    def _import_images(self):
        images = self.path("images")
        os.makedirs(images, exist_ok=True)
        binary = build_program(images)
        with open(binary, "rb") as f:
            program = f.read()
        for name, files, entrypoint in ((PAUSE_IMAGE, {"/pause": (program, 0o755)}, ["/pause"]),
                                        (POD_IMAGE, {"/kvgpu-pod": (program, 0o755)}, ["/kvgpu-pod"])):
            archive = os.path.join(images, name.replace("/", "_").replace(":", "_") + ".tar")
            oci_archive(archive, name, files, entrypoint)
            self.ctr("images", "import", archive)
        listed = self.ctr("images", "list", "-q").stdout.split()
        for name in (PAUSE_IMAGE, POD_IMAGE):
            if name not in listed:
                raise controlplane.ControlPlaneError("ctr import did not name %s (listed: %s)" % (name, listed))

    def _write_cni(self):
        os.makedirs(self.path("containerd", "net.d"), exist_ok=True)
        conf = {"cniVersion": "0.4.0", "name": "kvgpu-test", "plugins": [
            {"type": "ptp", "ipMasq": False,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                      "dataDir": self.path("cni-ipam")}},
            {"type": "loopback"}]}
        with open(self.path("containerd", "net.d", "10-kvgpu-test.conflist"), "w") as f:
            json.dump(conf, f, indent=1)

    def _make_credentials(self):
        pki = self.path("pki")
        os.makedirs(pki, exist_ok=True)
        ca_dir = os.path.dirname(self.cp.ca)
        controlplane._openssl(
            "req", "-x509", "-CA", os.path.join(ca_dir, "ca.crt"), "-CAkey", os.path.join(ca_dir, "ca.key"),
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "kubelet-client.key", "-out", "kubelet-client.crt", "-days", "2",
            "-subj", "/O=system:nodes/CN=system:node:" + self.name,
            "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "keyUsage=critical,digitalSignature",
            "-addext", "extendedKeyUsage=clientAuth", cwd=pki)
        self.kubeconfig = self.path("kubelet.kubeconfig")
        self.cp.write_kubeconfig(self.kubeconfig, os.path.join(pki, "kubelet-client.crt"),
                                 os.path.join(pki, "kubelet-client.key"))

    def _write_kubelet_config(self):
        port, healthz = controlplane._free_ports(2)
        self.node_ip = _node_ip()
        self.healthz_port = healthz
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # This machine is cgroup v1; kubelet 1.35+ refuses it by default (KEP-5573).
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs", "cgroupRoot": self._cgroup_root,
            "containerRuntimeEndpoint": "unix://" + self.containerd_socket,
            # kubelet refuses a loopback node IP: it serves on the address of the default route
            # (only clients with a certificate of the test CA get in).
            "address": self.node_ip, "port": port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": healthz,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": self.cp.ca}},
            "authorization": {"mode": "AlwaysAllow"},
            "tlsCertFile": "", "tlsPrivateKeyFile": "",
            "failSwapOn": False,
            "podLogsDir": self.path("pod-logs"),
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            # Nothing can be pulled here: the images are imported (ctr) and pods say
            # imagePullPolicy: Never; the sandbox image is containerd's sandbox_image, local too.
            # The image garbage collector never removes them.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "imageMinimumGCAge": "876000h",
            # A shared build machine's disk and memory are not this node's to guard: no eviction.
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "nodefs.inodesFree": "0%",
                             "imagefs.available": "0%", "imagefs.inodesFree": "0%"},
            "evictionPressureTransitionPeriod": "5s",
            "protectKernelDefaults": False,
            "podCIDR": POD_CIDR,
            "maxPods": 110,
            "registerNode": True,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "serializeImagePulls": False,
            "kubeAPIQPS": 100, "kubeAPIBurst": 200,
            "containerLogMaxSize": "1Mi",
            "runtimeRequestTimeout": "4m",
        }
        config.update(self.extra_config)
        self.kubelet_config = self.path("kubelet-config.json")
        with open(self.kubelet_config, "w") as f:
            json.dump(config, f, indent=1)

    def start_kubelet(self):
        argv = [os.path.join(self.bin_dir, "kubelet"), "--config", self.kubelet_config,
                "--kubeconfig", self.kubeconfig, "--root-dir", self.root,
                "--hostname-override", self.name, "--node-ip", self.node_ip,
                "--cert-dir", self.path("kubelet-pki"), "--v", "2",
                # The device manager's allocations (manager.go logs them at 3 and 4), for a failed
                # check to show which device kubelet gave which pod.
                "--vmodule", "manager=4"]
        self.kubelet = controlplane._Process("kubelet", argv, self.path("kubelet.log"))

    def stop_kubelet(self):
        if self.kubelet:
            self.kubelet.stop()
            self.kubelet = None

    def restart_kubelet(self, before_start=None):
        """kubelet stopped (SIGTERM) and started again with the same configuration; returns once
        it serves /healthz and the device-plugin registration socket again. `before_start` runs
        while kubelet is down."""
        self.stop_kubelet()
        if before_start:
            before_start()
        self.start_kubelet()
        self._wait("the restarted kubelet is healthy", self._healthy, [self.kubelet, self.containerd])

    def _healthy(self):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.healthz_port, timeout=5)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200 and os.path.exists(
                os.path.join(self.device_plugin_dir, "kubelet.sock"))
        finally:
            conn.close()

    def node_ready(self):
        status, node = self.cp.request("GET", "/api/v1/nodes/" + self.name)
        if status != 200:
            return False
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

    def wait_ready(self):
        self._wait("Node %s is Ready" % self.name, lambda: self._healthy() and self.node_ready(),
                   [self.kubelet, self.containerd])

    def _wait(self, what, ready, watched, deadline=None):
        end = time.monotonic() + (deadline or self.deadline)
        last = None
        while True:
            for process in watched:
                if process is None or not process.alive():
                    raise controlplane.ControlPlaneError("%s exited before %s; its log ends:\n%s" % (
                        process.name, what, process.log_tail(60)))
            try:
                if ready():
                    return
            except (OSError, controlplane.ControlPlaneError) as e:
                last = e
            if time.monotonic() > end:
                tails = "\n".join("--- %s:\n%s" % (p.name, p.log_tail(40)) for p in watched if p)
                raise controlplane.ControlPlaneError("%s not within %.0f s (last error: %s)\n%s"
                                                     % (what, deadline or self.deadline, last, tails))
            time.sleep(0.5)

    # --- stop ------------------------------------------------------------------------------

    def leftovers(self):
        """What of this node is still on the machine: [sentence]; empty after a clean stop."""
        found = []
        for pid in self._cgroup_pids():
            found.append("process %d in the node's cgroups" % pid)
        for pid in self._shim_pids():
            found.append("containerd shim %d" % pid)
        for target in _mounts_under(self.root) + (_mounts_under(self.dir) if self.dir else []):
            found.append("mount %s" % target)
        if self._cgroup_root:
            for hierarchy in self._subsystems():
                if os.path.isdir(hierarchy + self._cgroup_root):
                    found.append("cgroup %s" % (hierarchy + self._cgroup_root))
        return found

    def _cgroup_pids(self):
        pids = set()
        if not self._cgroup_root:
            return pids
        for hierarchy in self._subsystems():
            for dirpath, _, files in os.walk(hierarchy + self._cgroup_root):
                if "cgroup.procs" in files:
                    with contextlib.suppress(OSError), open(os.path.join(dirpath, "cgroup.procs")) as f:
                        pids.update(int(p) for p in f.read().split())
        return pids

    def _shim_pids(self):
        pids = []
        if not self.dir:
            return pids
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]).startswith(b"containerd-shim") and \
                    self.containerd_socket.encode() in argv:
                pids.append(int(entry))
        return pids

    def stop(self):
        self.stop_kubelet()
        # The pods' processes, then their shims, each by pid; containerd last.
        for _ in range(3):
            pids = self._cgroup_pids() | set(self._shim_pids())
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        if self.containerd:
            self.containerd.stop()
            self.containerd = None
        if self.dir:
            _unmount_under(self.dir)
        _unmount_under(self.root)
        if self._cgroup_root:
            for hierarchy in self._subsystems():
                top = hierarchy + self._cgroup_root
                for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                    with contextlib.suppress(OSError):
                        os.rmdir(dirpath)
        for name, value in self._tunables.items():
            with contextlib.suppress(OSError):
                if self._read_tunable(name) != value:
                    with open("/proc/sys/" + name, "w") as f:
                        f.write(value)
        if os.path.exists(os.path.join(self.root, ROOT_MARKER)) and not _mounts_under(self.root):
            shutil.rmtree(self.root, ignore_errors=True)
        if self._own_dir and self.dir and not self.keep and not _mounts_under(self.dir):
            shutil.rmtree(self.dir, ignore_errors=True)
        if self._lock:
            self._lock.close()
            self._lock = None


def _node_ip():
    """The machine's address on its default route (no packet is sent)."""
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("203.0.113.1", 9))
        return s.getsockname()[0]
    finally:
        s.close()


def _mounts_under(top):
    top = os.path.realpath(top).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            target = line.split()[4].replace("\\040", " ")
            if (target + "/").startswith(top):
                found.append(target)
    return found


def _unmount_under(top):
    for target in sorted(set(_mounts_under(top)), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)


def main():
    parser = argparse.ArgumentParser(description="Start a real kubelet node joined to a real control plane.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start both, print how to reach them, run until interrupted")
    up.add_argument("--release", required=True, help="a release pinned in tests/k8s/peers, e.g. 1.36")
    up.add_argument("--name", default="kvgpu-node")
    args = parser.parse_args()
    missing = missing_capabilities()
    if missing:
        print("node: cannot run here: " + "; ".join(missing), file=sys.stderr)
        return 1
    bin_dir = controlplane.bin_dir_for(args.release)

    def interrupted(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    started = time.monotonic()
    try:
        with controlplane.ControlPlane(bin_dir, controller_manager=True, scheduler=True) as cp, \
                KubeletNode(cp, bin_dir, name=args.name) as node:
            print("control plane and Node %s Ready in %.1f s; logs in %s and %s"
                  % (node.name, time.monotonic() - started, cp.dir, node.dir))
            print("  export KUBECONFIG=%s" % cp.kubeconfig)
            print("  %s/kubectl get nodes" % bin_dir)
            print("  ctr --address %s -n k8s.io containers ls" % node.containerd_socket)
            print("Ctrl-C stops both.", flush=True)
            while True:
                signal.pause()
    except KeyboardInterrupt:
        pass
    except controlplane.ControlPlaneError as e:
        print("node: %s" % e, file=sys.stderr)
        return 1
    print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
