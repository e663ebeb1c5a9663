#!/usr/bin/env python3
"""deploy/build-images.sh and deploy/docker/: without a container engine (none runs on the
project's machines), what can be checked is checked: the commands the script would run, the
shape of each Dockerfile, that each build context holds what its Dockerfile copies, and that
runtime-packages.sh names the right Debian packages for a real binary.
Environment: KVGPU_DEPLOY; KVGPU_RUNTIME_BINARIES (optional, ':'-separated built programs)."""
import fnmatch
import os
import re
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.path.abspath(os.environ.get("KVGPU_DEPLOY", os.path.join(HERE, "..", "..", "deploy")))
REPO = os.path.dirname(DEPLOY)
DOCKER = os.path.join(DEPLOY, "docker")
IMAGES = ["device-plugin", "webhook", "scheduler-extender", "guest-tools"]
COMPILED = {"device-plugin": "kvgpu-device-plugin", "webhook": "kvgpu-webhook",
            "scheduler-extender": "kvgpu-scheduler-extender"}


def dockerfile(image):
    with open(os.path.join(DOCKER, image + ".Dockerfile")) as f:
        return f.read()


def included(image, path):
    """Whether BuildKit sends `path` (repo-relative) given <image>.Dockerfile.dockerignore
    (last matching pattern wins; a directory pattern covers what is below it)."""
    with open(os.path.join(DOCKER, image + ".Dockerfile.dockerignore")) as f:
        patterns = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    keep = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        p = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, p) or path.startswith(p + "/"):
            keep = negate
    return keep


