#!/usr/bin/env python3
"""The real programs accept what deploy/ gives them.

kvgpu-webhook is started with the rendered default overlay's config, certificate and key; a
client that trusts only the rendered caBundle and checks the name the API server uses
(kvgpu-webhook.kata-vgpu.svc) asks /readyz and posts AdmissionReviews: a Kata vGPU pod gets the
guest-tools image the overlay names, a vGPU pod without a Kata class is refused.
kvgpu-device-plugin is started with the rendered config on an empty node: it must get past its
config check (which exits 2), and must exit 2 for a broken config (the check can fail).
Environment: KVGPU_KUBECTL, KVGPU_DEPLOY, KVGPU_WEBHOOK, KVGPU_DEVICE_PLUGIN."""
import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_deploy  # noqa: E402

KUBECTL = os.environ.get("KVGPU_KUBECTL", "kubectl")
DEPLOY = os.environ.get("KVGPU_DEPLOY", os.path.join(HERE, "..", "..", "deploy"))
WEBHOOK = os.environ.get("KVGPU_WEBHOOK")
PLUGIN = os.environ.get("KVGPU_DEVICE_PLUGIN")


def rendered_default():
    with check_deploy.scratch_deploy(DEPLOY) as deploy:
        objects, error = check_deploy.render(KUBECTL, os.path.join(deploy, "overlays", "default"))
    if objects is None:
        raise AssertionError(error)
    return objects


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def review(pod, uid):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "operation": "CREATE", "namespace": "team-a", "object": pod}}


def vgpu_pod(runtime_class):
    spec = {"containers": [{"name": "train", "image": "trainer:1",
                            "resources": {"limits": {"tencent.com/vgpu-222": "1"}}}]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


@unittest.skipUnless(WEBHOOK, "kvgpu-webhook not built (KVGPU_WEBHOOK)")
class WebhookAcceptsDeployedConfig(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        objects = rendered_default()
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        config = check_deploy.one(objects, "ConfigMap", "kvgpu-webhook-config")["data"]["webhook.yaml"]
        cls.config = config
        secret = check_deploy.one(objects, "Secret", "kvgpu-webhook-tls")["data"]
        hook = check_deploy.one(objects, "MutatingWebhookConfiguration", "kvgpu-webhook")["webhooks"][0]
        files = {"webhook.yaml": config.encode(), "tls.crt": base64.b64decode(secret["tls.crt"]),
                 "tls.key": base64.b64decode(secret["tls.key"]),
                 "ca.crt": base64.b64decode(hook["clientConfig"]["caBundle"])}
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        cls.port = free_port()
        cls.proc = subprocess.Popen([WEBHOOK, "--listen=127.0.0.1:%d" % cls.port,
                                     "--tls-cert-file=" + os.path.join(d, "tls.crt"),
                                     "--tls-key-file=" + os.path.join(d, "tls.key"),
                                     "--config=" + os.path.join(d, "webhook.yaml")],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # What the API server does: trust only the caBundle, check the Service's DNS name.
        cls.context = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        deadline = time.time() + 20
        while True:
            try:
                status, _ = cls.request("GET", "/readyz")
                if status == 200:
                    break
            except OSError:
                pass
            if cls.proc.poll() is not None or time.time() > deadline:
                out = cls.proc.communicate(timeout=5)[0] if cls.proc.poll() is not None else ""
                raise AssertionError("the webhook did not become ready: %s" % out)
            time.sleep(0.2)

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        try:
            cls.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            cls.proc.kill()
            cls.proc.communicate()
        cls.tmp.cleanup()

    @classmethod
    def request(cls, method, path, body=None):
        sock = socket.create_connection(("127.0.0.1", cls.port), timeout=5)
        tls = cls.context.wrap_socket(sock, server_hostname="kvgpu-webhook.kata-vgpu.svc")
        conn = http.client.HTTPConnection("kvgpu-webhook.kata-vgpu.svc", timeout=5)
        conn.sock = tls
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, data

    def test_healthz_over_the_service_name(self):
        self.assertEqual(self.request("GET", "/healthz")[0], 200)

    def test_kata_vgpu_pod_gets_the_overlays_guest_tools_image(self):
        status, data = self.request("POST", "/mutate", review(vgpu_pod("kata-vgpu"), "u1"))
        self.assertEqual(status, 200, data)
        response = json.loads(data)["response"]
        self.assertTrue(response["allowed"])
        self.assertEqual(response["uid"], "u1")
        self.assertEqual(response["patchType"], "JSONPatch")
        text = json.dumps(json.loads(base64.b64decode(response["patch"])))
        image = yaml.safe_load(self.config)["driverInit"]["image"]
        self.assertIn(image, text)
        self.assertIn("kvgpu-gridd-conf", text)
        self.assertIn("kvgpu-client-token", text)

    def test_vgpu_pod_without_kata_is_refused(self):
        status, data = self.request("POST", "/mutate", review(vgpu_pod(None), "u2"))
        self.assertEqual(status, 200, data)
        response = json.loads(data)["response"]
        self.assertFalse(response["allowed"])
        self.assertIn("kata-vgpu", response["status"]["message"])


@unittest.skipUnless(PLUGIN, "kvgpu-device-plugin not built (KVGPU_DEVICE_PLUGIN)")
class DevicePluginAcceptsDeployedConfig(unittest.TestCase):
    def run_plugin(self, config_text):
        with tempfile.TemporaryDirectory() as d:
            for sub in ("sys", "kubelet/device-plugins", "kubelet/pod-resources", "state"):
                os.makedirs(os.path.join(d, sub))
            config = os.path.join(d, "config.yaml")
            with open(config, "w") as f:
                f.write(config_text)
            proc = subprocess.Popen([PLUGIN, "--sysfs-root=" + d, "--kubelet-dir=" + os.path.join(d, "kubelet"),
                                     "--state-dir=" + os.path.join(d, "state"), "--node-name=n1",
                                     "--config=" + config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                out = proc.communicate(timeout=2)[0]
                return proc.returncode, out
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    out = proc.communicate(timeout=10)[0]
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out = proc.communicate()[0]
                return None, out

    def test_deployed_config_passes_the_config_check(self):
        objects = rendered_default()
        config = check_deploy.one(objects, "ConfigMap", "kvgpu-device-plugin-config")["data"]["config.yaml"]
        code, out = self.run_plugin(config)
        self.assertNotEqual(code, 2, out)

    def test_a_broken_config_is_refused(self):
        code, out = self.run_plugin("resourceDomain: tencent.com\nudevEvent: true\n")
        self.assertEqual(code, 2, out)
        self.assertIn("udevEvent", out)


if __name__ == "__main__":
    unittest.main()
