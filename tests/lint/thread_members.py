#!/usr/bin/env python3
"""No production class owns a hand-rolled thread: background loops run on the one worker.

A `std::thread` or `std::jthread` member (also inside a template: `std::vector<std::thread>`,
`std::optional<std::thread>`) of a class or struct in production code (every top-level folder
but tests/, fakes/, bench/ and demo/) is reported, unless it is in common/background_worker.*
(the worker, issue #45) or named in ALLOWED below with the reason. A thread that lives inside one
function (a local `std::vector<std::thread>` joined before it returns, as the HTTPS server's pool
and the registrar's round of calls) is not a member and is not reported. So a new loop with its
own thread, stop flag and condition variable fails here: give its body to BackgroundWorker.

usage: thread_members.py --repo <checkout>
       thread_members.py --self-test
"""
import argparse
import pathlib
import re
import sys
import tempfile

NOT_PRODUCTION = ("tests", "fakes", "bench", "demo")
HOME = ("common/background_worker.h", "common/background_worker.cpp")
# (file, member): why it may stay. Each is to go; none is to be added for a new loop.
ALLOWED = {
    # The metrics listener's asio event loop: a server's own thread, like the HTTPS pool.
    ("https/metrics_listener.cpp", "thread"): "a server's own event loop",
}

THREAD = re.compile(r"\bstd::j?thread\b")
DECLARATOR = re.compile(r"([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*$")
RECORD = re.compile(r"(?<!enum\s)\b(class|struct|union)\s+[A-Za-z_][\w:]*(\s+final)?\s*(:[^;{}]*)?$")


def strip(text):
    """The code without comments, string and character literals (newlines kept, so that line
    numbers hold)."""
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not text[i - 1].isalnum()):
            open_paren = text.find("(", i + 2)
            delimiter = text[i + 2:open_paren]
            end = text.find(")" + delimiter + '"', open_paren)
            end = n if end < 0 else end + len(delimiter) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def thread_members(text):
    """(line, member) of each thread member of a class, struct or union in `text`."""
    code = strip(text)
    found = []
    scopes = []  # True: a class, struct or union body
    start = 0  # where the statement now being read begins

    def check(end):
        if not scopes or not scopes[-1]:
            return
        head = code[start:end]
        declared = head.split("=", 1)[0]
        if "(" in declared or not THREAD.search(declared):
            return
        declared = re.sub(r"\b(public|private|protected)\s*:(?!:)", "", declared)
        name = DECLARATOR.search(declared.strip())
        if name:
            line = code.count("\n", 0, start + len(head) - len(head.lstrip())) + 1
            found.append((line, name.group(1)))

    for i, c in enumerate(code):
        if c == "{":
            check(i)
            scopes.append(bool(RECORD.search(" ".join(code[start:i].split()))))
            start = i + 1
        elif c == "}":
            if scopes:
                scopes.pop()
            start = i + 1
        elif c == ";":
            check(i)
            start = i + 1
    return found


def production_sources(repo):
    for path in sorted(repo.rglob("*")):
        relative = path.relative_to(repo)
        top = relative.parts[0]
        if top in NOT_PRODUCTION or top.startswith((".", "build")):
            continue
        if path.suffix in (".h", ".cpp", ".cc", ".hpp") and path.is_file():
            yield relative.as_posix(), path


def problems(repo):
    out = []
    for relative, path in production_sources(repo):
        if relative in HOME:
            continue
        for line, member in thread_members(path.read_text(encoding="utf-8", errors="replace")):
            if (relative, member) in ALLOWED:
                continue
            out.append(f"{relative}:{line}: `{member}` is a thread member; run the loop on "
                       "kvgpu::BackgroundWorker (common/background_worker.h) instead")
    return out


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        repo = pathlib.Path(tmp)

        def plant(relative, text):
            (repo / relative).parent.mkdir(parents=True, exist_ok=True)
            (repo / relative).write_text(text)

        plant("common/background_worker.h", "class BackgroundWorker {\n  std::thread thread_;\n};\n")
        plant("tests/x_test.cpp", "struct Fake {\n  std::thread thread_;\n};\n")
        plant("fakes/f.h", "struct Fake {\n  std::vector<std::thread> pool_;\n};\n")
        plant("https/server.cpp", "void Run() {\n  std::vector<std::thread> threads;\n"
              "  for (auto& t : threads) t.join();\n  std::thread waiter([&] { x(); });\n}\n")
        plant("kube/fine.h", "// std::thread thread_; in a comment\nclass A {\n"
              " public:\n  std::thread::id owner() const;\n  static std::thread Make();\n"
              "  const char* s = \"std::thread t;\";\n  void F() {\n    std::thread local;\n  }\n"
              "};\nenum class E { kA };\n")
        assert problems(repo) == [], problems(repo)

        plant("kube/a.h", "namespace k {\nclass A {\n public:\n  void Start();\n\n private:\n"
              "  std::mutex m_;\n  std::thread thread_;\n};\n}\n")
        plant("webhook/b.cpp", "struct B::Impl {\n  int x = 0;\n  std::jthread worker{[] {}};\n};\n")
        plant("mdev/c.h", "class C final : public D {\n  std::vector<std::thread> pool_;\n"
              "  std::optional<std::thread> maybe_ = std::nullopt;\n};\n")
        plant("deviceplugin/daemon.h", "class Daemon {\n  std::thread thread_;\n"
              "  std::thread third_;\n};\n")
        got = problems(repo)
        want = ["deviceplugin/daemon.h:2: `thread_`", "deviceplugin/daemon.h:3: `third_`",
                "kube/a.h:8: `thread_`",
                "mdev/c.h:2: `pool_`", "mdev/c.h:3: `maybe_`", "webhook/b.cpp:3: `worker`"]
        assert [p.split(" is a")[0] for p in got] == want, got
    print("thread_members self-test: ok")


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
    found = problems(args.repo.resolve())
    for problem in found:
        print(problem)
    if found:
        return 1
    print("thread_members: no thread member outside common/background_worker.* and the allow-list")
    return 0


if __name__ == "__main__":
    sys.exit(main())
