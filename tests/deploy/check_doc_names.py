#!/usr/bin/env python3
"""Docs name only what exists: the reverse of check_docs.py.

  check_doc_names.py --repo DIR [--allow FILE] [DOC...]

In README.md, deploy/README.md and docs/*.md (or the DOCs given), each of these must exist in the
repository or be in the allowlist (one `name  reason` a line; a reason is required):

- flags `--name`: defined by one of our programs (an option string "--name" in C++ CLI11, Python
  argparse or a shell script's case pattern or usage text);
- repository paths in backquotes (`deploy/...`, `kata-config/...`, ...): a file or directory,
  with `<placeholder>`, `*` and `{a,b}` allowed;
- metric names `kvgpu_<namespace>_...` (the namespaces the programs register metrics under;
  `kvgpu_` names of libraries and targets are not metrics): a string in the programs' sources or
  the alert rules (histogram suffixes _bucket/_sum/_count stripped; a name ending in `_` is a
  prefix and must start one);
- config keys in the first column of a table whose header starts with `key`: the last dotted part
  is a key string of deviceplugin/config.cpp or webhook/config.cpp;
- test names in backquotes (`..._test`): named in a CMakeLists.txt.

Exit status 1 with one line per unknown name (doc:line: kind name), 0 when clean.
"""

import argparse
import glob
import itertools
import os
import re
import sys

TOP_DIRS = ("deploy", "docs", "kata-config", "scripts", "tests", "webhook", "deviceplugin", "mdev",
            "sim", "kube", "guest-image", "demo", "bench", "cmake", ".ci")
FLAG = re.compile(r"(?<![\w/-])(--[a-z][a-z0-9-]*[a-z0-9])")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
METRIC = re.compile(r"\bkvgpu_[a-z0-9_]+")
TEST_NAME = re.compile(r"^[a-z0-9_]+_test$")
SOURCE_GLOBS = ("**/*.cpp", "**/*.h", "**/*.py", "**/*.sh", "**/*.mjs")
SKIP = ("build", "node_modules", ".git")


def sources(repo):
    for pattern in SOURCE_GLOBS:
        for path in glob.glob(os.path.join(repo, pattern), recursive=True):
            rel = os.path.relpath(path, repo)
            if not any(part in SKIP or part.startswith("build") for part in rel.split(os.sep)[:-1]):
                yield rel, path


def known_flags(repo):
    flags = set()
    for rel, path in sources(repo):
        # Unit tests name made-up flags on purpose; programs (tests/vm's scripts too) do not.
        name = os.path.basename(rel)
        if name.startswith("test_") or name.endswith("_test.cpp"):
            continue
        with open(path, errors="replace") as f:
            text = f.read()
        flags.update(re.findall(r"[\"'](--[a-z][a-z0-9-]*)", text))
        if rel.endswith(".sh"):
            flags.update(re.findall(r"^\s*(--[a-z][a-z0-9-]*)[)|]", text, re.M))
            flags.update(re.findall(r"^\s+(--[a-z][a-z0-9-]*)\b", text, re.M))  # usage text
    return flags


def known_strings(repo, dirs):
    text = []
    for directory in dirs:
        for path in glob.glob(os.path.join(repo, directory, "**", "*"), recursive=True):
            if os.path.isfile(path) and path.endswith((".cpp", ".h", ".yaml", ".py")):
                with open(path, errors="replace") as f:
                    text.append(f.read())
    return "\n".join(text)


def config_keys(repo):
    keys = set()
    for path in ("deviceplugin/config.cpp", "webhook/config.cpp", "webhook/config.h"):
        full = os.path.join(repo, path)
        if os.path.exists(full):
            with open(full) as f:
                # "key", or a dotted path of the plugin's key table ("lifecycle.gracePeriod").
                for quoted in re.findall(r"\"([a-zA-Z][a-zA-Z0-9]*(?:\.[a-zA-Z][a-zA-Z0-9]*)*)\"",
                                         f.read()):
                    keys.update(quoted.split("."))
            with open(full) as f:
                keys.update(re.findall(r"^\s*([a-zA-Z][a-zA-Z0-9]*):", f.read(), re.M))  # default YAML
    return keys


