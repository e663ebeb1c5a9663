#!/usr/bin/env python3
"""The attacks of issue #15 against the real kvgpu-webhook binary, as deployed (--workers 2),
on loopback: after each, a fresh client's /healthz and /mutate are answered within 1 s, the
process is alive, and its peak RSS (VmHWM, what a memory limit sees) stays under 100 MiB. Out
of descriptors (EMFILE) the server must wait, not spin a core on failed accepts.

  attack_binary.py path/to/kvgpu-webhook path/to/pod-create.json
"""
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


def fresh(port, what):
    """A new client's probe and review, both answered within the limit."""
    started = time.monotonic()
    try:
        with tls(port, FRESH_LIMIT_S + 1) as conn:
            health, _ = request(conn, "GET", "/healthz")
            mutate, _ = request(conn, "POST", "/mutate", kata_review())
        took = time.monotonic() - started
        check(health == 200 and mutate == 200 and took < FRESH_LIMIT_S,
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
        command = [WEBHOOK, "--listen", f"127.0.0.1:{self.port}", "--workers", "2",
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


def main():
    with tempfile.TemporaryDirectory() as workdir:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                        "-keyout", f"{workdir}/tls.key", "-out", f"{workdir}/tls.crt",
                        "-subj", "/CN=localhost"], check=True, capture_output=True)
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
            for conn in conns:
                conn.close()
            time.sleep(0.3)
            fresh(webhook.port, "descriptors freed")
            check(webhook.alive(), "out of descriptors: the webhook is alive")
        finally:
            webhook.stop()
    if failures:
        print(f"{len(failures)} failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
