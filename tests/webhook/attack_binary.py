#!/usr/bin/env python3
"""The attacks of issues #15 and #26 against the real kvgpu-webhook binary, as deployed
(--workers 2), on loopback: after each, a fresh client's /healthz and /mutate are answered within
1 s, the process is alive, and its peak RSS (VmHWM, what a memory limit sees) stays under
100 MiB. Out of descriptors (EMFILE) the server must wait, not spin a core on failed accepts.

Issue #26's attacks run against a second process with RLIMIT_NOFILE 1024 (what containerd 2.x
gives containers) while a prober sends /healthz and a normal vGPU review every 0.5 s, each on a
fresh connection: 90 % of probes within 1 s and of reviews within 2 s, none over 3 s / 5 s, and
every review answered 200 (none turned away with 503).

Issue #50's burst (`conn-cap`, its own CTest test): 1,000 TLS connections opened in 5 s, each
silent after its handshake, while the same prober runs; every probe and review must be answered
200, with generous deadlines (KVGPU_BURST_ROUNDS bursts, default 1, against one process).

  attack_binary.py path/to/kvgpu-webhook path/to/pod-create.json [conn-cap]
"""
import copy
import json
import os
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

WEBHOOK, REVIEW_FIXTURE = sys.argv[1], sys.argv[2]
# "conn-cap": only issue #50's burst (its own CTest test); otherwise issues #15 and #26.
ONLY = sys.argv[3] if len(sys.argv) > 3 else None
RSS_LIMIT_KIB = 100 * 1024
FRESH_LIMIT_S = 1.0
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kata_review(containers=1):
    review = json.load(open(REVIEW_FIXTURE))
    spec = review["request"]["object"]["spec"]
    spec["runtimeClassName"] = "kata"
    template = spec["containers"][0]
    template["resources"] = {"limits": {"tencent.com/vgpu-492": "1"}}
    spec["containers"] = [dict(template, name=f"c{i}") for i in range(containers)]
    return json.dumps(review, separators=(",", ":")).encode()


CONTEXT = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
CONTEXT.check_hostname = False
CONTEXT.verify_mode = ssl.CERT_NONE


def tls(port, timeout=5.0):
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return CONTEXT.wrap_socket(raw)


def request(conn, method, path, body=b""):
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    conn.sendall(head.encode() + body)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the answer")
        data += chunk
    header, rest = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in header.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-answer")
        rest += chunk
    return int(header.split(b" ")[1]), rest[:length]


def fresh(port, what, limit_s=FRESH_LIMIT_S):
    """A new client's probe and review, both answered within the limit."""
    started = time.monotonic()
    try:
        with tls(port, limit_s + 1) as conn:
            health, _ = request(conn, "GET", "/healthz")
            mutate, _ = request(conn, "POST", "/mutate", kata_review())
        took = time.monotonic() - started
        check(health == 200 and mutate == 200 and took < limit_s,
              f"{what}: fresh /healthz {health} and /mutate {mutate} in {took:.2f} s")
    except (OSError, ConnectionError) as error:
        check(False, f"{what}: fresh client failed: {error}")


def peak_rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Webhook:
    def __init__(self, workdir, nofile=None):
        self.port = free_port()
        self.metrics_port = free_port()
        command = [WEBHOOK, "--listen", f"127.0.0.1:{self.port}", "--workers", "2",
                   "--metrics-addr", f"127.0.0.1:{self.metrics_port}",
                   "--tls-cert-file", f"{workdir}/tls.crt", "--tls-key-file", f"{workdir}/tls.key"]
        if nofile:
            command = ["prlimit", f"--nofile={nofile}:{nofile}", "--"] + command
        self.log = open(f"{workdir}/webhook-{self.port}.log", "w+")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                with tls(self.port, 1) as conn:
                    if request(conn, "GET", "/healthz")[0] == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the webhook did not start: " + open(self.log.name).read())

    def alive(self):
        return self.process.poll() is None

    def stop(self):
        self.process.terminate()
        self.process.wait(10)


def pipelining_flood(port):
    flood = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 90000  # ~3 MB
    conns, threads = [], []
    for _ in range(6):
        conn = tls(port, 3)
        conns.append(conn)

        def send(c=conn):
            try:
                c.sendall(flood)  # never reads: the server must stop reading this connection
            except OSError:
                pass
        threads.append(threading.Thread(target=send))
        threads[-1].start()
    time.sleep(0.5)
    return conns, threads


