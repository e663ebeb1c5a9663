#!/usr/bin/python3
"""Scenario 2 (Webhook), against the real control plane of one pinned release.

The real kube-apiserver calls kvgpu-webhook (this build's, a local process on loopback) through
the MutatingWebhookConfiguration of deploy/overlays/default, of which only clientConfig (a URL
`https://127.0.0.1:<port>/mutate` instead of the in-cluster Service) and its caBundle (the test's
own CA, which signed the webhook's serving certificate for IP 127.0.0.1) are replaced: rules,
failurePolicy, matchConditions, namespaceSelector, reinvocationPolicy, sideEffects, timeouts stay
as shipped. The webhook runs with the overlay's own config (the kvgpu-webhook-config ConfigMap),
the overlay's RuntimeClasses, ValidatingAdmissionPolicy and its binding are applied too. Then:

  - Kata vGPU pods created with `kubectl create` (hot-plug kata-vgpu and cold-plug kata-vgpu-vf)
    are stored mutated as tests/webhook expects: the marker annotation, the driver loader and
    nvidia-gridd laid out per attach mode (native sidecars in initContainers, gridd's probes), the
    four hostPath volumes at their paths, the driver bundle mounted read-only at /usr/local/nvidia
    in each container that asks for a vGPU, the config's images; the webhook logged `mutated`;
  - a pod without a vGPU is stored untouched (matchConditions: the webhook is not called), and
    so is a vGPU pod in the webhook's own namespace kata-vgpu (namespaceSelector);
  - a vGPU pod without a Kata class, or with another class, is refused with our message;
  - every pod of a set of shapes the webhook mutates (two classes, requests only, an init
    container asking, two containers asking, clashing volume and container names) is admitted
    with the ValidatingAdmissionPolicy bound: the real API server's CEL allows them;
  - the tenant shapes of tests/deploy/test_vgpu_pod_policy.py are refused, first with the webhook
    in place (by the webhook or by the policy after it mutated them), then with the webhook
    configuration removed: by the policy alone, with the reason the CEL tests expect (or, for a
    shape the API server's validation refuses before any validating admission, by that);
  - reinvocation: a second mutating webhook (a Python HTTPS server in this process, registered
    after ours) adds a container asking for a vGPU; the API server calls ours again
    (reinvocationPolicy IfNeeded), which gives the new container the driver mount and injects
    nothing twice.

usage: scenario_webhook.py --release 1.36 [--bite]
  --bite: instead, the same checks twice against a broken webhook (BITES), each time on a fresh
  control plane: a webhook config that renames the licensing sidecar must fail the policy's
  admission of the pods it mutates; one that names another resource prefix (so it injects
  nothing and refuses nothing) must fail the checks on the stored mutation, on the refusal of
  non-Kata pods with our message and on reinvocation; each keeps passing what it does not break.
Exit status 0 when every check passed, 1 otherwise, 77 (skipped) only when the release's programs
are not built and Go is not installed, or kvgpu-webhook is not built.
"""
import argparse
import base64
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "deploy"))

import check_deploy  # noqa: E402
import controlplane  # noqa: E402
import yaml  # noqa: E402

TENANT = "tenant-a"
VGPU = "tencent.com/vgpu-222"
MARKER = "kata-vgpu.io/injected"
POLICY = "kata-vgpu-pods"
WEBHOOK_NAME = "vgpu-pods.kata-vgpu.io"
DEADLINE = 180.0  # for what the API server does asynchronously (its webhook and policy informers)


def openssl(*args, cwd):
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise controlplane.ControlPlaneError("openssl %s: %s" % (" ".join(args), result.stderr.strip()))