class BuildImages(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([os.path.join(DEPLOY, "build-images.sh"), *args], capture_output=True, text=True)

    def test_dry_run_builds_every_image_from_the_repo_root(self):
        result = self.run_script("--dry-run", "--registry", "registry.example.com/team", "--tag", "1.2.3", "--push")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        for image in IMAGES:
            ref = "registry.example.com/team/kata-vgpu/%s:1.2.3" % image
            build = [l for l in lines if " build " in l and ref in l]
            self.assertEqual(len(build), 1, image)
            self.assertIn("--file %s" % os.path.join(DOCKER, image + ".Dockerfile"), build[0])
            self.assertTrue(build[0].endswith(" " + REPO), build[0])
            self.assertIn("push " + ref, result.stdout)

    def test_default_names_are_the_ones_the_manifests_use(self):
        with open(os.path.join(REPO, "CMakeLists.txt")) as f:
            version = re.search(r"project\(kata-vgpu VERSION ([0-9.]+)", f.read()).group(1)
        result = self.run_script("--dry-run")
        for image in IMAGES:
            self.assertIn("kata-vgpu/%s:%s" % (image, version), result.stdout)
        self.assertNotIn("push", result.stdout)

    def test_bad_input_is_refused(self):
        for args, message in [(["nope"], "unknown image"), (["--tag", "a b"], "not a valid image tag"),
                              (["--registry", "UPPER.case"], "not a registry"), (["--tool", "rkt"], "docker or podman"),
                              (["--frobnicate"], "unknown option")]:
            with self.subTest(args=args):
                result = self.run_script("--dry-run", *args)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(message, result.stderr)
                self.assertEqual(result.stdout, "")

    def test_dockerfiles(self):
        for image in IMAGES:
            with self.subTest(image):
                text = dockerfile(image)
                froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
                self.assertEqual(froms[-1], "debian:bookworm-slim", "the runtime stage")
                user = re.findall(r"^USER\s+(\S+)", text, re.M)
                self.assertTrue(user, "USER is explicit")
                if image in COMPILED:
                    self.assertGreaterEqual(len(froms), 2, "multi-stage")
                    self.assertEqual(froms[0].split(" ")[0], "debian:bookworm")
                    binary = COMPILED[image]
                    self.assertIn("--target %s" % binary, text)
                    self.assertIn("runtime-packages.sh /%s" % binary, text)
                    self.assertRegex(text, r"ENTRYPOINT \[\"/usr/local/bin/%s\"\]" % binary)
                if image in ("webhook", "scheduler-extender"):
                    self.assertNotIn(user[-1].split(":")[0], ("0", "root"), "the webhook image runs as non-root")
                # Only the runtime stage's own files: no compiler or -dev package in it.
                runtime = text.split(froms[-1], 1)[1] if len(froms) > 1 else text
                self.assertNotRegex(runtime, r"-dev\b|\bg\+\+|\bcmake\b")

    def test_build_context_holds_what_the_dockerfile_copies(self):
        for image in COMPILED:
            with self.subTest(image):
                text = dockerfile(image)
                self.assertFalse(included(image, "build/CMakeCache.txt"), "build trees stay out")
                self.assertFalse(included(image, ".git/HEAD"))
                for src in re.findall(r"^COPY\s+(?!--from)(\S+)\s", text, re.M):
                    if src != ".":
                        self.assertTrue(included(image, src), "%s is not in the context" % src)
                for path in ["CMakeLists.txt", "cmake/Dependencies.cmake", "deploy/docker/runtime-packages.sh",
                             {"device-plugin": "mdev", "webhook": "webhook", "scheduler-extender": "extender"}[image] +
                             "/CMakeLists.txt"]:
                    self.assertTrue(os.path.exists(os.path.join(REPO, path)), path)
                    self.assertTrue(included(image, path), "%s is not in the context" % path)
                components = re.search(r'-DKVGPU_COMPONENTS="([^"]*)"', text).group(1).split(";")
                for component in components:
                    self.assertTrue(included(image, component + "/CMakeLists.txt"), component)

    def test_build_context_configures(self):
        """The files BuildKit would send are enough for the Dockerfile's CMake configure step."""
        files = subprocess.run(["git", "-C", REPO, "ls-files", "--cached", "--others", "--exclude-standard"],
                               capture_output=True, text=True)
        if files.returncode != 0:
            self.skipTest("not a git work tree: %s" % files.stderr.strip())
        for image in COMPILED:
            with self.subTest(image), tempfile.TemporaryDirectory() as tmp:
                context = os.path.join(tmp, "src")
                for path in files.stdout.splitlines():
                    if included(image, path) and os.path.isfile(os.path.join(REPO, path)):
                        os.makedirs(os.path.join(context, os.path.dirname(path)), exist_ok=True)
                        shutil.copy2(os.path.join(REPO, path), os.path.join(context, path))
                text = dockerfile(image)
                step = re.search(r"cmake -S \. -B /build (.*?) \\\n\s*&& cmake --build", text, re.S).group(1)
                defines = [d.replace('"', "") for d in re.findall(r'-D\S+', step.replace("\\\n", " "))]
                result = subprocess.run(["cmake", "-S", context, "-B", os.path.join(tmp, "build"), *defines],
                                        capture_output=True, text=True)
                self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
                # The root CMakeLists skips a component whose directory is missing: the program's
                # target must exist, and every other target the Dockerfile builds (the plugin's
                # image carries vgpuctl and kvgpu-validator too).
                targets = subprocess.run(["cmake", "--build", os.path.join(tmp, "build"), "--target", "help"],
                                         capture_output=True, text=True).stdout
                built = re.search(r"cmake --build /build --target ([^\\&\n]+)", text).group(1).split()
                for target in {COMPILED[image], *built}:
                    self.assertRegex(targets, r"(?m)^(\.\.\. )?%s\b" % re.escape(target))

    def test_runtime_packages_of_real_binaries(self):
        binaries = [b for b in os.environ.get("KVGPU_RUNTIME_BINARIES", "").split(":") if b]
        if not binaries:
            self.skipTest("no built programs given (KVGPU_RUNTIME_BINARIES)")
        for binary in binaries:
            with self.subTest(binary):
                result = subprocess.run([os.path.join(DOCKER, "runtime-packages.sh"), binary],
                                        capture_output=True, text=True)
                self.assertEqual(result.returncode, 0, result.stderr)
                packages = result.stdout.split()
                self.assertIn("libc6", packages)
                self.assertIn("libstdc++6", packages)
                self.assertFalse([p for p in packages if p.endswith("-dev")], packages)
                self.assertEqual(packages, sorted(set(packages)))
        result = subprocess.run([os.path.join(DOCKER, "runtime-packages.sh"), os.path.join(DOCKER, "runtime-packages.sh")],
                                capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0, "a script is not a dynamic executable")


if __name__ == "__main__":
    unittest.main()