def half_sent_bodies(port):
    declared = 3 * 1024 * 1024
    conns = []
    for _ in range(40):
        try:
            conn = tls(port, 3)
            conn.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {declared}\r\n\r\n".encode() + b" " * (declared // 2))
            conns.append(conn)
        except OSError:
            pass  # refused past the server-wide budget: what should happen
    return conns, []


def huge_answers(port):
    """Reviews near the API server's 3 MiB with thousands of vGPU containers: big patches."""
    per_container = len(kata_review(containers=600)) / 600
    body = kata_review(containers=int(3_000_000 / per_container))
    results = []

    def post():
        try:
            with tls(port, 30) as conn:
                results.append(request(conn, "POST", "/mutate", body)[0])
        except (OSError, ConnectionError) as error:
            results.append(str(error))
    threads = [threading.Thread(target=post) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(all(isinstance(r, int) for r in results),
          f"four {len(body) // 1024} KiB reviews answered ({results})")
    return [], []


def bare_sockets(port, count=600):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 200)), hard))
    conns = []
    for _ in range(count):
        try:
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=3))
        except OSError:
            break
    time.sleep(0.3)
    return conns, []


def idle_tls(port, count=300):
    conns = []
    for _ in range(count):
        try:
            conns.append(tls(port, 3))
        except OSError:
            pass  # evicted during its handshake: the cap at work
    time.sleep(0.3)
    return conns, []


# --- issue #26 ----------------------------------------------------------------------------------

class Prober:
    """What kubelet and the API server do while an attack runs: every 0.5 s a fresh connection
    asks /healthz and another posts a normal vGPU review; the latencies and statuses are kept."""

    def __init__(self, port, limits=(3.0, 5.0)):
        self.port, self.health, self.reviews = port, [], []
        self.health_limit, self.review_limit = limits
        self.stopping = threading.Event()
        self.body = kata_review()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def timed(self, method, path, body, into, limit):
        started = time.monotonic()
        try:
            with tls(self.port, limit) as conn:
                status, _ = request(conn, method, path, body)
        except (OSError, ConnectionError) as error:
            status = type(error).__name__  # not 200: how it failed, for the report
        into.append((time.monotonic() - started, status))

    def run(self):
        while not self.stopping.wait(0.5):
            threading.Thread(target=self.timed,
                             args=("GET", "/healthz", b"", self.health, self.health_limit)).start()
            self.timed("POST", "/mutate", self.body, self.reviews, self.review_limit)

    def finish(self):
        self.stopping.set()
        self.thread.join(2 * self.review_limit)
        time.sleep(self.health_limit + 0.2)  # the last /healthz thread answers or times out

    def stop_every_answered(self, what):
        """Issue #50: every probe and review answered 200, however slowly within the limits."""
        self.finish()
        for name, samples in [("/healthz", self.health), ("reviews", self.reviews)]:
            times = sorted(t for t, _ in samples)
            bad = [s for _, s in samples if s != 200]
            check(len(samples) >= 4 and not bad,
                  f"{what}: {len(samples)} {name} probes, every one answered 200 (not: {bad}); "
                  f"slowest {times[-1] if times else 0:.2f} s")

    def stop(self, what):
        self.stopping.set()
        self.thread.join(10)
        time.sleep(0.2)
        for name, samples, p90, worst in [("/healthz", self.health, 1.0, 3.0),
                                          ("reviews", self.reviews, 2.0, 5.0)]:
            times = sorted(t for t, _ in samples)
            bad = [s for _, s in samples if s != 200]
            if not times:
                check(False, f"{what}: no {name} probe ran")
                continue
            ninetieth = times[int(0.9 * (len(times) - 1))]
            check(ninetieth < p90 and times[-1] < worst and not bad,
                  f"{what}: {len(times)} {name} probes, 90 % within {ninetieth:.2f} s, slowest "
                  f"{times[-1]:.2f} s, not 200: {bad}")


def vgpu_containers_review(count, name_bytes=1):
    """A review of `count` minimal vGPU containers: the cheapest body that asks for the most
    patch (issue #26: 282,069 of them in 19.9 MB got a 52.9 MB answer)."""
    review = json.loads(kata_review())
    head = json.dumps(review, separators=(",", ":"))
    one = ('{"name":"%s","resources":{"limits":{"tencent.com/vgpu-492":"1"}}}'
           % ("c" * name_bytes))
    key = '"containers":['
    at = head.index(key) + len(key)
    return (head[:at] + ",".join([one] * count) + "," + head[at:]).encode()


