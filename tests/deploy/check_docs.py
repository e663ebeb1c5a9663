#!/usr/bin/env python3
"""Every flag a program's --help shows, and every config key it reads, is in the docs.

  check_docs.py --doc docs/configuration.md [--subcommands a,b] [--help-arg --help]
                [--config-keys-from-help] [--webhook-config-source FILE] -- PROGRAM [ARGS]

Runs `PROGRAM [ARGS] --help` (and `PROGRAM [ARGS] SUB --help` for each subcommand), takes every
long option (--name) from the output and requires `--name` in the doc. --config-keys-from-help
also takes the config keys from the help text's "Config file" section (the device plugin prints
them there); --webhook-config-source takes them from the key lists webhook/config.cpp checks
against. Config keys must appear in the doc as `key` (in backquotes) or as `key:` (YAML).
Ends with 'N passed, N failed'.
"""
import argparse
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9])")


def help_text(command):
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    text = result.stdout + result.stderr
    if not text.strip():
        sys.exit("%s printed nothing" % " ".join(command))
    return text


def keys_from_help(text):
    keys = []
    section = text.split("Config file", 1)
    if len(section) < 2:
        sys.exit("no 'Config file' section in the help text")
    for line in section[1].splitlines():
        m = re.match(r"^\s+(?:- )?([a-zA-Z][a-zA-Z0-9]*):", line)
        if m:
            keys.append(m.group(1))
    return keys


def keys_from_webhook_source(path):
    with open(path) as f:
        source = f.read()
    keys = []
    # KnownKeys(object, "where", {"a", "b"}) and std::set<std::string> keys{"a", ...}
    for block in re.findall(r"KnownKeys\([^{;]*\{([^}]*)\}", source, re.S) + \
            re.findall(r"std::set<std::string>\s+keys\s*\{([^}]*)\}", source, re.S):
        keys += re.findall(r'"([a-zA-Z][a-zA-Z0-9]*)"', block)
    # The top-level key table: {"name", <reader>} rows of TopKeys().
    keys += re.findall(r'\{"([a-zA-Z][a-zA-Z0-9]*)",\s*(?:StringListKey|StringKey|ChoiceKey|\{\})',
                       source)
    if not keys:
        sys.exit("found no key lists in %s" % path)
    return keys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--doc", required=True)
    parser.add_argument("--subcommands", default="")
    parser.add_argument("--help-arg", default="--help")
    parser.add_argument("--config-keys-from-help", action="store_true")
    parser.add_argument("--webhook-config-source")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    with open(args.doc) as f:
        doc = f.read()

    texts = [help_text(args.command + [args.help_arg])]
    for sub in filter(None, args.subcommands.split(",")):
        texts.append(help_text(args.command + [sub, args.help_arg]))
    flags = sorted({f for t in texts for f in FLAG.findall(t)} - {"--help"})
    keys = []
    if args.config_keys_from_help:
        keys += keys_from_help(texts[0])
    if args.webhook_config_source:
        keys += keys_from_webhook_source(args.webhook_config_source)

    name = args.command[0].rsplit("/", 1)[-1]
    passed = failed = 0
    if not flags:
        print("FAIL %s: no flags found in its help text" % name)
        failed += 1
    for flag in flags:
        if re.search(re.escape(flag) + r"(?![\w-])", doc):
            passed += 1
            print("ok   %s %s is documented" % (name, flag))
        else:
            failed += 1
            print("FAIL %s %s is not in %s" % (name, flag, args.doc))
    for key in sorted(set(keys)):
        if ("`%s`" % key) in doc or re.search(r"(?<![\w.])%s:" % re.escape(key), doc):
            passed += 1
            print("ok   %s config key %s is documented" % (name, key))
        else:
            failed += 1
            print("FAIL %s config key %s is not in %s" % (name, key, args.doc))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
