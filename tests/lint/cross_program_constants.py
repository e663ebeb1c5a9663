#!/usr/bin/env python3
"""The values several programs must agree on are written once in C++ and nowhere else in it, and
deploy/ and docs/ still say what that one place says.

Run: cross_program_constants.py --repo <checkout>   (exit 1 and one line per problem)

The values live in common/cross_program.h (kVgpuResourcePrefix, kLicensingDir, kDraDriverName). A second C++ string
literal holding one of them (outside tests/, which assert wire values on purpose) is how two
programs start to disagree after a change to one; a manifest or a doc that says another value is
how an install breaks. Comments may quote the values: they are read by people, not programs.
"""
import argparse
import pathlib
import re
import sys

HOME = pathlib.PurePosixPath("common/cross_program.h")
SOURCE_SUFFIXES = {".h", ".hpp", ".cc", ".cpp", ".cxx"}

# A C++ token that matters here: a raw string, a string, a character literal, or a comment. Whatever
# is between them is code.
TOKEN = re.compile(
    r'R"(?P<delim>[^(\s]*)\((?P<raw>.*?)\)(?P=delim)"'
    r'|"(?P<text>(?:\\.|[^"\\\n])*)"'
    r"|'(?:\\.|[^'\\\n])*'"
    r"|//[^\n]*"
    r"|/\*.*?\*/",
    re.S,
)

# How the C++ home writes each constant.
DEFINITION = re.compile(r'inline constexpr std::string_view (k\w+) = "([^"]*)";')

# The places outside C++ that must say the same, each as (file or glob under the checkout, pattern
# whose first group is the value written there, constant it must equal). Every pattern must match
# at least once, so a reworded file cannot slip out of the check unnoticed. The patterns are
# anchored on what is around the value, not on the value, so that a changed constant finds the old
# value still written there.
PLACES = (
    ("deploy/base/webhook/config.yaml", r'^resourcePrefixes: \["([^"]*)"', "kVgpuResourcePrefix"),
    ("deploy/overlays/development/webhook-config.yaml", r'^resourcePrefixes: \["([^"]*)"',
     "kVgpuResourcePrefix"),
    ("deploy/base/webhook/mutatingwebhookconfiguration.yaml", r"startsWith\('([^']*)'\)",
     "kVgpuResourcePrefix"),
    ("deploy/base/device-plugin/daemonset.yaml", r"--licensing-dir=(\S+)", "kLicensingDir"),
    ("deploy/base/policy/vgpu-pods.yaml",
     r"hostPath\.path == '([^']*)/(?:gridd\.conf|ClientConfigToken)'", "kLicensingDir"),
    ("docs/webhook.md", r'^resourcePrefixes: \["([^"]*)"', "kVgpuResourcePrefix"),
    ("docs/webhook.md", r"hostPath: \{path: ([^,}]*)/(?:gridd\.conf|ClientConfigToken)",
     "kLicensingDir"),
    ("docs/configuration.md", r'^\| `resourcePrefixes` \| `\["([^"]*)"', "kVgpuResourcePrefix"),
    ("docs/configuration.md", r"^\| `--licensing-dir DIR` \| `([^`]*)`", "kLicensingDir"),
    ("docs/device-plugin.md", r"--licensing-dir DIR\s+\(default (\S+)\)", "kLicensingDir"),
    ("docs/vgpuctl.md", r"^\| `--licensing-dir DIR` \| `([^`]*)`", "kLicensingDir"),
    ("deploy/components/dra/device-plugin-config.yaml", r"^  driverName: (\S+)", "kDraDriverName"),
    ("deploy/components/dra/device-classes.yaml", r"^  name: (?:vgpu-[\w-]+\.)?(\S+)$",
     "kDraDriverName"),
    ("deploy/components/dra/device-classes.yaml", r'device\.driver == "([^"]*)"', "kDraDriverName"),
    ("deploy/components/dra/device-classes.yaml", r'device\.attributes\["([^"]*)"\]',
     "kDraDriverName"),
    ("docs/configuration.md", r"^\| `dra\.driverName` \| `([^`]*)`", "kDraDriverName"),
    ("docs/configuration.md", r"^\| `deviceClassDomain` \| `([^`]*)`", "kDraDriverName"),
    ("docs/webhook.md", r"^  deviceClassDomain: (\S+)", "kDraDriverName"),
)