def answer_bombs(port):
    """Reviews whose answers were the memory: one near the 19 MiB body limit, two of 3 MiB at
    once, and eight whose answers are never read."""
    results = []

    def post(body, read=True):
        try:
            conn = tls(port, 30)
            if not read:
                head = ("POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n")
                conn.sendall(head.encode() + body)
                return conn
            with conn:
                status, answer = request(conn, "POST", "/mutate", body)
                results.append((status, len(answer)))
        except (OSError, ConnectionError) as error:
            results.append(str(error))
        return None

    huge = vgpu_containers_review(282_069)
    post(huge)
    medium = vgpu_containers_review(45_054)
    threads = [threading.Thread(target=post, args=(medium,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    unread = [post(medium, read=False) for _ in range(8)]
    time.sleep(1)
    check(all(isinstance(r, tuple) and r[0] == 400 and r[1] < 4096 for r in results),
          f"{len(huge) >> 20} MiB and 3 MiB reviews of minimal vGPU containers refused with a "
          f"short answer ({results})")
    return [c for c in unread if c], []


def bodiless_heads(port):
    """Heads declaring 19 MiB and 13 MiB bodies that never come, ~12 a second: the budget is not
    reserved on their word, so normal reviews are not turned away."""
    conns, stop = [], threading.Event()

    def send():
        while not stop.is_set():
            for declared in (19 << 20, 13 << 20):
                try:
                    conn = tls(port, 3)
                    conn.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application"
                                 + f"/json\r\nContent-Length: {declared}\r\n\r\n".encode())
                    conns.append(conn)
                except OSError:
                    pass
            stop.wait(1 / 6)
    thread = threading.Thread(target=send)
    thread.start()
    time.sleep(4)
    stop.set()
    return conns, [thread]


def slow_large_bodies(port):
    """Large bodies trickled in until they hold the large-request budget, then kept trickling:
    a new small review must be served (the slow bodies are the ones evicted)."""
    conns, stop = [], threading.Event()
    declared = 19 << 20

    def trickle():
        while not stop.is_set():
            try:
                conn = tls(port, 3)
                conn.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/"
                             + f"json\r\nContent-Length: {declared}\r\n\r\n".encode()
                             + b" " * (6 << 20))
                conns.append(conn)
                for _ in range(10):
                    if stop.wait(0.2):
                        break
                    conn.sendall(b" " * 4096)
            except OSError:
                pass
    threads = [threading.Thread(target=trickle) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(4)
    stop.set()
    return conns, threads


def reopened_burst(port, count=4096, seconds=4):
    """4,096 bare TCP connections, each reopened when the server closes it: the 256 cap holds
    (evicted connections leave the count at once), no EMFILE at RLIMIT_NOFILE 1024."""
    import selectors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 300)), hard))
    selector = selectors.DefaultSelector()

    def connect():
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        selector.register(s, selectors.EVENT_READ)

    for _ in range(count):
        try:
            connect()
        except OSError:
            break
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, _ in selector.select(0.1):
            s = key.fileobj
            try:
                gone = s.recv(1) == b""
            except OSError:
                gone = True
            if gone:
                selector.unregister(s)
                s.close()
                try:
                    connect()
                except OSError:
                    pass
    conns = [key.fileobj for key in list(selector.get_map().values())]
    selector.close()
    return conns, []


def mount_clash(port):
    """The pod's own kvgpu-dev makes the injected /dev kvgpu-dev-2; a container mounting that
    name without declaring it must be denied by the webhook itself."""
    review = json.loads(kata_review())
    spec = review["request"]["object"]["spec"]
    spec.setdefault("volumes", []).append({"name": "kvgpu-dev", "emptyDir": {}})
    spec["containers"].append({"name": "sneak", "image": "busybox",
                               "volumeMounts": [{"name": "kvgpu-dev-2", "mountPath": "/host"}]})
    with tls(port) as conn:
        status, answer = request(conn, "POST", "/mutate", json.dumps(review).encode())
    response = json.loads(answer).get("response", {}) if status == 200 else {}
    check(status == 200 and response.get("allowed") is False
          and "kvgpu-dev-2" in response.get("status", {}).get("message", ""),
          f"mount of the renamed injected volume kvgpu-dev-2 denied ({status}, "
          f"{response.get('status')})")
    return [], []