def make_webhook_pki(directory):
    """A CA of the webhooks' own (the caBundle) and serving certificates for 127.0.0.1 it signs."""
    os.makedirs(directory, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=kata-vgpu-webhook-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign", cwd=directory)
    for name in ("webhook", "second"):
        openssl("req", "-x509", "-CA", "ca.crt", "-CAkey", "ca.key", *ec, "-keyout", name + ".key",
                "-out", name + ".crt", "-days", "2", "-subj", "/CN=" + name,
                "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth",
                "-addext", "subjectAltName=IP:127.0.0.1", cwd=directory)
    with open(os.path.join(directory, "ca.crt"), "rb") as f:
        return base64.b64encode(f.read()).decode()


def pod(name, runtime_class="kata-vgpu", containers=None, **spec):
    out = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT},
           "spec": {"containers": containers or [
               {"name": "train", "image": "my/trainer", "resources": {"limits": {VGPU: "1"}}}]}}
    if runtime_class:
        out["spec"]["runtimeClassName"] = runtime_class
    out["spec"].update(spec)
    return out


def mutated_shapes():
    """(description, pod) the webhook mutates: each must be stored with the policy bound."""
    two = [{"name": "a", "image": "x", "resources": {"limits": {VGPU: "1"}}},
           {"name": "b", "image": "x", "resources": {"limits": {"tencent.com/vgpu-230": "1"}}}]
    return [
        ("hot-plug class kata-vgpu", pod("m-hot")),
        ("cold-plug class kata-vgpu-vf", pod("m-cold", "kata-vgpu-vf")),
        # Not requests alone: the API server refuses an extended resource in requests without
        # the same limit ("Limit must be set for non overcommitable resources").
        ("the vGPU in requests and limits", pod("m-requests", containers=[
            {"name": "a", "image": "x", "resources": {"requests": {VGPU: "1"}, "limits": {VGPU: "1"}}}])),
        ("two containers asking", pod("m-two", containers=two)),
        ("an init container asking", pod("m-init", containers=[{"name": "main", "image": "x"}],
                                        initContainers=[{"name": "prep", "image": "x",
                                                         "resources": {"limits": {VGPU: "1"}}}])),
        ("the pod's own volume named kvgpu-dev (ours is renamed)",
         pod("m-volume-clash", volumes=[{"name": "kvgpu-dev", "emptyDir": {}}])),
        ("the pod's own container named nvidia-gridd (ours is renamed)", pod("m-name-clash", containers=[
            {"name": "nvidia-gridd", "image": "x"},
            {"name": "train", "image": "x", "resources": {"limits": {VGPU: "1"}}}])),
        ("a user init container without a vGPU", pod("m-user-init", initContainers=[
            {"name": "fetch", "image": "x"}])),
    ]


def tenant_shapes(mutated):
    """tests/deploy/test_vgpu_pod_policy.py's hostile tenant shapes, named for this namespace;
    `mutated` is a pod the webhook mutated, as stored."""
    os.environ.setdefault("KVGPU_DEPLOY", os.path.join(REPO, "deploy"))
    os.environ.setdefault("KVGPU_DUMP_PATCHES", "")
    import test_vgpu_pod_policy
    try:
        shapes = test_vgpu_pod_policy.hostile_shapes(copy.deepcopy(mutated))
    except StopIteration:
        return []  # `mutated` has no nvidia-gridd: the checks on it have failed
    out = []
    for i, (description, shape, reason) in enumerate(shapes):
        shape = copy.deepcopy(shape)
        shape["metadata"] = dict(shape.get("metadata", {}), name="tenant-shape-%d" % i, namespace=TENANT)
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
            shape["metadata"].pop(key, None)
        shape.pop("status", None)
        out.append((description, shape, reason))
    return out


class SecondWebhook:
    """A mutating webhook that adds a container asking for a vGPU to pods labelled
    `kvgpu-test/second-webhook`, served over HTTPS from a thread of this process."""

    ADDED = "added-by-second-webhook"

    def __init__(self, cert, key):
        self.calls = []
        self.server = controlplane.JsonHttpsServer(self.answer, cert, key)
        self.port = self.server.port

    def answer(self, _path, review):
        request = review["request"]
        obj = request["object"]
        self.calls.append(obj)
        names = [c["name"] for c in obj["spec"]["containers"]]
        response = {"uid": request["uid"], "allowed": True}
        if SecondWebhook.ADDED not in names:
            patch = [{"op": "add", "path": "/spec/containers/-",
                      "value": {"name": SecondWebhook.ADDED, "image": "x",
                                "resources": {"limits": {VGPU: "1"}}}}]
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    def stop(self):
        self.server.stop()


