"""deploy/base/policy/vgpu-pods.yaml, the ValidatingAdmissionPolicy that narrows the Pod Security
exemption of the Kata vGPU RuntimeClasses to what the webhook injects. Its CEL is evaluated with a
CEL implementation from the npm registry (tests/deploy/cel, pinned by its lock file), on the pods
the real webhook mutates (webhook_dump_patches, patches applied with python3-jsonpatch) and on
hostile shapes a tenant could submit."""

import copy
import glob
import json
import os
import subprocess
import tempfile
import unittest

import jsonpatch
import yaml

DEPLOY = os.environ["KVGPU_DEPLOY"]
DUMP_PATCHES = os.environ["KVGPU_DUMP_PATCHES"]
CEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cel")
CLASSES = ("kata-vgpu", "kata-vgpu-vf")


def load(path):
    with open(os.path.join(DEPLOY, path)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


POLICY = next(d for d in load("base/policy/vgpu-pods.yaml") if d["kind"] == "ValidatingAdmissionPolicy")
# Only what differs from the webhook's built-in defaults: the runtime classes.
WEBHOOK = load("base/webhook/config.yaml")[0]


def evaluate(pods):
    result = subprocess.run(["node", os.path.join(CEL, "evaluate.mjs")], cwd=CEL, text=True,
                            input=json.dumps({"spec": POLICY["spec"], "objects": pods}),
                            capture_output=True, check=False)
    if result.returncode != 0:
        raise AssertionError("CEL evaluation failed: " + result.stderr[-3000:])
    return json.loads(result.stdout)


def mutated_pods(with_original=False):
    """(description, pod) for every case the webhook mutates."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([DUMP_PATCHES, out], check=True, capture_output=True)
        cases = []
        for path in sorted(glob.glob(os.path.join(out, "case-*.json"))):
            with open(path) as f:
                case = json.load(f)
            pod = jsonpatch.apply_patch(case["pod"], case["patch"])
            cases.append((case["description"], pod, case["pod"]) if with_original
                         else (case["description"], pod))
        return cases


def vgpu_pod(runtime_class="kata-vgpu", **spec):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"},
           "spec": {"containers": [{"name": "train", "image": "my/trainer",
                                    "resources": {"limits": {"tencent.com/vgpu-222": "1"}}}]}}
    if runtime_class:
        pod["spec"]["runtimeClassName"] = runtime_class
    pod["spec"].update(spec)
    return pod


def hostile_shapes(mutated):
    """(description, pod, reason) of the tenant shapes the policy refuses, `reason` a part of its
    message; `mutated` is a pod the webhook mutated (tests/k8s/scenario_webhook.py passes one the
    real API server stored)."""
    privileged_own = vgpu_pod()
    privileged_own["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    caps = vgpu_pod()
    caps["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}
    host_root = vgpu_pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    driver_elsewhere = vgpu_pod(volumes=[{"name": "kvgpu-driver", "hostPath": {"path": "/etc"}}])
    dev_mount = vgpu_pod(volumes=[{"name": "kvgpu-dev", "hostPath": {"path": "/dev"}}])
    dev_mount["spec"]["containers"][0]["volumeMounts"] = [{"name": "kvgpu-dev", "mountPath": "/dev"}]
    rw_bundle = vgpu_pod()
    rw_bundle["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "kvgpu-driver", "mountPath": "/usr/local/nvidia"}]
    token = {"name": "kvgpu-client-token",
             "hostPath": {"path": "/var/lib/kata-vgpu/licensing/ClientConfigToken"}}
    token_read = vgpu_pod(volumes=[token])
    token_read["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "kvgpu-client-token", "mountPath": "/t", "readOnly": True}]
    token_write = copy.deepcopy(mutated)
    token_write["spec"]["runtimeClassName"] = "kata-vgpu"
    gridd = next(c for c in token_write["spec"].get("initContainers", []) + token_write["spec"]["containers"]
                 if c["name"] == "nvidia-gridd")
    for mount in gridd["volumeMounts"]:
        if mount["name"] == "kvgpu-client-token":
            mount["readOnly"] = False
    licensing_dir = vgpu_pod(volumes=[{"name": "kvgpu-client-token",
                                       "hostPath": {"path": "/var/lib/kata-vgpu/licensing"}}])
    fake_injected = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                     "spec": {"runtimeClassName": "kata-vgpu", "containers": [
                         {"name": "kvgpu-driver-init", "image": "x",
                          "securityContext": {"privileged": True}}]}}
    return [
        ("a vGPU without a Kata class (runc)", vgpu_pod(runtime_class=None), "runtimeClassName"),
        ("a vGPU under another runtime class", vgpu_pod(runtime_class="runc"), "runtimeClassName"),
        ("the vGPU in requests only", {**vgpu_pod(runtime_class=None), "spec": {"containers": [
            {"name": "a", "image": "x", "resources": {"requests": {"tencent.com/vgpu-230": "1"}}}]}},
         "runtimeClassName"),
        ("the tenant's own container privileged", privileged_own, "privileged"),
        ("the tenant's own container adding capabilities", caps, "capabilities"),
        ("the host's / as a volume", host_root, "hostPath"),
        ("an injected volume name on another host path", driver_elsewhere, "hostPath"),
        ("the tenant's container mounting /dev", dev_mount, "/dev"),
        ("the tenant's container reading the licence token", token_read, "licensing files"),
        ("the injected nvidia-gridd given a writable token mount", token_write, "read-only"),
        ("the token volume name on the whole licensing directory", licensing_dir, "hostPath"),
        ("the tenant's container mounting the driver bundle writable", rw_bundle, "read-only"),
        ("a privileged container named like the injected one, in a pod without a vGPU",
         fake_injected, "privileged"),
        ("the host network", vgpu_pod(hostNetwork=True), "network"),
        ("the host PID namespace", vgpu_pod(hostPID=True), "PID"),
        ("a Kata runtime annotation (kata-deploy's handlers pass them all)",
         {**vgpu_pod(), "metadata": {"name": "p", "annotations": {
             "io.katacontainers.config.runtime.sandbox_cgroup_only": "false"}}},
         "io.katacontainers"),
    ]


class PolicyMatchesTheWebhook(unittest.TestCase):
    def test_the_policy_names_what_the_webhook_injects(self):
        """With the built-in names (the first case mutates with the default config), every
        privileged container and hostPath volume the webhook adds is one the policy names, and
        the policy's classes are the deployed ones."""
        variables = {v["name"]: v["expression"] for v in POLICY["spec"]["variables"]}
        description, pod, original = mutated_pods(with_original=True)[0]
        self.assertIn("full setup", description)
        names = lambda spec: {c["name"] for c in spec.get("containers", []) + spec.get("initContainers", [])}
        added = names(pod["spec"]) - names(original["spec"])
        self.assertTrue(added)
        for name in added:
            self.assertRegex(name, variables["injectedContainers"].strip("'"))
        volumes = {v["name"]: v["hostPath"]["path"]
                   for v in pod["spec"].get("volumes", []) if "hostPath" in v}
        self.assertEqual(volumes, {"kvgpu-driver": "/opt/kata-vgpu/driver", "kvgpu-dev": "/dev",
                                   "kvgpu-gridd-conf": "/var/lib/kata-vgpu/licensing/gridd.conf",
                                   "kvgpu-client-token": "/var/lib/kata-vgpu/licensing/ClientConfigToken"},
                         "the policy's rules name these volumes and paths")
        self.assertRegex("kvgpu-driver", variables["driverVolume"].strip("'"))
        self.assertRegex("kvgpu-dev", variables["devVolume"].strip("'"))
        self.assertRegex("kvgpu-gridd-conf", variables["griddConfVolume"].strip("'"))
        self.assertRegex("kvgpu-client-token", variables["tokenVolume"].strip("'"))
        rule_text = json.dumps(POLICY["spec"]["validations"])
        for path in volumes.values():
            self.assertIn("'%s'" % path, rule_text)
        self.assertEqual(sorted(WEBHOOK["runtimeClassNames"]), sorted(CLASSES))
        for cls in CLASSES:
            self.assertIn("'%s'" % cls, variables["kataClasses"])


class WebhookOutputIsAllowed(unittest.TestCase):
    def test_every_pod_the_webhook_mutates_passes(self):
        cases = mutated_pods()
        self.assertGreater(len(cases), 10)
        # Cases configured with another resource prefix than the deployed tencent.com/vgpu- ask
        # for no vGPU the policy knows; they say nothing about the deployed setup.
        cases = [(d, pod) for d, pod in cases if "tencent.com/vgpu-" in json.dumps(pod["spec"])]
        pods = []
        for description, pod in cases:
            # The unit cases use the webhook's built-in class list ("kata", ...); the deployed
            # classes are the ones the policy names.
            pod["spec"]["runtimeClassName"] = "kata-vgpu-vf" \
                if pod["spec"].get("runtimeClassName") == "kata-vgpu-vf" else "kata-vgpu"
            pods.append(pod)
        for (description, _), verdict in zip(cases, evaluate(pods)):
            with self.subTest(description):
                self.assertTrue(verdict["allowed"], verdict["messages"])


class TenantShapes(unittest.TestCase):
    def verdicts(self, cases):
        return zip(cases, evaluate([pod for _, pod, _ in cases]))

    def test_ordinary_pods_pass(self):
        plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                 "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
        kata_no_gpu = copy.deepcopy(plain)
        kata_no_gpu["spec"]["runtimeClassName"] = "kata-vgpu"
        cases = [("a runc pod without a vGPU (Pod Security judges it)", plain, None),
                 ("a Kata pod without a vGPU", kata_no_gpu, None),
                 ("a Kata vGPU pod before the webhook ran", vgpu_pod(), None)]
        for (description, _, _), verdict in self.verdicts(cases):
            with self.subTest(description):
                self.assertTrue(verdict["allowed"], verdict["messages"])

    def test_hostile_pods_are_refused_with_the_reason(self):
        cases = hostile_shapes(mutated_pods()[0][1])
        for (description, _, reason), verdict in self.verdicts(cases):
            with self.subTest(description):
                self.assertFalse(verdict["allowed"])
                self.assertTrue(any(reason in m for m in verdict["messages"]), verdict["messages"])


if __name__ == "__main__":
    unittest.main()