def cmake_text(repo):
    text = []
    for path in glob.glob(os.path.join(repo, "**", "CMakeLists.txt"), recursive=True):
        if "/build" not in path:
            with open(path) as f:
                text.append(f.read())
    return "\n".join(text)


def expand_braces(pattern):
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    out = []
    for choice in match.group(1).split(","):
        out.extend(expand_braces(pattern[:match.start()] + choice + pattern[match.end():]))
    return out


def path_exists(repo, token):
    token = re.sub(r"#.*$", "", token).rstrip("/.,:;")
    token = re.sub(r":\d+(-\d+)?$", "", token)
    for candidate in expand_braces(token):
        pattern = re.sub(r"<[^>]*>", "*", candidate)
        if glob.glob(os.path.join(repo, pattern)):
            return True
    return False


def repo_path(token):
    if " " in token or token.startswith(("http", "/")):
        return None
    first = token.split("/", 1)[0]
    return token if first in TOP_DIRS and "/" in token else None


def load_allow(path):
    allow = {}
    if not path:
        return allow
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                sys.exit(f"{path}:{number}: '{parts[0]}' has no reason")
            allow[parts[0]] = parts[1]
    return allow


def check(repo, docs, allow):
    flags = known_flags(repo)
    metric_text = known_strings(repo, ("deviceplugin", "webhook", "kube", "mdev", "deploy/monitoring"))
    namespaces = set(re.findall(r"\"kvgpu_([a-z]+)_", metric_text))
    keys = config_keys(repo)
    cmake = cmake_text(repo)
    problems = []

    def unknown(doc, number, kind, name):
        if name not in allow:
            problems.append(f"{os.path.relpath(doc, repo)}:{number}: {kind} {name} does not exist")

    for doc in docs:
        with open(doc) as f:
            lines = f.read().split("\n")
        in_code = False
        key_table = False
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                in_code = not in_code
            for flag in FLAG.findall(line):
                if flag not in flags:
                    unknown(doc, number, "flag", flag)
            for metric in METRIC.findall(line):
                parts = metric.split("_")
                if parts[1] not in namespaces or len(parts) < 3:  # kvgpu_deviceplugin: a library
                    continue
                if re.search(r"\b" + re.escape(metric) + r"\b", cmake):  # a library or target
                    continue
                base = re.sub(r"_(bucket|sum|count)$", "", metric)
                found = (re.search(r"\b" + re.escape(metric), metric_text) if metric.endswith("_")
                         else re.search(r"\b" + re.escape(base) + r"\b", metric_text))
                if not found:
                    unknown(doc, number, "metric", metric)
            spans = CODE_SPAN.findall(line) if not in_code else []
            for span in spans:
                token = span.strip()
                path = repo_path(token)
                if path and not path_exists(repo, path):
                    unknown(doc, number, "path", path)
                if TEST_NAME.match(token) and token not in cmake:
                    unknown(doc, number, "test", token)
            if line.startswith("|"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                if cells and cells[0] in ("key", "config key"):
                    key_table = True
                    continue
                if key_table and cells and re.fullmatch(r"`[a-zA-Z][a-zA-Z0-9.]*`", cells[0]):
                    key = cells[0].strip("`").split(".")[-1]
                    if key not in keys:
                        unknown(doc, number, "config key", cells[0].strip("`"))
            else:
                key_table = False
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--allow")
    parser.add_argument("docs", nargs="*")
    args = parser.parse_args(argv)
    repo = os.path.abspath(args.repo)
    docs = args.docs or ([os.path.join(repo, "README.md"), os.path.join(repo, "deploy", "README.md")]
                         + sorted(glob.glob(os.path.join(repo, "docs", "*.md"))))
    problems = check(repo, docs, load_allow(args.allow))
    for problem in problems:
        print(problem)
    print(f"check_doc_names: {len(docs)} docs, {len(problems)} unknown names")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