class Scenario:
    def __init__(self, cp, report, workdir, webhook_bin, deploy):
        self.cp = cp
        self.report = report
        self.dir = workdir
        self.webhook_bin = webhook_bin
        self.deploy = deploy
        self.webhook = None

    # --- setup -------------------------------------------------------------------------------

    def render(self):
        with check_deploy.scratch_deploy(self.deploy) as deploy:
            objects, error = check_deploy.render(os.path.join(self.cp.bin_dir, "kubectl"),
                                                 os.path.join(deploy, "overlays", "default"))
        if objects is None:
            raise controlplane.ControlPlaneError("overlays/default does not render: %s" % error)
        return objects

    def start_webhook(self, config_text):
        config = os.path.join(self.dir, "webhook.yaml")
        with open(config, "w") as f:
            f.write(config_text)
        port = controlplane._free_ports(1)[0]
        self.webhook_log = os.path.join(self.dir, "kvgpu-webhook.log")
        pki = os.path.join(self.dir, "webhook-pki")
        self.webhook = controlplane._Process("kvgpu-webhook", [
            self.webhook_bin, "--listen=127.0.0.1:%d" % port,
            "--tls-cert-file=" + os.path.join(pki, "webhook.crt"),
            "--tls-key-file=" + os.path.join(pki, "webhook.key"),
            "--config=" + config, "--workers=2"], self.webhook_log)
        self.cp.wait_https_ready("kvgpu-webhook answers /readyz", port, os.path.join(pki, "ca.crt"),
                                 [self.webhook])
        return port

    def setup(self, broken_config=None):
        objects = self.render()
        pki = os.path.join(self.dir, "webhook-pki")
        ca_bundle = make_webhook_pki(pki)
        cm = check_deploy.one(objects, "ConfigMap", "kvgpu-webhook-config")
        config_text = broken_config(cm["data"]["webhook.yaml"]) if broken_config else cm["data"]["webhook.yaml"]
        port = self.start_webhook(config_text)

        mwc = copy.deepcopy(check_deploy.one(objects, "MutatingWebhookConfiguration", "kvgpu-webhook"))
        shipped = copy.deepcopy(mwc)
        for hook in mwc["webhooks"]:
            path = hook["clientConfig"]["service"].get("path", "/")
            hook["clientConfig"] = {"url": "https://127.0.0.1:%d%s" % (port, path), "caBundle": ca_bundle}
        # Only clientConfig differs from the shipped configuration.
        strip = lambda m: [{k: v for k, v in h.items() if k != "clientConfig"} for h in m["webhooks"]]
        assert strip(mwc) == strip(shipped)
        self.mwc = mwc
        print("the shipped webhook configuration, clientConfig replaced:\n" + yaml.safe_dump(mwc["webhooks"]))

        setup = []
        for namespace in (TENANT, "kata-vgpu"):
            # No controller-manager: the `default` ServiceAccount its pods need is made here.
            setup += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                      {"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "default", "namespace": namespace}}]
        # A class that is not Kata's, for the pods that name one.
        setup.append({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "runc"},
                      "handler": "runc"})
        setup += [o for o in objects if o["kind"] in ("RuntimeClass", "ValidatingAdmissionPolicy",
                                                     "ValidatingAdmissionPolicyBinding")]
        setup.append(mwc)
        self.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(setup))
        # The API server loads webhook configurations and policies through informers: wait until
        # a dry run shows each in force.
        self.wait_for("the webhook configuration is in force (the API server calls kvgpu-webhook)",
                      lambda: self.dry_run(pod("probe")) and self.decisions("probe"))
        self.wait_for("the ValidatingAdmissionPolicy is in force (a dry run on the host network is refused)",
                      lambda: POLICY in json.dumps(self.dry_run(pod("probe", hostNetwork=True))[1]))

    def wait_for(self, what, ready):
        end = time.monotonic() + DEADLINE
        while not ready():
            if time.monotonic() > end:
                raise controlplane.ControlPlaneError("%s: not within %.0f s" % (what, DEADLINE))
            time.sleep(0.5)

    def dry_run(self, obj):
        return self.cp.request("POST", "/api/v1/namespaces/%s/pods?dryRun=All" % TENANT, obj)

    def create(self, obj):
        """kubectl create: (ok, stored pod or None, stderr)."""
        result = self.cp.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)
        if result.returncode != 0:
            return False, None, result.stderr.strip()
        return True, json.loads(result.stdout), result.stderr.strip()

    def decisions(self, name, namespace=TENANT):
        try:
            with open(self.webhook_log, errors="replace") as f:
                text = f.read()
        except OSError:
            return []
        return re.findall(r"pod %s/%s: (\w+)" % (namespace, re.escape(name)), text)

    # --- checks ------------------------------------------------------------------------------

    def check_mutation(self, stored, cold):
        r, name = self.report, stored["metadata"]["name"]
        spec = stored["spec"]
        r.check(MARKER in (stored["metadata"].get("annotations") or {}),
                "%s: stored with the marker %s" % (name, MARKER))
        inits = {c["name"]: c for c in spec.get("initContainers", [])}
        order = [c["name"] for c in spec.get("initContainers", [])]
        r.check(order[:2] == ["kvgpu-driver-init", "nvidia-gridd"],
                "%s: the driver loader, then nvidia-gridd, at the front of initContainers" % name, " ".join(order))
        loader, gridd = inits.get("kvgpu-driver-init", {}), inits.get("nvidia-gridd", {})
        if cold:
            r.check("restartPolicy" not in loader, "%s: cold-plug: the driver loader runs to completion" % name,
                    str(loader.get("restartPolicy")))
            r.check("startupProbe" in gridd, "%s: cold-plug: nvidia-gridd waits for its licence (startupProbe)" % name)
        else:
            r.check(loader.get("restartPolicy") == "Always",
                    "%s: hot-plug: the driver loader is a native sidecar" % name, str(loader.get("restartPolicy")))
            r.check("startupProbe" not in gridd, "%s: hot-plug: nvidia-gridd has no startupProbe" % name)
        r.check(gridd.get("restartPolicy") == "Always" and "readinessProbe" in gridd,
                "%s: nvidia-gridd is a native sidecar with its readinessProbe" % name)
        for c in (loader, gridd):
            r.check(c.get("image") == "kata-vgpu/guest-tools:0.1.0" and
                    (c.get("securityContext") or {}).get("privileged") is True,
                    "%s: %s runs the configured image, privileged" % (name, c.get("name")),
                    "%s %s" % (c.get("image"), c.get("securityContext")))
        volumes = {v["name"]: (v.get("hostPath") or {}).get("path") for v in spec.get("volumes", [])}
        want = {"kvgpu-driver": "/opt/kata-vgpu/driver", "kvgpu-dev": "/dev",
                "kvgpu-gridd-conf": "/var/lib/kata-vgpu/licensing/gridd.conf",
                "kvgpu-client-token": "/var/lib/kata-vgpu/licensing/ClientConfigToken"}
        r.check(all(volumes.get(k) == v for k, v in want.items()),
                "%s: the four hostPath volumes at their paths" % name, json.dumps(volumes))
        mounts = {(m["name"], m["mountPath"], m.get("readOnly", False))
                  for m in gridd.get("volumeMounts", [])}
        r.check({("kvgpu-gridd-conf", "/etc/nvidia/gridd.conf", True),
                 ("kvgpu-client-token", "/etc/nvidia/ClientConfigToken", True)} <= mounts,
                "%s: nvidia-gridd mounts the licensing files read-only" % name, str(mounts))
        for c in spec["containers"]:
            asks = any(k.startswith("tencent.com/vgpu-") for part in ("limits", "requests")
                       for k in ((c.get("resources") or {}).get(part) or {}))
            if asks:
                r.check({"name": "kvgpu-driver", "mountPath": "/usr/local/nvidia", "readOnly": True}
                        in c.get("volumeMounts", []),
                        "%s: container %s mounts the driver bundle read-only at /usr/local/nvidia" % (name, c["name"]),
                        json.dumps(c.get("volumeMounts")))
        # The decision is logged before the answer; waited for all the same.
        self.wait_for("kvgpu-webhook logs its decision on %s" % name, lambda: self.decisions(name))
        # The real API server calls it again after its own patch (seen on 1.36 and 1.37: a
        # changing patch starts the reinvocation pass, where an IfNeeded webhook is called): that
        # call finds the marker and changes nothing.
        decisions = self.decisions(name)
        r.check(decisions[:1] == ["mutated"] and set(decisions[1:]) <= {"already_injected"},
                "%s: the webhook logged mutated, then at most already_injected" % name, " ".join(decisions))

    def run(self):
        r = self.report
        # The two attach modes, with every key part.
        stored = {}
        for name, cls in (("kata-hot", "kata-vgpu"), ("kata-cold", "kata-vgpu-vf")):
            ok, obj, err = self.create(pod(name, cls))
            if r.check(ok, "a Kata vGPU pod (%s) created with kubectl is admitted" % cls, err):
                stored[name] = obj
                got = self.cp.kubectl("get", "pod", "-n", TENANT, name, "-o", "json")
                self.check_mutation(json.loads(got.stdout), cold=cls == "kata-vgpu-vf")

        ok, obj, err = self.create(pod("plain", None, containers=[{"name": "web", "image": "nginx"}]))
        r.check(ok and MARKER not in (obj["metadata"].get("annotations") or {})
                and not obj["spec"].get("initContainers") and self.decisions("plain") == [],
                "a pod without a vGPU is stored untouched, the webhook not called (matchConditions)",
                "%s %s" % (err, self.decisions("plain")))

        # namespaceSelector: the webhook's own namespace is never sent to it (so it can always be
        # restarted); a Kata vGPU pod there is stored as created.
        ok, obj, err = self.create(dict(pod("in-own-namespace"), metadata={"name": "in-own-namespace",
                                                                            "namespace": "kata-vgpu"}))
        r.check(ok and MARKER not in (obj["metadata"].get("annotations") or {})
                and not obj["spec"].get("initContainers") and self.decisions("in-own-namespace", "kata-vgpu") == [],
                "a vGPU pod in kata-vgpu is stored untouched, the webhook not called (namespaceSelector)",
                "%s %s" % (err, self.decisions("in-own-namespace", "kata-vgpu")))

        for description, shape, says in (
                ("no runtimeClassName", pod("nonkata-none", None), "this pod sets no runtimeClassName"),
                ("runtimeClassName runc", pod("nonkata-runc", "runc"), "this pod's runtimeClassName is"),
                ("the vGPU asked by an init container", pod("nonkata-init", None, containers=[
                    {"name": "main", "image": "x"}], initContainers=[
                    {"name": "prep", "image": "x", "resources": {"limits": {VGPU: "1"}}}]), "no runtimeClassName")):
            ok, _, err = self.create(shape)
            r.check(not ok and ('admission webhook "%s" denied the request' % WEBHOOK_NAME) in err
                    and says in err and "add `runtimeClassName: kata-vgpu`" in err,
                    "a non-Kata vGPU pod (%s) is refused with our message" % description, err)

        for description, shape in mutated_shapes():
            name = shape["metadata"]["name"]
            ok, obj, err = self.create(shape)
            r.check(ok and MARKER in (obj["metadata"].get("annotations") or {}),
                    "mutated by the webhook and admitted by the policy's CEL: %s" % description, err)

        # Tenant shapes, the webhook in place.
        base = stored.get("kata-hot")
        shapes = tenant_shapes(base) if base else []
        r.check(len(shapes) >= 12, "the tenant shapes of tests/deploy/test_vgpu_pod_policy.py (%d)" % len(shapes))
        for description, shape, reason in shapes:
            ok, _, err = self.create(shape)
            by = "the webhook" if WEBHOOK_NAME in err else "the policy" if POLICY in err else "the API server"
            r.check(not ok and (by != "the policy" or reason in err),
                    "with the webhook: refused (by %s): %s" % (by, description), err)

        self.reinvocation()

        # The webhook configuration removed: the policy alone.
        self.cp.kubectl("delete", "mutatingwebhookconfiguration", "kvgpu-webhook")
        self.wait_for("the webhook configuration is gone (a non-Kata vGPU pod reaches the policy)",
                      lambda: POLICY in json.dumps(self.dry_run(pod("probe", None))[1]))
        for description, shape, reason in shapes:
            ok, _, err = self.create(shape)
            if POLICY in err:
                r.check(not ok and reason in err,
                        "the policy alone refuses, naming %r: %s" % (reason, description), err)
            else:
                # A pod the API server's own validation refuses never reaches a validating
                # admission policy (e.g. a mount of a volume the pod does not define).
                r.check(not ok and ("Not found" in err or "Invalid value" in err or "Required value" in err),
                        "refused by the API server's validation before the policy: %s" % description, err)

    def reinvocation(self):
        r = self.report
        pki = os.path.join(self.dir, "webhook-pki")
        second = SecondWebhook(os.path.join(pki, "second.crt"), os.path.join(pki, "second.key"))
        try:
            with open(os.path.join(pki, "ca.crt"), "rb") as f:
                ca_bundle = base64.b64encode(f.read()).decode()
            # Named after ours: the API server calls webhooks in the order of their
            # configurations' names, so this one runs after kvgpu-webhook.
            config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                      "metadata": {"name": "zz-second-webhook"},
                      "webhooks": [{"name": "adds-a-container.kvgpu-test.example", "admissionReviewVersions": ["v1"],
                                    "sideEffects": "None", "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                                    "clientConfig": {"url": "https://127.0.0.1:%d/add" % second.port,
                                                     "caBundle": ca_bundle},
                                    "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                               "resources": ["pods"]}],
                                    "objectSelector": {"matchLabels": {"kvgpu-test/second-webhook": "yes"}}}]}
            self.cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(config))

            def labelled(name):
                p = pod(name)
                p["metadata"]["labels"] = {"kvgpu-test/second-webhook": "yes"}
                return p
            self.wait_for("the second webhook is in force (the API server calls it)",
                          lambda: self.dry_run(labelled("probe")) and second.calls)
            ok, obj, err = self.create(labelled("reinvoked"))
            if not r.check(ok, "reinvocation: a pod both webhooks mutate is admitted", err):
                return
            spec = obj["spec"]
            added = next((c for c in spec["containers"] if c["name"] == SecondWebhook.ADDED), {})
            r.check({"name": "kvgpu-driver", "mountPath": "/usr/local/nvidia", "readOnly": True}
                    in added.get("volumeMounts", []),
                    "reinvocation: ours, called again, gave the second webhook's container the driver mount",
                    json.dumps(added.get("volumeMounts")))
            names = [c["name"] for c in spec.get("initContainers", []) + spec["containers"]]
            r.check(names.count("kvgpu-driver-init") == 1 and names.count("nvidia-gridd") == 1
                    and not any(n.endswith("-2") for n in names),
                    "reinvocation: the driver loader and nvidia-gridd there exactly once", " ".join(names))
            volumes = [v["name"] for v in spec.get("volumes", [])]
            r.check(len(volumes) == len(set(volumes)) and not any(v.startswith("kvgpu-") and v.endswith("-2")
                                                                  for v in volumes),
                    "reinvocation: nothing injected twice (volumes)", " ".join(volumes))
            decisions = self.decisions("reinvoked")
            r.check(decisions[:2] == ["mutated", "completed"] and set(decisions[2:]) <= {"already_injected"},
                    "reinvocation: the webhook logged mutated, then completed", " ".join(decisions))
            self.cp.kubectl("delete", "mutatingwebhookconfiguration", "zz-second-webhook")
        finally:
            second.stop()

    def stop(self):
        if self.webhook:
            self.webhook.stop()


