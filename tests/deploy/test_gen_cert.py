#!/usr/bin/env python3
"""deploy/gen-webhook-cert.sh: the certificate the API server will accept, kept when still good,
renewed without touching the CA, CA rotation with both CAs trusted meanwhile, bad input refused
with nothing changed. Uses Debian's openssl as the independent judge."""
import base64
import hashlib
import os
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.environ.get("KVGPU_DEPLOY", os.path.join(HERE, "..", "..", "deploy")),
                      "gen-webhook-cert.sh")
NAMES = ["kvgpu-webhook", "kvgpu-webhook.kata-vgpu", "kvgpu-webhook.kata-vgpu.svc",
         "kvgpu-webhook.kata-vgpu.svc.cluster.local"]


def gen(directory, *args):
    return subprocess.run([SCRIPT, *args, directory], capture_output=True, text=True)


def openssl(*args):
    return subprocess.run(["openssl", *args], capture_output=True, text=True)


def digest(directory):
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def bundle_certs(directory):
    with open(os.path.join(directory, "ca-bundle-patch.yaml")) as f:
        value = [l for l in f if "value:" in l][0].split("value:", 1)[1].strip()
    return base64.b64decode(value).decode().count("BEGIN CERTIFICATE")


class GenWebhookCert(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "certs")

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_serving_certificate_is_what_the_api_server_checks(self):
        self.assertEqual(gen(self.dir).returncode, 0)
        self.assertEqual(openssl("verify", "-CAfile", self.path("ca.crt"), "-purpose", "sslserver",
                                 self.path("tls.crt")).returncode, 0)
        text = openssl("x509", "-in", self.path("tls.crt"), "-noout", "-ext", "subjectAltName").stdout
        for name in NAMES:
            self.assertIn("DNS:" + name, text)
        # key and certificate belong together
        self.assertEqual(openssl("x509", "-in", self.path("tls.crt"), "-noout", "-pubkey").stdout,
                         openssl("pkey", "-in", self.path("tls.key"), "-pubout").stdout)
        self.assertEqual(bundle_certs(self.dir), 1)
        for name in ("ca.key", "tls.key"):
            self.assertEqual(os.stat(self.path(name)).st_mode & 0o077, 0, name + " is readable by others")

    def test_rerun_changes_nothing_and_renew_keeps_the_ca(self):
        gen(self.dir)
        before = digest(self.dir)
        self.assertEqual(gen(self.dir).returncode, 0)
        self.assertEqual(digest(self.dir), before)
        self.assertEqual(gen(self.dir, "--renew").returncode, 0)
        after = digest(self.dir)
        self.assertEqual(after["ca.crt"], before["ca.crt"])
        self.assertEqual(after["ca-bundle-patch.yaml"], before["ca-bundle-patch.yaml"])
        self.assertNotEqual(after["tls.crt"], before["tls.crt"])

    def test_other_service_name_gets_a_new_certificate(self):
        gen(self.dir)
        before = digest(self.dir)
        self.assertEqual(gen(self.dir, "--namespace", "gpu-system").returncode, 0)
        self.assertNotEqual(digest(self.dir)["tls.crt"], before["tls.crt"])
        text = openssl("x509", "-in", self.path("tls.crt"), "-noout", "-ext", "subjectAltName").stdout
        self.assertIn("DNS:kvgpu-webhook.gpu-system.svc", text)

    def test_ca_rotation_trusts_both_until_the_old_is_dropped(self):
        gen(self.dir)
        with open(self.path("ca.crt")) as f:
            old_ca = f.read()
        self.assertEqual(gen(self.dir, "--rotate-ca").returncode, 0)
        self.assertEqual(bundle_certs(self.dir), 2)
        with open(self.path("ca-previous.crt")) as f:
            self.assertEqual(f.read(), old_ca)
        self.assertEqual(openssl("verify", "-CAfile", self.path("ca.crt"), self.path("tls.crt")).returncode, 0)
        self.assertEqual(gen(self.dir).returncode, 0)
        self.assertEqual(bundle_certs(self.dir), 2, "a plain rerun keeps the previous CA trusted")
        self.assertEqual(gen(self.dir, "--drop-previous-ca").returncode, 0)
        self.assertEqual(bundle_certs(self.dir), 1)
        self.assertFalse(os.path.exists(self.path("ca-previous.crt")))

    def test_bad_input_is_refused_and_changes_nothing(self):
        gen(self.dir)
        before = digest(self.dir)
        for description, args, message in [
            ("zero days", ["--days", "0"], "--days"),
            ("not a number", ["--ca-days", "ten"], "--ca-days"),
            ("serving outlives the CA", ["--days", "4000"], "shorter than"),
            ("namespace not a DNS label", ["--namespace", "Kata_VGPU"], "DNS label"),
            ("unknown option", ["--force"], "unknown option"),
            ("contradicting options", ["--rotate-ca", "--drop-previous-ca"], "exclude"),
        ]:
            with self.subTest(description):
                result = gen(self.dir, *args)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(message, result.stderr)
                self.assertEqual(digest(self.dir), before)
        os.remove(self.path("ca.key"))
        result = gen(self.dir, "--renew")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("only one of ca.crt and ca.key", result.stderr)

    def test_no_ca_to_rotate(self):
        result = gen(self.dir, "--rotate-ca")
        self.assertNotEqual(result.returncode, 0)
        self.assertFalse(os.path.exists(self.path("tls.crt")))


if __name__ == "__main__":
    unittest.main()
