"""The pieces of the dashboard checks: the workload (the real daemons on simulated nodes, driven by
kvgpu-monitoring-workload), a real Prometheus scraping them (Debian's `prometheus`, on loopback with
a temporary data directory, stopped at the end) and the dashboard's panel queries with Grafana's
variables substituted.

Used by test_dashboard.py and by render_dashboard.py (the picture in docs/operations.md).
"""

import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

SOURCE = os.environ.get("KVGPU_SOURCE_DIR",
                        os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..")))
DASHBOARD = os.path.join(SOURCE, "deploy", "monitoring", "dashboards", "kata-vgpu.json")
RULE = os.path.join(SOURCE, "deploy", "monitoring", "prometheusrule.yaml")
PROMETHEUS = os.environ.get("KVGPU_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = os.environ.get("KVGPU_PROMTOOL", "/usr/bin/promtool")

# What a wait for something that is to happen may take (docs/development.md, "Timing in tests").
DEADLINE = 30.0
SCRAPE = "1s"
# Grafana's $__rate_interval for these queries: long enough to hold the whole workload, which
# runs for well under a minute before the panels are asked.
RATE_INTERVAL = "5m"


def _die_with_parent():
    """preexec_fn: SIGTERM to the child when this process dies (a test killed at its timeout must
    not leave a Prometheus or the daemons running)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(check, deadline=DEADLINE, pause=0.25):
    """Calls check() until it returns a true value (returned) or the deadline passes (None)."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value or time.monotonic() > end:
            return value
        time.sleep(pause)


def rules_file(directory):
    """The PrometheusRule's groups as a plain Prometheus rule file in `directory`."""
    with open(RULE, encoding="utf-8") as f:
        rule = yaml.safe_load(f)
    path = os.path.join(directory, "rules.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump({"groups": rule["spec"]["groups"]}, f, sort_keys=False)
    return path


class Workload:
    """kvgpu-monitoring-workload: start() returns the scrape targets, phase() the cluster's facts."""

    def __init__(self, binary, scratch):
        self.binary = binary
        self.scratch = scratch
        self.proc = None

    def _answer(self, word):
        line = self.proc.stdout.readline()
        if not line.startswith(word + " "):
            rest = self.proc.stdout.read() if not line else ""
            raise RuntimeError("kvgpu-monitoring-workload: " + (line + rest).strip() +
                               " (its logs are under " + self.scratch + ")")
        return json.loads(line[len(word) + 1:])

    def start(self):
        # Its own process group: a stop reaches the daemons it started even if it hangs.
        self.proc = subprocess.Popen([self.binary, self.scratch], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None, text=True,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        return self._answer("ready")["targets"]

    def phase(self):
        self.proc.stdin.write("phase\n")
        self.proc.stdin.flush()
        return self._answer("done")

    def stop(self):
        if self.proc is None:
            return
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc.stdout.close()
        self.proc = None


class Prometheus:
    """A Prometheus on 127.0.0.1 scraping `targets` every second, with the kata-vgpu alert rules
    loaded; job names are the Prometheus Operator's for the PodMonitors, so the rules' `job`
    matchers hold. `relabel` adds metric_relabel_configs to every job (the renaming check)."""

    def __init__(self, targets, directory, relabel=None):
        self.dir = directory
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        jobs = {}
        for t in targets:
            labels = {"node": t["node"]} if "node" in t else {}
            jobs.setdefault(t["job"], []).append({"targets": [t["address"]], "labels": labels})
        config = {
            "global": {"scrape_interval": SCRAPE, "scrape_timeout": SCRAPE,
                       "evaluation_interval": SCRAPE},
            "rule_files": [rules_file(directory)],
            "scrape_configs": [dict({"job_name": job, "static_configs": static},
                                    **({"metric_relabel_configs": relabel} if relabel else {}))
                               for job, static in sorted(jobs.items())],
        }
        self.config = os.path.join(directory, "prometheus.yml")
        with open(self.config, "w", encoding="utf-8") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        self.log = open(os.path.join(directory, "prometheus.log"), "w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [PROMETHEUS, "--config.file", self.config,
             "--storage.tsdb.path", os.path.join(directory, "data"),
             "--web.listen-address", "127.0.0.1:%d" % self.port,
             "--storage.tsdb.retention.time", "1h", "--log.level", "warn"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent)
        self.expected_targets = len(targets)

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.log.close()

    def api(self, path, **params):
        url = self.url + "/api/v1/" + path
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError("%s: %s" % (path, body))
        return body["data"]

    def ready(self):
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def scraped_since(self, when):
        """Every target scraped, healthy, after `when` (Unix seconds), and the rules evaluated."""
        targets = self.api("targets", state="active")["activeTargets"]
        if len(targets) != self.expected_targets:
            return False
        for t in targets:
            if t["health"] != "up" or _unix(t["lastScrape"]) <= when:
                return False
        groups = self.api("rules")["groups"]
        return all(_unix(g["lastEvaluation"]) > when for g in groups)

    def wait_scraped_since(self, when):
        if not eventually(self.ready):
            raise RuntimeError("prometheus did not get ready: " + self.read_log())
        if not eventually(lambda: self.scraped_since(when)):
            targets = self.api("targets", state="active")["activeTargets"]
            raise RuntimeError("targets not all scraped: " + json.dumps(
                [(t["labels"], t["health"], t["lastError"], t["lastScrape"]) for t in targets]))

    def query(self, expr):
        return self.api("query", query=expr)

    def read_log(self):
        with open(os.path.join(self.dir, "prometheus.log"), encoding="utf-8") as f:
            return f.read()


def _unix(rfc3339):
    # "2026-12-02T06:10:22.123456789Z" or with an offset; sub-seconds cut to microseconds.
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", rfc3339)
    if not m:
        return 0.0
    import datetime
    base = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    zone = datetime.timezone.utc
    if m.group(3) != "Z":
        sign = 1 if m.group(3)[0] == "+" else -1
        hours, minutes = int(m.group(3)[1:3]), int(m.group(3)[4:6])
        zone = datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))
    frac = float(m.group(2)) if m.group(2) else 0.0
    return base.replace(tzinfo=zone).timestamp() + frac


# ---- the dashboard


def load_dashboard(path=DASHBOARD):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def panels(dashboard):
    """Every panel that queries (rows excluded), nested rows' panels included."""
    out = []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def variables(dashboard):
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def regex_value(values):
    """A multi-value variable as Grafana's Prometheus data source writes it into `=~"..."`: each
    value regex-escaped, joined by |, in parentheses; backslashes doubled for the string."""
    escaped = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", v) for v in values]
    text = "(" + "|".join(escaped) + ")" if len(escaped) > 1 else escaped[0]
    return text.replace("\\", "\\\\")


def substitute(expr, chosen):
    """The expression as Grafana sends it: $var replaced by the chosen values, $__rate_interval by
    RATE_INTERVAL."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name in sorted(chosen, key=len, reverse=True):
        expr = expr.replace("${%s}" % name, chosen[name]).replace("$" + name, chosen[name])
    if "$" in re.sub(r"\{\{[^}]*\}\}", "", expr):
        raise ValueError("a variable is left in " + expr)
    return expr


def label_values(prom, query, chosen):
    """Grafana's label_values(selector, label) variable query, answered by Prometheus' series API
    (what the data source asks too)."""
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip())
    if not m:
        raise ValueError("not a label_values query: " + query)
    selector = substitute(m.group(1), chosen)
    series = prom.api("series", **{"match[]": selector})
    return sorted({s[m.group(2)] for s in series if m.group(2) in s})


def choose_all(prom, dashboard):
    """Each query variable's values, in dashboard order (later ones may use earlier ones), and the
    text each stands for in the queries when all its values are selected."""
    chosen, values = {}, {}
    for v in dashboard["templating"]["list"]:
        if v["type"] != "query":
            continue
        found = label_values(prom, v["query"]["query"] if isinstance(v["query"], dict)
                             else v["query"], chosen)
        values[v["name"]] = found
        chosen[v["name"]] = regex_value(found) if found else "^$"
    return chosen, values


def finite_samples(result):
    """The numbers of an instant query's answer (vector or scalar); NaN and Inf count as none."""
    kind, data = result["resultType"], result["result"]
    if kind == "scalar":
        samples = [data[1]]
    elif kind == "vector":
        samples = [s["value"][1] for s in data]
    else:
        samples = []
    return [float(x) for x in samples if math.isfinite(float(x))]
