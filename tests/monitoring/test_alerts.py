"""The alerts of deploy/monitoring/prometheusrule.yaml under promtool: the rule file they make is
valid (`promtool check rules`), every alert has `promtool test rules` cases in
deploy/monitoring/tests/alerts.test.yaml that make it fire and cases where it must stay quiet, and
those cases pass.
"""

import os
import shutil
import subprocess
import tempfile
import unittest

import yaml

import harness

TESTS = os.path.join(harness.SOURCE, "deploy", "monitoring", "tests", "alerts.test.yaml")


def alerts():
    with open(harness.RULE, encoding="utf-8") as f:
        rule = yaml.safe_load(f)
    return [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


class AlertRulesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvgpu-alerts-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        harness.rules_file(self.dir)
        shutil.copy(TESTS, os.path.join(self.dir, "alerts.test.yaml"))

    def promtool(self, *args):
        return subprocess.run([harness.PROMTOOL, *args], cwd=self.dir, capture_output=True,
                              text=True, timeout=120)

    def test_promtool_check_rules_is_clean(self):
        run = self.promtool("check", "rules", "rules.yaml")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("SUCCESS: %d rules found" % len(alerts()), run.stdout)

    def test_every_alert_has_a_firing_and_a_quiet_case(self):
        with open(TESTS, encoding="utf-8") as f:
            cases = yaml.safe_load(f)
        fires, quiet = set(), set()
        for group in cases["tests"]:
            for case in group.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
        self.assertEqual(sorted(set(alerts()) - fires), [], "alerts no case makes fire")
        self.assertEqual(sorted(set(alerts()) - quiet), [], "alerts no case keeps quiet")
        self.assertEqual(sorted((fires | quiet) - set(alerts())), [], "cases of no alert")

    def test_promtool_test_rules_passes(self):
        run = self.promtool("test", "rules", "alerts.test.yaml")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    def test_a_case_that_expects_the_wrong_alert_fails(self):
        # The cases can fail: KataVgpuLeaked's case expecting the healthy node must make promtool
        # report it (that case alone, to keep the run short).
        with open(TESTS, encoding="utf-8") as f:
            cases = yaml.safe_load(f)
        leaked = [g for g in cases["tests"]
                  if any(c["alertname"] == "KataVgpuLeaked" for c in g["alert_rule_test"])]
        self.assertEqual(len(leaked), 1)
        for case in leaked[0]["alert_rule_test"]:
            for alert in case.get("exp_alerts", []):
                self.assertEqual(alert["exp_labels"]["node"], "n1")
                alert["exp_labels"]["node"] = "n2"
        cases["tests"] = leaked
        with open(os.path.join(self.dir, "bent.test.yaml"), "w", encoding="utf-8") as f:
            yaml.safe_dump(cases, f, sort_keys=False)
        run = self.promtool("test", "rules", "bent.test.yaml")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("KataVgpuLeaked", run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main()
