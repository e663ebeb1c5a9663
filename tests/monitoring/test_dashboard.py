"""deploy/monitoring/dashboards/kata-vgpu.json against reality: a real Prometheus scrapes the real
daemons (device plugin with its DRA front end, webhook, scheduler extender, validator) on two
simulated nodes while kvgpu-monitoring-workload runs two rounds of pods, claims and failures; then
every panel's every query, with the dashboard's variables substituted as Grafana does, must answer
with data, and the panels that count what the workload made must count exactly that.

Also here, over the same running daemons: `promtool check metrics` on each program's /metrics,
and the check that a metric renamed in a program blanks the panels that use it and fails this
test (a second Prometheus that renames one metric at scrape time, as a renamed metric in the code
would look to it).

Environment: KVGPU_WORKLOAD (the kvgpu-monitoring-workload binary), KVGPU_SOURCE_DIR.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request

import harness

# Panel types Grafana ships today; the old graph, singlestat and table-old are gone since 8-11.
CURRENT_PANELS = {"timeseries", "stat", "table", "state-timeline", "bargauge", "heatmap", "gauge",
                  "barchart", "text", "row"}
RENAMED = ("kvgpu_deviceplugin_dra_prepared_claims", "kvgpu_deviceplugin_dra_claims_prepared")


def by_label(result, *labels):
    """An instant vector as {label value (or tuple of them): number}."""
    out = {}
    for s in result["result"]:
        key = tuple(s["metric"].get(l, "") for l in labels)
        out[key[0] if len(key) == 1 else key] = float(s["value"][1])
    return out


def single(result):
    values = harness.finite_samples(result)
    return values[0] if len(values) == 1 else None


class Cluster:
    """The workload and the Prometheus scraping it, shared by every test of the module."""

    workload = None
    prometheus = None
    facts = None
    scratch = None
    targets = None


def setUpModule():
    binary = os.environ.get("KVGPU_WORKLOAD")
    if not binary or not os.access(binary, os.X_OK):
        raise unittest.SkipTest("KVGPU_WORKLOAD names no built kvgpu-monitoring-workload")
    Cluster.scratch = tempfile.mkdtemp(prefix="kvgpu-dashboard-")
    ok = False
    try:
        Cluster.workload = harness.Workload(binary, os.path.join(Cluster.scratch, "cluster"))
        Cluster.targets = Cluster.workload.start()
        os.makedirs(os.path.join(Cluster.scratch, "prometheus"))
        Cluster.prometheus = harness.Prometheus(Cluster.targets,
                                                os.path.join(Cluster.scratch, "prometheus"))
        # A scrape before the workload, and one after each round: counters and histograms then
        # rise between samples, which rate() and increase() need.
        Cluster.prometheus.wait_scraped_since(time.time())
        for _ in range(2):
            Cluster.facts = Cluster.workload.phase()
            Cluster.prometheus.wait_scraped_since(time.time())
        ok = True
    finally:
        if not ok:
            tearDownModule(keep=True)


def tearDownModule(keep=False):
    if Cluster.prometheus:
        Cluster.prometheus.stop()
    if Cluster.workload:
        Cluster.workload.stop()
    if Cluster.scratch and not keep:
        shutil.rmtree(Cluster.scratch, ignore_errors=True)
    elif Cluster.scratch:
        print("logs kept in", Cluster.scratch)


def panel_failures(prom, dashboard):
    """Each panel query that answers nothing usable: {(panel title, refId): why}."""
    chosen, _ = harness.choose_all(prom, dashboard)
    failures = {}
    for panel in harness.panels(dashboard):
        for target in panel.get("targets", []):
            expr = harness.substitute(target["expr"], chosen)
            try:
                answer = prom.query(expr)
            except Exception as e:  # a query Prometheus refuses is a failure of the panel
                failures[(panel["title"], target["refId"])] = "refused: %s (%s)" % (e, expr)
                continue
            if not harness.finite_samples(answer):
                failures[(panel["title"], target["refId"])] = "no data: " + expr
    return failures


class DashboardJsonTest(unittest.TestCase):
    """What Grafana needs to import it anywhere (no Prometheus needed)."""

    def setUp(self):
        self.dashboard = harness.load_dashboard()

    def test_the_data_source_is_a_variable_not_a_fixed_uid(self):
        variables = harness.variables(self.dashboard)
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        for panel in harness.panels(self.dashboard):
            for holder in [panel] + panel.get("targets", []):
                self.assertEqual(holder["datasource"], {"type": "prometheus", "uid": "${datasource}"},
                                 panel["title"])
        for v in variables.values():
            if v["type"] == "query":
                self.assertEqual(v["datasource"]["uid"], "${datasource}", v["name"])

    def test_node_gpu_and_type_variables_filter_the_panels(self):
        variables = harness.variables(self.dashboard)
        for name in ("node", "gpu", "resource"):
            self.assertIn(name, variables)
            self.assertTrue(variables[name]["multi"] and variables[name]["includeAll"], name)
        used = " ".join(t["expr"] for p in harness.panels(self.dashboard) for t in p["targets"])
        for name in ("node", "gpu", "resource"):
            self.assertIn('=~"$%s"' % name, used)

    def test_panels_are_current_kinds_in_the_required_rows(self):
        rows = [p["title"] for p in self.dashboard["panels"] if p["type"] == "row"]
        self.assertEqual(rows, ["Fleet", "Nodes and GPUs", "Latency", "Failures and alerts",
                                "Licensing"])
        ids = [p["id"] for p in self.dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        for p in self.dashboard["panels"]:
            self.assertIn(p["type"], CURRENT_PANELS, p["title"])
            pos = p["gridPos"]
            self.assertLessEqual(pos["x"] + pos["w"], 24, p["title"])
            if p["type"] != "row":
                self.assertTrue(p.get("targets"), p["title"])
                self.assertTrue(p.get("description"), p["title"])

    def test_the_configmap_carries_the_same_dashboard(self):
        configmap = os.path.join(harness.SOURCE, "deploy", "monitoring", "dashboards",
                                 "kustomization.yaml")
        import yaml
        with open(configmap, encoding="utf-8") as f:
            component = yaml.safe_load(f)
        self.assertEqual(component["kind"], "Component")
        generator = component["configMapGenerator"][0]
        self.assertIn("kata-vgpu.json", generator["files"])
        self.assertEqual(generator["options"]["labels"]["grafana_dashboard"], "1")


class PanelsAnswerTest(unittest.TestCase):
    """Every panel against the real daemons."""

    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.prom = Cluster.prometheus
        cls.facts = Cluster.facts
        cls.dashboard = harness.load_dashboard()

    def ask(self, title, ref="A"):
        chosen, _ = harness.choose_all(self.prom, self.dashboard)
        for panel in harness.panels(self.dashboard):
            if panel["title"] == title:
                for target in panel["targets"]:
                    if target["refId"] == ref:
                        return self.prom.query(harness.substitute(target["expr"], chosen))
        self.fail("no panel %r with query %s" % (title, ref))

    def test_every_panel_query_returns_data(self):
        # The lifecycle and the rescans update some gauges a pass after a change: ask until every
        # query answers, then report what still does not.
        failures = {}

        def clean():
            failures.clear()
            failures.update(panel_failures(self.prom, self.dashboard))
            return not failures

        harness.eventually(clean)
        self.assertEqual(failures, {})

    def test_the_variables_list_the_workloads_nodes_gpus_and_types(self):
        _, values = harness.choose_all(self.prom, self.dashboard)
        self.assertEqual(values["node"], ["node-a", "node-b"])
        self.assertEqual(values["gpu"], ["0000:3b:00.0", "0000:af:00.0"])
        # The T4's 12 vGPU types, as device plugin resources and as DRA's (its driver's name).
        plugin = [r for r in values["resource"] if r.startswith("tencent.com/vgpu-")]
        dra = [r for r in values["resource"] if r.startswith("vgpu.tencent.com/vgpu-")]
        self.assertEqual((len(plugin), len(dra), len(values["resource"])), (12, 12, 24))
        self.assertIn("tencent.com/vgpu-230", plugin)

    def test_vgpus_in_use_are_what_the_workload_made(self):
        pods = sum(n for per_node in self.facts["allocated"].values() for n in per_node.values())
        claims = self.facts["prepared_claims"]["node-a"]
        # The device plugin counts the devices of both front ends: its pods' and DRA's claims'.
        wanted = {("vGPUs in use", "A"): pods + claims, ("vGPUs in use", "B"): claims}
        self.assertEventually(lambda: {k: single(self.ask(*k)) for k in wanted}, wanted)
        per_type = {r: n for r, n in by_label(self.ask("vGPUs in use per type"), "resource").items()
                    if n}
        self.assertEqual(per_type, {"tencent.com/vgpu-230": 2, "tencent.com/vgpu-222": 2,
                                    "vgpu.tencent.com/vgpu-230": claims})
        self.assertEqual(self.facts["allocated"], {"node-a": {"tencent.com/vgpu-230": 2},
                                                   "node-b": {"tencent.com/vgpu-222": 2}})
        # node-b runs no DRA front end: its gauge stays 0.
        self.assertEqual(by_label(self.ask("DRA prepared claims"), "node"),
                         {"node-a": claims, "node-b": 0})
        # Per GPU: the device plugin's GPUs, so the pods' vGPUs.
        self.assertEventually(
            lambda: by_label(self.ask("vGPUs per GPU"), "node", "gpu"),
            {("node-a", "0000:3b:00.0"): 2, ("node-b", "0000:3b:00.0"): 2,
             ("node-b", "0000:af:00.0"): 0})

    def assertEventually(self, observe, wanted):
        """Gauges a rescan or the lifecycle sets a pass after a change: wait for `wanted`."""
        seen = []

        def matches():
            seen[:] = [observe()]
            return seen[0] == wanted

        harness.eventually(matches)
        self.assertEqual(seen[0], wanted)

    def test_gpus_show_their_lock_and_the_room_it_leaves(self):
        def locks():
            rows = self.ask("GPUs: occupancy mode and lock")["result"]
            return {(r["metric"]["node"], r["metric"]["gpu"]): r["metric"].get("locked_type", "")
                    for r in rows}

        # node-a's second GPU is DRA's: the device plugin's model never sees it. node-b's pods
        # are packed on its first GPU (the plugin's preferred allocation).
        self.assertEventually(locks, {("node-a", "0000:3b:00.0"): "nvidia-230",
                                      ("node-b", "0000:3b:00.0"): "nvidia-222",
                                      ("node-b", "0000:af:00.0"): ""})
        # A time-sliced T4 locked to T4-1Q offers no other type, and 16 - 2 more of its own; an
        # empty one 16 of it. (Set at the plugin's next rescan after the pod's vGPU is known.)
        keys = (("node-a", "0000:3b:00.0", "tencent.com/vgpu-222"),
                ("node-a", "0000:3b:00.0", "tencent.com/vgpu-230"),
                ("node-b", "0000:af:00.0", "tencent.com/vgpu-230"))

        def room():
            got = by_label(self.ask("Free per type, per GPU"), "node", "gpu", "resource")
            return [got.get(k) for k in keys]

        self.assertEventually(room, [0, 14, 16])
        free = by_label(self.ask("Free per type, per GPU"), "node", "gpu", "resource")
        # The devices the plugin lists as available are that room, GPU by GPU.
        per_type = {r: n for r, n in by_label(self.ask("vGPUs free per type"), "resource").items()
                    if r.startswith("tencent.com/")}
        summed = {}
        for (_, _, resource), n in free.items():
            summed[resource] = summed.get(resource, 0) + n
        self.assertEqual(per_type, summed)

    def test_nodes_front_ends_and_validation(self):
        self.assertEqual(single(self.ask("Nodes ready", "A")), 2)
        self.assertEqual(single(self.ask("Nodes ready", "B")), 2)
        frontends = by_label(self.ask("Front ends ready"), "node", "frontend")
        self.assertEqual(frontends, {("node-a", "device-plugin"): 1, ("node-a", "dra"): 1,
                                     ("node-b", "device-plugin"): 1})
        self.assertEqual(by_label(self.ask("Nodes validated"), "node"), {"node-b": 1})

    def test_failures_and_alerts_show_the_failed_allocations(self):
        failures = by_label(self.ask("Allocation failures"), "node", "resource")
        self.assertGreater(failures.get(("node-a", "tencent.com/vgpu-230"), 0), 0, failures)
        # KataVgpuAllocationsFailing fires at the first rule evaluation after the scrape that saw
        # the second failure.
        self.assertEventually(
            lambda: ("KataVgpuAllocationsFailing", "firing") in by_label(
                self.ask("Alerts"), "alertname", "alertstate"), True)
        self.assertGreaterEqual(by_label(self.ask("Firing alerts"), "alertstate").get("firing", 0), 1)
        decisions = by_label(self.ask("Webhook decisions"), "decision")
        self.assertGreater(sum(decisions.values()), 0, decisions)

    def test_licensing_shows_what_each_node_published(self):
        files = by_label(self.ask("Published licensing files"), "node", "kind")
        self.assertEqual(files.get(("node-a", "config")), 1, files)
        self.assertEqual(files.get(("node-a", "token")), 1, files)

    def test_latency_panels_have_percentiles(self):
        for title in ("Allocate (percentiles)", "NodePrepareResources per claim",
                      "Admission webhook", "Scheduler extender"):
            for value in harness.finite_samples(self.ask(title)):
                self.assertGreater(value, 0, title)
                self.assertLess(value, 60, title)


class MetricsLintTest(unittest.TestCase):
    def test_promtool_check_metrics_is_clean_for_every_program(self):
        for target in Cluster.targets:
            with self.subTest(job=target["job"], node=target.get("node")):
                with urllib.request.urlopen("http://%s/metrics" % target["address"], timeout=10) as r:
                    text = r.read()
                self.assertIn(b"kvgpu_", text)
                lint = subprocess.run([harness.PROMTOOL, "check", "metrics"], input=text,
                                      capture_output=True, timeout=60)
                self.assertEqual((lint.returncode, lint.stdout + lint.stderr), (0, b""))


class RenamedMetricTest(unittest.TestCase):
    """The test above bites: a second Prometheus over the same daemons sees one metric under
    another name, as after a rename in the code; exactly the panels using it must fail."""

    def test_a_renamed_metric_fails_the_panels_that_use_it(self):
        old, new = RENAMED
        dashboard = harness.load_dashboard()
        users = {(p["title"], t["refId"]) for p in harness.panels(dashboard)
                 for t in p["targets"] if re.search(r"\b%s\b" % old, t["expr"])}
        self.assertTrue(users)
        directory = os.path.join(Cluster.scratch, "prometheus-renamed")
        os.makedirs(directory)
        relabel = [{"source_labels": ["__name__"], "regex": old, "target_label": "__name__",
                    "replacement": new}]
        prom = harness.Prometheus(Cluster.targets, directory, relabel=relabel)
        try:
            prom.wait_scraped_since(time.time())
            self.assertTrue(harness.finite_samples(prom.query(new)))  # the metric is there, renamed
            failures = panel_failures(prom, dashboard)
        finally:
            prom.stop()
        # Each query using the renamed metric is blank. Besides them only rates, increases and
        # alerts may be: this Prometheus started after the workload and saw no rise.
        self.assertTrue(users <= set(failures), (users, failures))
        for key, why in failures.items():
            if key not in users:
                self.assertRegex(why, r"rate\(|increase\(|ALERTS", key)
        print("with %s renamed to %s, these panel queries fail:" % (old, new))
        for key in sorted(users):
            print("  %s (%s): %s" % (key[0], key[1], failures[key]))


if __name__ == "__main__":
    unittest.main()