# Every vGPU resource named by type number in a manifest ("tencent.com/vgpu-222") is one the device
# plugin advertises under the default prefix.
DEPLOY_RESOURCE = re.compile(r"(?<![\w.-])([\w-]+(?:\.[\w-]+)+/vgpu-)(?=\d)")


def constants(repo):
    text = (repo / HOME).read_text(encoding="utf-8")
    return dict(DEFINITION.findall(text))


def literals(text):
    """The contents of each string literal in C++ `text`, with its line number."""
    for match in TOKEN.finditer(text):
        value = match.group("raw") if match.group("raw") is not None else match.group("text")
        if value is not None:
            yield text.count("\n", 0, match.start()) + 1, value


def production_sources(repo):
    for path in sorted(repo.rglob("*")):
        relative = path.relative_to(repo)
        top = relative.parts[0]
        if top.startswith(".") or top.startswith("build") or top == "tests":
            continue
        if path.suffix in SOURCE_SUFFIXES and path.is_file():
            yield path, pathlib.PurePosixPath(relative.as_posix())


def value_pattern(value):
    # Not inside a longer name: "kvgpu.tencent.com/vgpu-state" is another value. Relative forms
    # ("var/lib/kata-vgpu/licensing/gridd.conf" joined below a root) count as the value.
    return re.compile(r"(?<![\w.-])" + re.escape(value.lstrip("/")))


def problems(repo):
    found = []
    values = constants(repo)
    for name in ("kVgpuResourcePrefix", "kLicensingDir", "kDraDriverName"):
        if name not in values:
            found.append(f"{HOME}: defines no {name} (the lint reads it from there)")
    if found:
        return found
    patterns = {name: value_pattern(value) for name, value in values.items()}
    written = {name: [] for name in values}
    for path, relative in production_sources(repo):
        for number, literal in literals(path.read_text(encoding="utf-8", errors="replace")):
            for name, pattern in patterns.items():
                if pattern.search(literal):
                    written[name].append(f"{relative}:{number}")
    for name, places in written.items():
        others = [p for p in places if not p.startswith(f"{HOME}:")]
        for place in others:
            found.append(f"{place}: writes {values[name]!r} again; use {name} from {HOME}")
    for relative, pattern, name in PLACES:
        path = repo / relative
        if not path.is_file():
            found.append(f"{relative}: missing; the lint checks {name} there")
            continue
        text = path.read_text(encoding="utf-8")
        matches = list(re.finditer(pattern, text, re.M))
        if not matches:
            found.append(f"{relative}: nothing matches {pattern!r}; where does it say {name} now?")
        for match in matches:
            if match.group(1) != values[name]:
                number = text.count("\n", 0, match.start()) + 1
                found.append(f"{relative}:{number}: says {match.group(1)!r} where {HOME} has "
                             f"{name} = {values[name]!r}")
    for path in sorted((repo / "deploy").rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        for match in DEPLOY_RESOURCE.finditer(text):
            if match.group(1) != values["kVgpuResourcePrefix"]:
                number = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(repo)}:{number}: resource prefix {match.group(1)!r}, "
                             f"not kVgpuResourcePrefix = {values['kVgpuResourcePrefix']!r}")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=pathlib.Path, required=True)
    args = parser.parse_args()
    found = problems(args.repo.resolve())
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} problem(s) with the cross-program constants "
              "(tests/lint/cross_program_constants.py says why)")
        return 1
    print("cross-program constants: written once, and deploy/ and docs/ agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