def marker_removed(port):
    """A mutated pod whose marker annotation was removed is not injected a second time."""
    import base64
    import jsonpatch
    review = json.loads(kata_review())
    with tls(port) as conn:
        status, answer = request(conn, "POST", "/mutate", json.dumps(review).encode())
    patch = json.loads(base64.b64decode(json.loads(answer)["response"]["patch"]))
    pod = jsonpatch.apply_patch(review["request"]["object"], patch)
    for volume in pod["spec"].get("volumes", []):
        if "hostPath" in volume:
            volume["hostPath"].setdefault("type", "")
    pod["metadata"]["annotations"].pop("kata-vgpu.io/injected", None)
    again = copy.deepcopy(review)
    again["request"]["object"] = pod
    with tls(port) as conn:
        status, answer = request(conn, "POST", "/mutate", json.dumps(again).encode())
    response = json.loads(answer)["response"]
    check(status == 200 and response.get("allowed") and "patch" not in response,
          f"marker removed: no second injection ({status}, patch "
          f"{'present' if 'patch' in response else 'absent'})")
    return [], []


def idle_metrics(webhook):
    """Idle connections to --metrics-addr must not keep a scrape from being answered."""
    idle = [socket.create_connection(("127.0.0.1", webhook.metrics_port), timeout=3)
            for _ in range(8)]
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", webhook.metrics_port), timeout=3) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        took = time.monotonic() - started
        check(data.startswith(b"HTTP/1.1 200") and b"kvgpu_webhook" in data and took < 1,
              f"scrape beside 8 idle metrics connections answered in {took:.2f} s")
    except OSError as error:
        check(False, f"scrape beside idle metrics connections failed: {error}")
    return idle, []


def bad_review_flood(webhook):
    """Bad reviews as fast as one connection sends them: the warnings are rate-limited."""
    before = open(webhook.log.name).read().count("bad review: ")
    deadline = time.monotonic() + 3
    sent = 0
    with tls(webhook.port) as conn:
        while time.monotonic() < deadline:
            request(conn, "POST", "/mutate", b"{}")
            sent += 1
    time.sleep(0.2)
    logged = open(webhook.log.name).read().count("bad review: ") - before
    check(sent > 200 and logged <= 20 + 5 * 4,
          f"{sent} bad reviews in 3 s wrote {logged} warning lines (bursts of 20, 5 a second)")
    return [], []


def issue_26(workdir):
    webhook = Webhook(workdir, nofile=1024)
    try:
        for name, attack in [("answer bombs (19 MiB, 2 x 3 MiB, 8 unread)", answer_bombs),
                             ("bodiless 19 MiB + 13 MiB heads, 12 a second", bodiless_heads),
                             ("slow large bodies", slow_large_bodies),
                             ("4,096 bare connections, reopened", reopened_burst),
                             ("mount of a clash-renamed injected volume", mount_clash),
                             ("marker annotation removed", marker_removed),
                             ("idle metrics connections", lambda _: idle_metrics(webhook)),
                             ("bad-review flood", lambda _: bad_review_flood(webhook))]:
            prober = Prober(webhook.port)
            time.sleep(0.2)
            started = time.monotonic()
            conns, threads = attack(webhook.port)
            while time.monotonic() - started < 2:  # give the prober a few turns in the attack
                time.sleep(0.1)
            prober.stop(name)
            for conn in conns:
                conn.close()
            for thread in threads:
                thread.join(10)
            fresh(webhook.port, name)
            check(webhook.alive(), f"{name}: the webhook is alive")
            print(f"     peak RSS so far {peak_rss_kib(webhook.process.pid) // 1024} MiB")
        peak = peak_rss_kib(webhook.process.pid)
        check(peak < RSS_LIMIT_KIB, f"issue #26: peak RSS {peak // 1024} MiB < 100 MiB")
        log = open(webhook.log.name).read()
        check("Too many open files" not in log, "issue #26: accept never ran out of descriptors")
    finally:
        webhook.stop()


# --- issue #50 ----------------------------------------------------------------------------------

