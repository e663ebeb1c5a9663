#!/usr/bin/env python3
"""Every source file of https/, kube/ and deviceplugin/dra/ has its test beside its name.

For `<folder>/<name>.cpp` that is `tests/<folder>/<name>_test.cpp` (deviceplugin/dra/prepared_store.cpp:
tests/deviceplugin/dra/prepared_store_test.cpp). A file whose behaviour only shows through a larger
piece may be tested elsewhere, but then docs/development.md says where: its path, in backquotes,
in the first column of the table under "Where each source file is tested". So a reader looking
for a file's tests finds them by its name or in that one table, and a new file without either fails.

usage: tests_beside_sources.py --repo <checkout>
       tests_beside_sources.py --self-test
"""
import argparse
import pathlib
import re
import sys
import tempfile

FOLDERS = ("https", "kube", "deviceplugin/dra")
DOCS = pathlib.PurePosixPath("docs/development.md")
SECTION = "## Where each source file is tested"


def documented_elsewhere(repo):
    """The source paths docs/development.md's table says are tested under another name."""
    path = repo / DOCS
    if not path.exists():
        return set()
    text = path.read_text(encoding="utf-8")
    if SECTION not in text:
        return set()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    named = set()
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2:
            named.update(re.findall(r"`([^`]+)`", cells[1]))
    return named


def missing_tests(repo):
    """Each production source of FOLDERS with neither a test beside its name nor a line in the
    docs' table, with the test file it lacks."""
    elsewhere = documented_elsewhere(repo)
    found = []
    for folder in FOLDERS:
        for source in sorted((repo / folder).rglob("*.cpp")):
            relative = source.relative_to(repo).as_posix()
            test = f"tests/{relative[: -len('.cpp')]}_test.cpp"
            if relative in elsewhere or (repo / test).exists():
                continue
            found.append((relative, test))
    return found


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        repo = pathlib.Path(tmp)
        for relative in ("kube/pod.cpp", "tests/kube/pod_test.cpp", "https/tls.cpp",
                         "deviceplugin/dra/slices.cpp", "deviceplugin/dra/slices.h"):
            (repo / relative).parent.mkdir(parents=True, exist_ok=True)
            (repo / relative).write_text("")
        (repo / "docs").mkdir()
        (repo / DOCS).write_text(f"{SECTION}\n\n| source | tests |\n|---|---|\n"
                                 "| `https/tls.cpp` | `tests/webhook/server_test.cpp` |\n\n## Next\n"
                                 "| `deviceplugin/dra/slices.cpp` | a later section names nothing |\n")
        assert missing_tests(repo) == [("deviceplugin/dra/slices.cpp",
                                        "tests/deviceplugin/dra/slices_test.cpp")], missing_tests(repo)
        (repo / "tests/deviceplugin/dra").mkdir(parents=True)
        (repo / "tests/deviceplugin/dra/slices_test.cpp").write_text("")
        assert missing_tests(repo) == []
    print("self-test passed: a source with neither a test beside it nor a line in the table is named")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=pathlib.Path)
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if args.repo is None:
        parser.error("--repo or --self-test")
    missing = missing_tests(args.repo.resolve())
    for source, test in missing:
        print(f"{source}: no {test}; write it, or say in {DOCS} ({SECTION[3:]}) where it is tested")
    if missing:
        return 1
    print(f"every source of {', '.join(FOLDERS)} has its test beside it or in {DOCS}'s table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
