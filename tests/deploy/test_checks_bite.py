#!/usr/bin/env python3
"""The checks of check_deploy.py can fail: each case breaks one thing in a copy of deploy/ and
expects the named check to report exactly that. Environment: KVGPU_KUBECTL, KVGPU_DEPLOY,
KVGPU_TESTDATA (set by tests/deploy/CMakeLists.txt); KVGPU_BITE_ONLY=<subcommand> runs only the
cases of one check (CTest runs one test per check, in parallel)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
KUBECTL = os.environ.get("KVGPU_KUBECTL", "kubectl")
DEPLOY = os.environ.get("KVGPU_DEPLOY", os.path.join(HERE, "..", "..", "deploy"))
DATA = os.environ.get("KVGPU_TESTDATA", os.path.join(HERE, "data"))

# (description, file under deploy/, text to replace, replacement, subcommand, expected FAIL text)
CASES = [
    ("a typo'd field in the DaemonSet", "base/device-plugin/daemonset.yaml",
     "        volumeMounts:\n        - name: sys", "        volumeMount:\n        - name: sys",
     "schema", "volumeMount"),
    ("a wrong type", "base/webhook/deployment.yaml",
     "replicas: 2", "replicas: two", "schema", "'two' is not of type 'integer'"),
    ("a required field missing", "base/device-plugin/rbac.yaml",
     "  kind: ClusterRole\n  name: kvgpu-device-plugin", "  name: kvgpu-device-plugin", "schema",
     "'kind' is a required property"),
    ("a broken kustomization", "overlays/cert-manager/kustomization.yaml",
     "- certificates.yaml", "- certificate.yaml", "render", "overlays/cert-manager renders"),
    ("one webhook replica with failurePolicy Fail", "base/webhook/deployment.yaml",
     "replicas: 2", "replicas: 1", "policy", "runs >= 2 replicas"),
    ("no PodDisruptionBudget", "base/webhook/poddisruptionbudget.yaml",
     "minAvailable: 1", "maxUnavailable: 2", "policy", "PodDisruptionBudget keeps a replica up"),
    ("a privileged webhook", "base/webhook/deployment.yaml",
     "privileged: false", "privileged: true", "policy", "is not privileged"),
    ("a webhook that may run as root", "base/webhook/deployment.yaml",
     "runAsNonRoot: true", "runAsNonRoot: false", "policy", "runs as a non-root user"),
    ("a container without a memory limit", "base/webhook/deployment.yaml",
     "          limits:\n            memory: 128Mi\n", "", "policy", "limits memory"),
    ("a container without a readiness probe", "base/device-plugin/daemonset.yaml",
     "        readinessProbe:", "        x-readinessProbe:", "policy", "liveness and readiness"),
    ("--state-dir not mounted", "base/device-plugin/daemonset.yaml",
     "--state-dir=/var/lib/kata-vgpu", "--state-dir=/var/lib/elsewhere", "policy", "--state-dir"),
    ("/sys mounted read-only", "base/device-plugin/daemonset.yaml",
     "          mountPath: /sys\n", "          mountPath: /sys\n          readOnly: true\n", "policy", "--sysfs-root"),
    ("pod-resources from another host path", "base/device-plugin/daemonset.yaml",
     "path: /var/lib/kubelet/pod-resources", "path: /var/lib/kubelet/podresources", "policy", "pod-resources"),
    ("--config pointing at a missing key", "base/device-plugin/daemonset.yaml",
     "--config=/etc/kata-vgpu/device-plugin/config.yaml", "--config=/etc/kata-vgpu/device-plugin/plugin.yaml",
     "policy", "--config"),
    ("the plugin off the host network", "base/device-plugin/daemonset.yaml",
     "hostNetwork: true", "hostNetwork: false", "policy", "host network"),
    ("a wildcard RBAC rule", "base/device-plugin/rbac.yaml",
     "verbs: [create, patch]", "verbs: ['*']", "policy", "no wildcard"),
    ("the plugin allowed to delete pods", "base/device-plugin/rbac.yaml",
     "verbs: [get, list, watch]", "verbs: [get, list, watch, delete]", "policy", "nothing else"),
    ("webhook probe over plain HTTP", "base/webhook/deployment.yaml",
     "scheme: HTTPS\n            path: /readyz", "scheme: HTTP\n            path: /readyz", "policy", "readinessProbe is HTTPS"),
    ("sideEffects not None", "base/webhook/mutatingwebhookconfiguration.yaml",
     "sideEffects: None", "sideEffects: NoneOnDryRun", "policy", "sideEffects None"),
    ("the TLS Secret renamed in the Deployment only", "base/webhook/deployment.yaml",
     "secretName: kvgpu-webhook-tls", "secretName: kvgpu-webhook-cert", "policy", "come from one Secret"),
    ("a resource prefix the matchConditions do not test", "base/webhook/config.yaml",
     'resourcePrefixes: ["tencent.com/vgpu-"]', 'resourcePrefixes: ["tencent.com/vgpu-", "example.com/vgpu-"]',
     "consistency", "resourcePrefixes"),
    ("a runtime class that is not deployed", "base/webhook/config.yaml",
     "runtimeClassNames: [kata-vgpu, kata-vgpu-vf]", "runtimeClassNames: [kata, kata-vgpu, kata-vgpu-vf]",
     "consistency", "runtimeClassNames"),
    ("the RuntimeClass copy drifting", "base/runtime/runtimeclass.yaml",
     "cpu: 500m", "cpu: 250m", "consistency", "byte-identical"),
    ("an image with another tag", "base/webhook/config.yaml",
     "image: kata-vgpu/guest-tools:0.1.0", "image: kata-vgpu/guest-tools:0.0.9", "consistency", "tag"),
    ("a gridd.conf key the driver does not know", "base/licensing/gridd.conf",
     "EnableUI=FALSE", "EnableUI=FALSE\nLicenceServer=x", "consistency", "gridd.conf sets only keys"),
    ("the plugin publishing licensing files where gridd does not look", "base/device-plugin/daemonset.yaml",
     "--licensing-dir=/var/lib/kata-vgpu/licensing", "--licensing-dir=/var/lib/kata-vgpu/lic",
     "consistency", "ClientConfigTokenPath"),
    ("the token Secret missing from the plugin's licensing source", "base/device-plugin/daemonset.yaml",
     "              name: kvgpu-client-token\n", "              name: kvgpu-token\n", "policy",
     "--licensing-source"),
    ("a validator given a capability", "components/validator/daemonset.yaml",
     "            drop: [ALL]\n", "            drop: [ALL]\n            add: [SYS_ADMIN]\n", "policy",
     "kvgpu-validator container validator is unprivileged, cannot escalate, has no capability"),
    ("the host's / mounted writable in the validator", "components/validator/daemonset.yaml",
     "          mountPath: /host\n          readOnly: true\n", "          mountPath: /host\n", "policy",
     "kvgpu-validator container validator mounts host paths read-only"),
    ("a validator in the host's PID namespace", "components/validator/daemonset.yaml",
     "      serviceAccountName: kvgpu-validator\n",
     "      serviceAccountName: kvgpu-validator\n      hostPID: true\n", "policy",
     "kvgpu-validator container validator uses no host namespace"),
    ("the validator allowed to list pods", "components/validator/rbac.yaml",
     "verbs: [create, get, delete]", "verbs: [create, get, delete, list]", "policy",
     "the validator may read and patch nodes"),
    ("a top-level namespace", "base/kustomization.yaml",
     "resources:\n", "namespace: kata-vgpu\nresources:\n", "kustomize-current",
     "no top-level namespace"),
    ("an alert on a metric no program exports", "monitoring/prometheusrule.yaml",
     "kvgpu_deviceplugin_registrations_total", "kvgpu_deviceplugin_registration_total",
     "monitoring", "kvgpu_deviceplugin_registration_total is a metric"),
    ("a PodMonitor scraping a port the pods do not name", "monitoring/podmonitors.yaml",
     "  - port: metrics\n    path: /metrics\n    interval: 30s\n    relabelings:\n    - sourceLabels: [__meta_kubernetes_pod_node_name]\n      targetLabel: node\n---",
     "  - port: prom\n    path: /metrics\n    interval: 30s\n    relabelings:\n    - sourceLabels: [__meta_kubernetes_pod_node_name]\n      targetLabel: node\n---",
     "monitoring", "scrapes a port the pods name"),
    ("a rule the operator's schema refuses", "monitoring/prometheusrule.yaml",
     "      for: 2m\n", "      for: two minutes\n", "schema", "monitoring: PrometheusRule"),
    ("a field kustomize v5 deprecates", "overlays/cert-manager/kustomization.yaml",
     "patches:\n- path: webhook-ca-injection.yaml",
     "patchesStrategicMerge:\n- webhook-ca-injection.yaml", "kustomize-current",
     "no field kustomize v5 deprecates"),
    ("a deprecation warning while rendering", "overlays/cert-manager/kustomization.yaml",
     "patches:\n- path: webhook-ca-injection.yaml",
     "patchesStrategicMerge:\n- webhook-ca-injection.yaml", "render", "Warning"),
]


def run_check(deploy, subcommand):
    args = [sys.executable, os.path.join(HERE, "check_deploy.py"), subcommand, "--deploy", deploy]
    if subcommand != "kustomize-current":
        args += ["--kubectl", KUBECTL]
    if subcommand == "schema":
        args += ["--k8s-schemas", os.path.join(DATA, "k8s-1.35-openapi-subset.json"),
                 "--crd-schemas", os.path.join(DATA, "cert-manager-v1-schemas.json"),
                 os.path.join(DATA, "prometheus-operator-v1-schemas.json")]
    if subcommand in ("consistency", "monitoring"):
        args += ["--repo", os.path.join(deploy, "..", "repo")]
    return subprocess.run(args, capture_output=True, text=True)


class ChecksBite(unittest.TestCase):
    def test_each_breakage_is_reported(self):
        repo = os.path.abspath(os.path.join(DEPLOY, ".."))
        only = os.environ.get("KVGPU_BITE_ONLY")
        cases = [c for c in CASES if only in (None, c[4])]
        self.assertTrue(cases, "no case for %s" % only)
        for description, path, old, new, subcommand, expected in cases:
            with self.subTest(description):
                with tempfile.TemporaryDirectory() as tmp:
                    deploy = os.path.join(tmp, "deploy")
                    shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("certs", "certs-by-gen-webhook-cert.sh"))
                    # consistency reads kata-config/, guest-image/, webhook/ beside deploy/.
                    os.symlink(repo, os.path.join(tmp, "repo"))
                    target = os.path.join(deploy, path)
                    with open(target) as f:
                        text = f.read()
                    self.assertIn(old, text, "the case no longer matches %s" % path)
                    with open(target, "w") as f:
                        f.write(text.replace(old, new, 1))
                    result = run_check(deploy, subcommand)
                    failures = [l for l in result.stdout.splitlines() if l.startswith("FAIL")]
                    self.assertNotEqual(result.returncode, 0, result.stdout[-2000:])
                    self.assertTrue(any(expected in l for l in failures),
                                    "no FAIL line mentions %r:\n%s" % (expected, "\n".join(failures) or result.stdout[-2000:] + result.stderr[-2000:]))


if __name__ == "__main__":
    unittest.main()