def silent_tls_burst(port, count=1000, seconds=5.0, openers=4):
    """1,000 TLS connections opened over 5 s, each handshake completed and then silent: four
    times the 256 cap, so the server sheds all the while. Returns the connections whose
    handshake completed (the server may have closed them since)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 300)), hard))
    conns, lock = [], threading.Lock()
    started = time.monotonic()

    def opener(first):
        for i in range(first, count, openers):
            wait = started + seconds * i / count - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                conn = tls(port, 10)
            except OSError:
                continue  # shed during its handshake: the attacker's loss, counted below
            with lock:
                conns.append(conn)
    threads = [threading.Thread(target=opener, args=(k,)) for k in range(openers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return conns


def issue_50(workdir, rounds):
    """The conn-cap burst while kubelet's probes and the API server's reviews come every 0.5 s:
    each must be answered, however the cap is shed (a probe cut off during or right after its
    handshake is a failed liveness check). Deadlines are generous (10 s): the outcome is what is
    asserted, on two shared cores."""
    webhook = Webhook(workdir, nofile=1024)
    try:
        for round_ in range(1, rounds + 1):
            what = f"1,000 silent TLS connections in 5 s, round {round_} of {rounds}"
            prober = Prober(webhook.port, limits=(10.0, 10.0))
            time.sleep(0.2)
            conns = silent_tls_burst(webhook.port)
            # A burst that never passed the cap would test nothing.
            check(len(conns) > 2 * 256, f"{what}: {len(conns)} handshakes completed")
            prober.stop_every_answered(what)
            for conn in conns:
                conn.close()
            fresh(webhook.port, what, 5.0)
            check(webhook.alive(), f"{what}: the webhook is alive")
        peak = peak_rss_kib(webhook.process.pid)
        check(peak < RSS_LIMIT_KIB, f"issue #50: peak RSS {peak // 1024} MiB < 100 MiB")
        log = open(webhook.log.name).read()
        check("Too many open files" not in log, "issue #50: accept never ran out of descriptors")
    finally:
        webhook.stop()


def main():
    with tempfile.TemporaryDirectory() as workdir:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                        "-keyout", f"{workdir}/tls.key", "-out", f"{workdir}/tls.crt",
                        "-subj", "/CN=localhost"], check=True, capture_output=True)
        if ONLY == "conn-cap":
            issue_50(workdir, int(os.environ.get("KVGPU_BURST_ROUNDS", "1")))
            return report()
        webhook = Webhook(workdir)
        try:
            for name, attack in [("pipelining flood, answers never read", pipelining_flood),
                                 ("40 half-sent 3 MiB bodies", half_sent_bodies),
                                 ("3 MiB reviews with thousands of vGPU containers", huge_answers),
                                 ("600 bare sockets, over the 256 cap", bare_sockets),
                                 ("300 idle TLS connections, over the 256 cap", idle_tls)]:
                conns, threads = attack(webhook.port)
                fresh(webhook.port, name)
                check(webhook.alive(), f"{name}: the webhook is alive")
                print(f"     peak RSS so far {peak_rss_kib(webhook.process.pid) // 1024} MiB")
                for conn in conns:
                    conn.close()
                for thread in threads:
                    thread.join(10)
            peak = peak_rss_kib(webhook.process.pid)
            check(peak < RSS_LIMIT_KIB, f"peak RSS after every attack {peak // 1024} MiB < 100 MiB")
        finally:
            webhook.stop()

        # Out of descriptors: 64 allowed, 100 clients. Accept fails with EMFILE; the server must
        # back off rather than retry at once.
        webhook = Webhook(workdir, nofile=64)
        try:
            conns = []
            for _ in range(100):
                try:
                    conns.append(socket.create_connection(("127.0.0.1", webhook.port), timeout=3))
                except OSError:
                    break
            before = cpu_seconds(webhook.process.pid)
            time.sleep(2)
            used = cpu_seconds(webhook.process.pid) - before
            check(used < 0.4, f"out of descriptors: {used:.2f} s of CPU in 2 s (no spinning)")
            # Issue #26: the spare descriptor lets the oldest silent client be dropped for a new
            # one, so the probes are answered while the 100 are still connected. The new client
            # is last in the kernel's accept queue, behind the ~36 silent ones that did not fit,
            # each admitted by dropping an older one: what is tested is that it gets in at all,
            # not the 1 s of the probes. On two loaded cores it once took over 2 s (the suite's
            # other tests running beside it). 6 s stays below the server's 10 s handshake timeout,
            # which would otherwise be the only way in. Under load it was that way one run in four
            # (8.0 s) until the server also drops a silent client when an accept has taken the
            # dropped one's descriptor before the spare was back (https/http_server.cpp,
            # OnNoDescriptors); 0.04-0.07 s in 16 of 16 since.
            fresh(webhook.port, "out of descriptors, the silent clients still connected", 6.0)
            for conn in conns:
                conn.close()
            time.sleep(0.3)
            fresh(webhook.port, "descriptors freed")
            check(webhook.alive(), "out of descriptors: the webhook is alive")
        finally:
            webhook.stop()
        issue_26(workdir)
    return report()


def report():
    if failures:
        print(f"{len(failures)} failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
