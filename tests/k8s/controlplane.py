#!/usr/bin/python3
"""A real Kubernetes control plane for tests: etcd, kube-apiserver and, when asked,
kube-controller-manager and kube-scheduler, built by tests/k8s/build-peers.sh, on loopback ports
chosen free, in a temporary directory that holds everything they write.

    with ControlPlane(bin_dir, controller_manager=True, scheduler=True) as cp:
        cp.kubectl("get", "nodes")              # as the admin (system:masters)
        cp.request("GET", "/api/v1/nodes", token=t)  # as whoever the bearer token names

The API server authenticates client certificates signed by the plane's own CA and ServiceAccount
tokens it signs itself, authorizes with Node,RBAC, and serves resource.k8s.io/v1. Each component
runs in its own process group, dies with the process that started it (PR_SET_PDEATHSIG: a test
killed by CTest's timeout leaves nothing behind), and is stopped with SIGTERM, then SIGKILL.

Started by hand for debugging (docs/development.md):

    /usr/bin/python3 tests/k8s/controlplane.py up --release 1.36 [--controller-manager]
        [--scheduler [--scheduler-config FILE]] [--feature-gates G=true,...] [--dir DIR]

prints the kubeconfig to use and runs until interrupted.

Only the Python standard library and openssl: Debian's /usr/bin/python3 runs it.
"""
import argparse
import contextlib
import ctypes
import http.client
import http.server
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PR_SET_PDEATHSIG = 1
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # the first address of SERVICE_CIDR: the `kubernetes` Service


class ControlPlaneError(Exception):
    pass


class _PortTaken(ControlPlaneError):
    """A port picked as free was taken by someone else before the component bound it."""


def bin_dir_for(release):
    """The cache directory build-peers.sh builds `release` (e.g. "1.36") into."""
    out = subprocess.run(["bash", os.path.join(HERE, "build-peers.sh"), "--print-bin-dir", release],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


# The exit status CTest takes for a skip (SKIP_RETURN_CODE in tests/k8s/CMakeLists.txt).
SKIP = 77


def peers_or_exit_code(release):
    """(the bin directory of `release`, None) where its programs are built; else (None, the
    scenario's exit status): SKIP where Go is missing to build them, 1 where they should have
    been built (scripts/test.sh builds them)."""
    bin_dir = bin_dir_for(release)
    if all(os.access(os.path.join(bin_dir, p), os.X_OK) for p in ("etcd", "kube-apiserver", "kubectl")):
        return bin_dir, None
    if shutil.which("go") is None and not os.access("/usr/local/go/bin/go", os.X_OK):
        print("SKIP: Kubernetes %s's programs are not built in %s and Go is not installed to build "
              "them (tests/k8s/build-peers.sh needs Go 1.26 and the module proxy)" % (release, bin_dir))
        return None, SKIP
    print("FAIL: Kubernetes %s's programs are not built in %s: run tests/k8s/build-peers.sh %s "
          "(scripts/test.sh does)" % (release, bin_dir, release))
    return None, 1


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# Where listening ports are picked: outside the kernel's ephemeral range, which bind()'s port 0
# picks from and every outgoing connection takes its local port from. A program restarted on the
# port it had (kubelet in scenario_kubelet, its port and healthz port) can find a port of that
# range taken, while it was down, by one of the many short connections the tests beside it open to
# their API servers; outside it only another listener can take it.
LISTEN_PORTS_LOWEST = 10000


def _ephemeral_ports():
    """The kernel's range of local ports for outgoing connections (first, last)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first, last = (int(v) for v in f.read().split())
        return first, last
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _listen_port_ranges():
    """[(first, last)] of the ports _free_ports picks from."""
    first, last = _ephemeral_ports()
    ranges = [(lo, hi) for lo, hi in ((LISTEN_PORTS_LOWEST, first - 1), (last + 1, 65535)) if hi - lo >= 100]
    return ranges or [(1024, 65535)]  # a machine whose ephemeral range is nearly everything


def _free_ports(count, ranges=None):
    """`count` distinct ports that nothing is bound to now on any address (each bound, then released),
    picked at random from `ranges` (outside the ephemeral range), so that no outgoing connection
    takes one even while the program given it is down for a restart."""
    ranges = ranges or _listen_port_ranges()
    rng = random.SystemRandom()
    sockets = []
    try:
        for _ in range(2000):
            if len(sockets) == count:
                break
            lo, hi = rng.choices(ranges, weights=[hi - lo + 1 for lo, hi in ranges])[0]
            port = rng.randint(lo, hi)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("", port))  # the wildcard: free on every address, kubelet's node IP too
            except OSError:
                s.close()
                continue
            sockets.append(s)
        if len(sockets) < count:
            raise ControlPlaneError("no %d free ports in %s" % (count, ranges))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _openssl(*args, cwd):
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ControlPlaneError("openssl %s failed: %s" % (" ".join(args), result.stderr.strip()))


# What a request to one of the plane's servers raises when the network, not the server's answer,
# failed: refused, cut or timed out. Asked again by wait_until and ControlPlane.call.
NETWORK_ERRORS = (OSError, http.client.HTTPException)


def wait_until(ready, deadline, watched):
    """ready()'s first truthy answer, asked every half second for `deadline` seconds (None after
    that); a ControlPlaneError, with its log's end, as soon as a `watched` process has exited.
    A question that fails on the network (a request refused, cut or timed out) is asked again:
    on a busy machine one GET of the API server in the VM lab's TCG guest took over 30 s."""
    end = time.monotonic() + deadline
    failed = None
    while True:
        for p in watched:
            if p is not None and not p.alive():
                raise ControlPlaneError("%s exited; its log ends:\n%s" % (p.name, p.log_tail()))
        try:
            got = ready()
        except NETWORK_ERRORS as e:
            got, failed = None, e
        if got:
            return got
        if time.monotonic() > end:
            if failed is not None:
                print("     (while waiting, a request failed: %s: %s)" % (type(failed).__name__, failed), flush=True)
            return None
        time.sleep(0.5)