def renamed_sidecar(config_text):
    """A webhook config whose licensing sidecar is not nvidia-gridd (the one the policy allows)."""
    config = yaml.safe_load(config_text) or {}
    config.setdefault("gridd", {})["name"] = "licence-daemon"
    return yaml.safe_dump(config)


def other_prefix(config_text):
    """A webhook config that no longer knows our resources: it injects nothing, refuses nothing."""
    config = yaml.safe_load(config_text) or {}
    config["resourcePrefixes"] = ["example.com/vgpu-"]
    return yaml.safe_dump(config)


# (what is broken, the webhook config's change, parts of checks that must fail, parts of checks
# that must still pass)
BITES = [
    ("a webhook whose licensing sidecar is renamed", renamed_sidecar,
     ["a Kata vGPU pod (kata-vgpu) created with kubectl is admitted",
      "mutated by the webhook and admitted by the policy's CEL: hot-plug class kata-vgpu"],
     ["a non-Kata vGPU pod (no runtimeClassName) is refused with our message"]),
    ("a webhook that injects nothing (its config names another resource prefix)", other_prefix,
     ["kata-hot: stored with the marker", "kata-hot: the driver loader, then nvidia-gridd",
      "kata-cold: stored with the marker",
      "a non-Kata vGPU pod (no runtimeClassName) is refused with our message",
      "reinvocation: ours, called again, gave the second webhook's container the driver mount"],
     ["a pod without a vGPU is stored untouched"]),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", required=True, help="a release pinned in tests/k8s/peers, e.g. 1.36")
    parser.add_argument("--deploy", default=os.path.join(REPO, "deploy"))
    parser.add_argument("--webhook", default=os.environ.get("KVGPU_WEBHOOK"),
                        help="the kvgpu-webhook to test (CTest passes the built one)")
    parser.add_argument("--bite", action="store_true", help="show that the checks fail on a broken webhook instead")
    args = parser.parse_args()

    bin_dir, status = controlplane.peers_or_exit_code(args.release)
    if bin_dir is None:
        return status
    if not args.webhook or not os.access(args.webhook, os.X_OK):
        print("FAIL: no kvgpu-webhook to test (--webhook): %s" % args.webhook)
        return 1

    started = time.monotonic()
    outer = check_deploy.Report()
    for what, broken, must_fail, must_pass in (BITES if args.bite else [(None, None, [], [])]):
        report = check_deploy.Report() if args.bite else outer
        with tempfile.TemporaryDirectory(prefix="kvgpu-k8s-webhook-") as tmp:
            with controlplane.ControlPlane(bin_dir, workdir=os.path.join(tmp, "plane")) as cp:
                print("control plane of %s up in %.1f s" % (args.release, time.monotonic() - started))
                if what:
                    print("--- %s, where FAIL is expected:" % what)
                scenario = Scenario(cp, report, tmp, args.webhook, args.deploy)
                try:
                    scenario.setup(broken)
                    scenario.run()
                except BaseException:
                    print("--- kvgpu-webhook's log ends:\n" + (scenario.webhook.log_tail() if scenario.webhook else ""))
                    raise
                finally:
                    scenario.stop()
                if what:
                    print("---")
        if what:
            passed = report.passes
            for part in must_fail:
                outer.check(any(f.startswith(part) for f in report.failures),
                            "%s: fails %r" % (what, part))
            for part in must_pass:
                outer.check(any(p.startswith(part) for p in passed) and
                            not any(f.startswith(part) for f in report.failures),
                            "%s: still passes %r" % (what, part))
    print("(%.1f s in all)" % (time.monotonic() - started))
    return outer.finish()


if __name__ == "__main__":
    sys.exit(main())