_REFUSED = re.compile(r"HTTP 40[13]\b|forbidden", re.IGNORECASE)


class _Process:
    def __init__(self, name, argv, log_path, env=None):
        self.name = name
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True, preexec_fn=_die_with_parent, env=env)

    def alive(self):
        return self.popen.poll() is None

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def log_lines(self, needles, limit=40):
        """The log's lines that contain any of `needles`, the last `limit` of them."""
        try:
            with open(self.log_path, errors="replace") as f:
                found = [line.rstrip("\n") for line in f if any(n in line for n in needles)]
        except OSError:
            return []
        return found[-limit:]

    def refused_calls(self):
        """The lines of its log that tell of an API call refused: our kube client logs one as
        "<what>: HTTP 403: <the API server's message>" (401 for a token it does not take)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return [line.strip() for line in f if _REFUSED.search(line)]
        except OSError:
            return []

    def stop(self, grace=15.0):
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # The group too: anything the component started must not outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


class JsonHttpsServer:
    """A JSON-over-HTTPS server on loopback, on threads of this process: each POST's JSON body is
    handed to `answer(path, request)` and what it returns is sent back as JSON, status 200. What
    the scenarios put where the API server or the scheduler expects a webhook or an extender of
    someone else's (a second webhook, an extender that answers every node)."""

    def __init__(self, answer, cert, key, port=0):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(handler):
                request = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
                body = json.dumps(answer(handler.path, request)).encode()
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(handler, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager, kube-scheduler) on loopback; or, made by
    remote(), a client of such a plane that another process runs."""

    def __init__(self, bin_dir, *, controller_manager=False, scheduler=False, scheduler_config=None,
                 feature_gates=None, runtime_config=None, apiserver_args=(), controller_manager_args=(),
                 extra_addresses=(), workdir=None, keep=False, deadline=120.0):
        self.bin_dir = bin_dir
        self.with_controller_manager = controller_manager
        self.with_scheduler = scheduler
        self.scheduler_config = scheduler_config
        self.feature_gates = dict(feature_gates or {})
        self.runtime_config = {"resource.k8s.io/v1": "true"}
        self.runtime_config.update(runtime_config or {})
        self.apiserver_args = list(apiserver_args)
        self.controller_manager_args = list(controller_manager_args)
        # More IP addresses the API server's certificate names: where a client reaches this
        # machine's loopback from elsewhere (the VM lab's guest, through QEMU's user network).
        self.extra_addresses = list(extra_addresses)
        self.deadline = deadline
        self.keep = keep
        self._own_dir = workdir is None
        self.dir = workdir
        self.processes = []
        self.server = None
        # Set by remote(): the plane runs in another process; this one is only its client.
        self.remote_server = None
        self._remote_pki = None
        for program in ("etcd", "kube-apiserver", "kubectl"):
            if not os.access(os.path.join(bin_dir, program), os.X_OK):
                raise ControlPlaneError("%s/%s is missing: build it with tests/k8s/build-peers.sh" % (bin_dir, program))

    # --- files -------------------------------------------------------------------------------

    @classmethod
    def remote(cls, bin_dir, pki, server, deadline=120.0):
        """A client of a plane that another process started and stops (the VM lab's host, for its
        guest): that plane's `pki` directory and its API server's URL as seen from here. Starts and
        stops no component; its own directory holds only its kubeconfig and kubectl's cache."""
        plane = cls(bin_dir, deadline=deadline)
        plane._remote_pki = pki
        plane.remote_server = server
        return plane

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    @property
    def pki(self):
        return self._remote_pki or self.path("pki")

    @property
    def kubeconfig(self):
        return self.path("admin.kubeconfig")

    @property
    def ca(self):
        return os.path.join(self.pki, "ca.crt")

    def _make_pki(self):
        pki = self.pki
        os.makedirs(pki, exist_ok=True)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                 "-subj", "/CN=kata-vgpu-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki)

        def leaf(name, subject, usage, san=None):
            exts = ["-addext", "basicConstraints=critical,CA:FALSE",
                    "-addext", "keyUsage=critical,digitalSignature", "-addext", "extendedKeyUsage=" + usage]
            if san:
                exts += ["-addext", "subjectAltName=" + san]
            _openssl("req", "-x509", "-CA", "ca.crt", "-CAkey", "ca.key", *ec, "-keyout", name + ".key",
                     "-out", name + ".crt", "-days", "2", "-subj", subject, *exts, cwd=pki)

        leaf("apiserver", "/CN=kube-apiserver", "serverAuth",
             "IP:127.0.0.1,IP:%s,%sDNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
             "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
             % (SERVICE_IP, "".join("IP:%s," % a for a in self.extra_addresses)))
        leaf("admin", "/O=system:masters/CN=kata-vgpu-test-admin", "clientAuth")
        # The aggregation layer's front proxy, as kubeadm sets it up: its own CA and the client
        # certificate the API server presents to extension API servers. Without it the
        # controller-manager and scheduler log, many times a second, that the requestheader CA
        # bundle is missing.
        _openssl("req", "-x509", *ec, "-keyout", "front-proxy-ca.key", "-out", "front-proxy-ca.crt",
                 "-days", "2", "-subj", "/CN=kata-vgpu-test-front-proxy-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
                 cwd=pki)
        _openssl("req", "-x509", "-CA", "front-proxy-ca.crt", "-CAkey", "front-proxy-ca.key", *ec,
                 "-keyout", "front-proxy-client.key", "-out", "front-proxy-client.crt", "-days", "2",
                 "-subj", "/CN=front-proxy-client", "-addext", "basicConstraints=critical,CA:FALSE",
                 "-addext", "extendedKeyUsage=clientAuth", cwd=pki)
        leaf("controller-manager", "/CN=system:kube-controller-manager", "clientAuth")
        leaf("scheduler", "/CN=system:kube-scheduler", "clientAuth")
        # Both the serving certificates of kube-controller-manager and kube-scheduler are
        # self-signed by themselves (--cert-dir); only the health checks below talk to them.
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key", cwd=pki)
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)

    def write_kubeconfig(self, path, user_cert, user_key):
        text = """apiVersion: v1
kind: Config
clusters:
- name: kata-vgpu-test
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: user
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: kata-vgpu-test
  context: {{cluster: kata-vgpu-test, user: user}}
current-context: kata-vgpu-test
""".format(server=self.server, ca=self.ca, cert=user_cert, key=user_key)
        with open(path, "w") as f:
            f.write(text)

    def write_token_kubeconfig(self, path, token, namespace):
        """A kubeconfig for a ServiceAccount token (what a DaemonSet's pod gets projected), its
        namespace the default one."""
        with open(path, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %s, "
                    "certificate-authority: %s}\nusers:\n- name: u\n  user: {token: %s}\ncontexts:\n"
                    "- name: c\n  context: {cluster: c, user: u, namespace: %s}\ncurrent-context: c\n"
                    % (self.server, self.ca, token, namespace))

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="kvgpu-k8s-")
        else:
            os.makedirs(self.dir, exist_ok=True)
        try:
            if self.remote_server:
                self._attach()
                return
            self._make_pki()
            for attempt in range(3):
                try:
                    self._start_processes()
                    return
                except _PortTaken:
                    self._stop_processes()
                    if attempt == 2:
                        raise
        except BaseException:
            self.stop()
            raise

    def stop(self):
        self._stop_processes()
        if self._own_dir and self.dir and not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _attach(self):
        self.server = self.remote_server
        self.write_kubeconfig(self.kubeconfig, os.path.join(self.pki, "admin.crt"),
                              os.path.join(self.pki, "admin.key"))
        self._wait("the API server at %s is ready (/readyz)" % self.server,
                   lambda: self.request("GET", "/readyz", timeout=10)[0] == 200, [])

    def _stop_processes(self):
        # The API server's clients first, etcd last.
        for process in reversed(self.processes):
            process.stop()
        self.processes = []

    def _spawn(self, name, argv):
        process = _Process(name, argv, self.path(name + ".log"))
        self.processes.append(process)
        return process

    def _wait(self, what, ready, watched):
        """Until ready() is true; fails at the deadline or as soon as a watched process exits."""
        end = time.monotonic() + self.deadline
        pause = 0.05
        last_error = None
        while True:
            for process in watched:
                if not process.alive():
                    tail = process.log_tail()
                    if "address already in use" in tail:
                        raise _PortTaken(process.name)
                    raise ControlPlaneError("%s exited (status %s) before %s; its log ends:\n%s"
                                            % (process.name, process.popen.returncode, what, tail))
            try:
                if ready():
                    return
            except (OSError, http.client.HTTPException, ssl.SSLError) as e:
                last_error = e
            if time.monotonic() > end:
                tails = "\n".join("--- %s:\n%s" % (p.name, p.log_tail()) for p in watched)
                raise ControlPlaneError("%s not within %.0f s (last error: %s)\n%s"
                                        % (what, self.deadline, last_error, tails))
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)

    def _start_processes(self):
        etcd_client, etcd_peer, apiserver_port, kcm_port, scheduler_port = _free_ports(5)
        self.server = "https://127.0.0.1:%d" % apiserver_port
        pki = self.pki
        data = self.path("etcd-data")
        shutil.rmtree(data, ignore_errors=True)

        etcd_url = "http://127.0.0.1:%d" % etcd_client
        peer_url = "http://127.0.0.1:%d" % etcd_peer
        etcd = self._spawn("etcd", [
            os.path.join(self.bin_dir, "etcd"), "--name", "kvgpu-test", "--data-dir", data,
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", "kvgpu-test=" + peer_url, "--initial-cluster-state", "new",
            # A test's data need not survive a crash of the machine.
            "--unsafe-no-fsync", "--log-level", "warn"])

        def etcd_healthy():
            conn = http.client.HTTPConnection("127.0.0.1", etcd_client, timeout=5)
            try:
                conn.request("GET", "/health")
                response = conn.getresponse()
                return response.status == 200 and json.loads(response.read()).get("health") == "true"
            finally:
                conn.close()

        self._wait("etcd is healthy", etcd_healthy, [etcd])

        argv = [
            os.path.join(self.bin_dir, "kube-apiserver"),
            "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(apiserver_port),
            "--tls-cert-file", os.path.join(pki, "apiserver.crt"),
            "--tls-private-key-file", os.path.join(pki, "apiserver.key"),
            "--client-ca-file", os.path.join(pki, "ca.crt"),
            "--authorization-mode", "Node,RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", os.path.join(pki, "sa.pub"),
            "--service-account-signing-key-file", os.path.join(pki, "sa.key"),
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--enable-admission-plugins", "NodeRestriction",
            "--requestheader-client-ca-file", os.path.join(pki, "front-proxy-ca.crt"),
            "--requestheader-allowed-names", "front-proxy-client",
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", os.path.join(pki, "front-proxy-client.crt"),
            "--proxy-client-key-file", os.path.join(pki, "front-proxy-client.key"),
            "--allow-privileged=true",
            # No Endpoints for the `kubernetes` Service: its address would be loopback, which
            # EndpointSlice validation refuses, and nothing here connects through it.
            "--endpoint-reconciler-type", "none",
            "--runtime-config", ",".join("%s=%s" % kv for kv in sorted(self.runtime_config.items())),
            "--profiling=false",
        ]
        if self.feature_gates:
            argv += ["--feature-gates", ",".join("%s=%s" % kv for kv in sorted(self.feature_gates.items()))]
        argv += self.apiserver_args
        apiserver = self._spawn("kube-apiserver", argv)
        self.write_kubeconfig(self.kubeconfig, os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        self._wait("kube-apiserver is ready (/readyz)",
                   lambda: self.request("GET", "/readyz", timeout=10)[0] == 200, [etcd, apiserver])

        waits = []
        if self.with_controller_manager:
            config = self.path("controller-manager.kubeconfig")
            self.write_kubeconfig(config, os.path.join(pki, "controller-manager.crt"),
                                  os.path.join(pki, "controller-manager.key"))
            argv = [os.path.join(self.bin_dir, "kube-controller-manager"),
                    "--kubeconfig", config, "--authentication-kubeconfig", config,
                    "--authorization-kubeconfig", config,
                    "--bind-address", "127.0.0.1", "--secure-port", str(kcm_port),
                    "--cert-dir", self.path("controller-manager-certs"),
                    "--leader-elect=false", "--use-service-account-credentials=true",
                    "--service-account-private-key-file", os.path.join(pki, "sa.key"),
                    "--root-ca-file", os.path.join(pki, "ca.crt"),
                    "--service-cluster-ip-range", SERVICE_CIDR,
                    "--controllers", "*"] + self.controller_manager_args
            if self.feature_gates:
                argv += ["--feature-gates", ",".join("%s=%s" % kv for kv in sorted(self.feature_gates.items()))]
            waits.append(("kube-controller-manager is healthy", kcm_port, self._spawn("kube-controller-manager", argv)))
        if self.with_scheduler:
            config = self.path("scheduler.kubeconfig")
            self.write_kubeconfig(config, os.path.join(pki, "scheduler.crt"), os.path.join(pki, "scheduler.key"))
            argv = [os.path.join(self.bin_dir, "kube-scheduler"),
                    "--authentication-kubeconfig", config, "--authorization-kubeconfig", config,
                    "--bind-address", "127.0.0.1", "--secure-port", str(scheduler_port),
                    "--cert-dir", self.path("scheduler-certs")]
            if self.scheduler_config:
                # The configuration's clientConnection.kubeconfig names the scheduler's
                # credentials; a test's copy points it at `config`.
                argv += ["--config", self.scheduler_config]
            else:
                argv += ["--kubeconfig", config, "--leader-elect=false"]
            if self.feature_gates:
                argv += ["--feature-gates", ",".join("%s=%s" % kv for kv in sorted(self.feature_gates.items()))]
            waits.append(("kube-scheduler is healthy", scheduler_port, self._spawn("kube-scheduler", argv)))
        for what, port, process in waits:
            self._wait(what, lambda port=port: self._healthz(port), [etcd, apiserver, process])
        if self.with_controller_manager:
            # Healthy is not yet working: its controllers start once its informers have synced.
            # The ServiceAccount controller's first act, the `default` account of `default`, says
            # they run.
            self._wait("kube-controller-manager's controllers run (ServiceAccount default/default)",
                       lambda: self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default",
                                            timeout=10)[0] == 200,
                       [etcd, apiserver] + [process for _, _, process in waits])

    @staticmethod
    def _healthz(port):
        # Their serving certificates are self-signed; /healthz is open to anyone
        # (--authorization-always-allow-paths' default).
        context = ssl._create_unverified_context()
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        try:
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            return response.status == 200 and response.read().strip() == b"ok"
        finally:
            conn.close()

    # --- clients -----------------------------------------------------------------------------

    def request(self, method, path, body=None, token=None, content_type="application/json", timeout=30):
        """(status, decoded JSON or text) of one API request: as the admin, or with a bearer token."""
        context = ssl.create_default_context(cafile=self.ca)
        if token is None:
            context.load_cert_chain(os.path.join(self.pki, "admin.crt"), os.path.join(self.pki, "admin.key"))
        host, port = self.server.split("//", 1)[1].rsplit(":", 1)
        conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=timeout)
        headers = {"Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        payload = None
        if body is not None:
            payload = body if isinstance(body, (bytes, str)) else json.dumps(body)
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read().decode(errors="replace")
        finally:
            conn.close()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw

    def call(self, method, path, body=None, ok=(200, 201, 202), deadline=120, timeout=30):
        """request() asked again while it fails on the network, for `deadline` seconds; its
        (status, answer) once the status is one of `ok`, else a ControlPlaneError. A create whose
        answer was lost may have been done: put 409 in `ok` where the object is the caller's own
        (and 404 for a delete). Cheaper than kubectl, which starts a program and may fetch the
        OpenAPI document first: in the VM lab's TCG guest under load, that download outlived
        kubectl's 32 s."""
        end = time.monotonic() + deadline
        while True:
            try:
                status, answer = self.request(method, path, body=body, timeout=timeout)
                break
            except NETWORK_ERRORS as e:
                if time.monotonic() > end:
                    raise ControlPlaneError("%s %s: no answer for %.0f s: %s" % (method, path, deadline, e))
                time.sleep(0.5)
        if status not in ok:
            raise ControlPlaneError("%s %s: HTTP %d: %s" % (method, path, status, str(answer)[:500]))
        return status, answer

    def wait_https_ready(self, what, port, ca, processes):
        """Waits until one of our programs answers GET /readyz with 200 over HTTPS on loopback,
        its certificate checked against `ca`; fails at once when one of `processes` exits."""
        context = ssl.create_default_context(cafile=ca)

        def ready():
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
            try:
                conn.request("GET", "/readyz")
                return conn.getresponse().status == 200
            finally:
                conn.close()
        self._wait(what, ready, processes)

    def register_node(self, name, allocatable=None, labels=None, annotations=None):
        """A Node without a kubelet, for scheduler-only scenarios: created, then its status patched
        Ready with the given allocatable (also its capacity) besides cpu, memory and pods, as a
        kubelet's first status update would, and the not-ready taint the API server put on it
        taken off, as kube-controller-manager's node lifecycle controller would."""
        resources = {"cpu": "64", "memory": "256Gi", "pods": "110"}
        resources.update(allocatable or {})
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name}, **(labels or {})),
                             "annotations": dict(annotations or {})}}
        status, answer = self.request("POST", "/api/v1/nodes", node)
        if status != 201:
            raise ControlPlaneError("creating Node %s: HTTP %d %s" % (name, status, answer))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = {"status": {"capacity": resources, "allocatable": resources,
                            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                            "message": "registered by the test harness, no kubelet",
                                            "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
        status, answer = self.request("PATCH", "/api/v1/nodes/%s/status" % name, patch,
                                      content_type="application/merge-patch+json")
        if status != 200:
            raise ControlPlaneError("patching Node %s's status: HTTP %d %s" % (name, status, answer))
        # The API server's TaintNodesByCondition admission gives every new Node the taint
        # node.kubernetes.io/not-ready:NoSchedule; kube-controller-manager's node lifecycle
        # controller takes it off once the Node is Ready. That controller would also taint a Node
        # without heartbeats unreachable within a minute, so it is not relied on: the taint is
        # taken off here, as the controller would (without this the scheduler binds nothing).
        # Where that controller runs it writes the same Node meanwhile: a 409 on the precondition
        # reads the Node again and tries again.
        deadline = time.monotonic() + 60
        while True:
            taints = answer.get("spec", {}).get("taints") or []
            kept = [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"]
            if len(kept) == len(taints):
                return answer
            status, patched = self.request("PATCH", "/api/v1/nodes/%s" % name,
                                           {"metadata": {"resourceVersion": answer["metadata"]["resourceVersion"]},
                                            "spec": {"taints": kept or None}},
                                           content_type="application/merge-patch+json")
            if status == 200:
                return patched
            if status != 409 or time.monotonic() > deadline:
                raise ControlPlaneError("taking the not-ready taint off Node %s: HTTP %d %s" % (name, status, patched))
            status, answer = self.request("GET", "/api/v1/nodes/%s" % name)
            if status != 200:
                raise ControlPlaneError("reading Node %s: HTTP %d %s" % (name, status, answer))

    def kubectl(self, *args, token=None, input=None, check=True, timeout=120):
        """Runs this release's kubectl against the plane; CompletedProcess with text output."""
        argv = [os.path.join(self.bin_dir, "kubectl"), "--kubeconfig", self.kubeconfig]
        if token is not None:
            # A bearer token replaces the admin's certificate: an empty user with only the token.
            argv = [os.path.join(self.bin_dir, "kubectl"), "--server", self.server,
                    "--certificate-authority", self.ca, "--token", token, "--kubeconfig", os.devnull]
        env = dict(os.environ, KUBECACHEDIR=self.path("kubectl-cache"), HOME=self.dir)
        result = subprocess.run(argv + list(args), input=input, capture_output=True, text=True, env=env,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise ControlPlaneError("kubectl %s failed (exit %d):\n%s%s" % (
                " ".join(args), result.returncode, result.stdout, result.stderr))
        return result


def main():
    parser = argparse.ArgumentParser(description="Start a real Kubernetes control plane on loopback.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start it, print how to reach it, run until interrupted")
    where = up.add_mutually_exclusive_group(required=True)
    where.add_argument("--release", help="a release pinned in tests/k8s/peers, e.g. 1.36")
    where.add_argument("--bin-dir", help="a directory with etcd, kube-apiserver, ... (build-peers.sh's)")
    up.add_argument("--controller-manager", action="store_true")
    up.add_argument("--scheduler", action="store_true")
    up.add_argument("--scheduler-config", help="kube-scheduler --config (its clientConnection.kubeconfig "
                    "must name DIR/scheduler.kubeconfig)")
    up.add_argument("--feature-gates", default="", help="G=true,H=false for every component")
    up.add_argument("--dir", help="keep everything here (default: a temporary directory, removed at the end)")
    up.add_argument("--deadline", type=float, default=120.0, help="seconds each component may take to be ready")
    args = parser.parse_args()

    gates = dict(kv.split("=", 1) for kv in args.feature_gates.split(",") if kv)
    bin_dir = args.bin_dir or bin_dir_for(args.release)
    try:
        return run(args, bin_dir, gates)
    except ControlPlaneError as e:
        print("controlplane: %s" % e, file=sys.stderr)
        return 1


def run(args, bin_dir, gates):
    plane = ControlPlane(bin_dir, controller_manager=args.controller_manager, scheduler=args.scheduler,
                         scheduler_config=args.scheduler_config, feature_gates=gates, workdir=args.dir,
                         deadline=args.deadline)
    def interrupted(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    started = time.monotonic()
    try:
        with plane:
            print("control plane ready in %.1f s; logs, certificates and etcd's data in %s"
                  % (time.monotonic() - started, plane.dir))
            print("  export KUBECONFIG=%s" % plane.kubeconfig)
            print("  %s/kubectl get --raw /version" % bin_dir)
            print("Ctrl-C stops it.", flush=True)
            while True:
                signal.pause()
    except KeyboardInterrupt:
        pass
    print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
