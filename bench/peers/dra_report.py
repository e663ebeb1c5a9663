#!/usr/bin/python3
"""The tables and the plot's data of bench/peers/dra.sh from dra_bench.py's runs.

Usage: dra_report.py WORK PLOT_DATA > section.md
WORK holds <ours|nvidia|example>-<round>.json and order (the runs as taken). The run's facts come
from the environment (KV_*, set by the script)."""
import json
import os
import statistics
import sys

work, plot_data = sys.argv[1], sys.argv[2]
env = os.environ
rounds, calls, gap_ms = env["KV_SETTINGS"].split()
BUDGET_S = 45.0  # kubelet's defaultClientCallTimeout (pkg/kubelet/cm/dra/plugin/dra_plugin.go)
PLUGINS = ("ours", "nvidia", "example")
NAMES = {"ours": "kvgpu-device-plugin (DRA)", "nvidia": "NVIDIA gpu-kubelet-plugin", "example": "dra-example-driver"}
SHORT = {"ours": "ours", "nvidia": "NVIDIA", "example": "example"}

order = open(os.path.join(work, "order")).read().split()
runs = []
for name in order:
    with open(os.path.join(work, name + ".json")) as f:
        runs.append(json.load(f))
present = [p for p in PLUGINS if any(r["which"] == p and r.get("prepare_s") for r in runs)]
if not present:
    sys.exit("dra_report: no run finished")


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def ms(v):
    return v * 1e3


def fmt(v):
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def pooled(which, key):
    out = []
    for r in runs:
        if r["which"] == which and r.get(key):
            out += r[key]
    return out


def per_run(which, fn):
    return [fn(r) for r in runs if r["which"] == which and r.get("prepare_s")]


def med(values):
    return statistics.median(values) if values else float("nan")


stats = {}
for p in present:
    prep, unprep, floor = pooled(p, "prepare_s"), pooled(p, "unprepare_s"), pooled(p, "floor_s")
    stats[p] = {
        "prep50": ms(pct(prep, .5)), "prep99": ms(pct(prep, .99)), "prepmax": ms(max(prep)),
        "unprep50": ms(pct(unprep, .5)), "unprep99": ms(pct(unprep, .99)),
        "floor50": ms(pct(floor, .5)), "floor99": ms(pct(floor, .99)),
        "cpu": med(per_run(p, lambda r: r["cpu_s"] / len(r["prepare_s"]) * 1e3)),
        "client": med(per_run(p, lambda r: r["client_cpu_s"] / len(r["prepare_s"]) * 1e3)),
        "rss": med(per_run(p, lambda r: r["status_after"]["VmRSS"] / 1024)),
        "rss_before": med(per_run(p, lambda r: r["status_before"]["VmRSS"] / 1024)),
        "hwm": med(per_run(p, lambda r: r["status_after"]["VmHWM"] / 1024)),
        "threads": med(per_run(p, lambda r: r["status_after"]["Threads"])),
        "registered": med(per_run(p, lambda r: r["registered_s"] * 1e3)),
        "slice": med(per_run(p, lambda r: r["slice_s"] * 1e3)),
        "errors": sum(r.get("error_count", 0) for r in runs if r["which"] == p),
        "calls": len(prep),
    }
    if p == "ours":
        kernel = [r["kernel"] for r in runs if r["which"] == p and r.get("kernel")]
        c = [k["kvgpu_deviceplugin_vgpu_create_seconds"] for k in kernel]
        d = [k["kvgpu_deviceplugin_vgpu_remove_seconds"] for k in kernel]
        stats[p]["create"] = ms(sum(x[0] for x in c) / max(1, sum(x[1] for x in c)))
        stats[p]["remove"] = ms(sum(x[0] for x in d) / max(1, sum(x[1] for x in d)))
        stats[p]["sim"] = med(per_run(p, lambda r: r.get("sim_cpu_s", 0) / len(r["prepare_s"]) * 1e3))

out = []
w = out.append
w("Command (kvgpu-device-plugin and kvgpu-sim in the build dir; the cmake line at the top of the script):")
w("")
w(f"    bash bench/peers/dra.sh {env.get('KV_BUILD_ARG') or ''}".rstrip())
w("")
w(f"Run {env['KV_DATE']}, commit {env['KV_COMMIT']}, {env['KV_CORES']} cores ({env['KV_MODEL']}), "
  f"load average {env['KV_LOAD_START']} before and {env['KV_LOAD_END']} after; our build "
  f"{env.get('KV_BUILD_TYPE') or '?'}, the peers built with {env['KV_GO']}; kube-apiserver "
  f"{env['KV_APISERVER']}. {rounds} rounds of {calls} prepare + unprepare pairs per plugin, "
  f"{gap_ms} ms between calls, the plugins' order rotating; p50/p99 over all rounds' calls, the "
  "rest medians of the runs. Client: `bench/peers/dra_bench.py` (Python, grpcio), the same for all "
  "three; its floor is GetInfo on the registration socket, a call no plugin does work for.")
w("")
w(f"Peers: {env['KV_PEERS']}.")
w("")
head = "| | " + " | ".join(NAMES[p] for p in present) + " |"
w(head)
w("|---" * (len(present) + 1) + "|")


def row(label, fn):
    w(f"| {label} | " + " | ".join(fn(p) for p in present) + " |")


row("what a prepare does", lambda p: {
    "ours": "reads the claim, checkpoint, creates a vGPU (kvgpu-sim's T4, FUSE), CDI spec, device metadata",
    "nvidia": "reads the claim, checkpoint (twice), CDI spec of a full A100 (mock NVML)",
    "example": "reads the claim, checkpoint, CDI spec of a simulated GPU"}[p])
row("NodePrepareResources p50 / p99, ms", lambda p: f"{fmt(stats[p]['prep50'])} / {fmt(stats[p]['prep99'])}")
row("NodeUnprepareResources p50 / p99, ms", lambda p: f"{fmt(stats[p]['unprep50'])} / {fmt(stats[p]['unprep99'])}")
row("slowest prepare, ms", lambda p: fmt(stats[p]["prepmax"]))
row("client floor (GetInfo) p50 / p99, ms", lambda p: f"{fmt(stats[p]['floor50'])} / {fmt(stats[p]['floor99'])}")
row("plugin CPU per prepare + unprepare, ms", lambda p: fmt(stats[p]["cpu"]))
row("kernel create / remove (mean, the model's histograms), ms",
    lambda p: f"{fmt(stats[p]['create'])} / {fmt(stats[p]['remove'])}" if p == "ours" else "none (no kernel work)")
row("kvgpu-sim's CPU per pair (the simulated kernel), ms", lambda p: fmt(stats[p]["sim"]) if p == "ours" else "-")
row("VmRSS before / after the loop, MiB", lambda p: f"{stats[p]['rss_before']:.1f} / {stats[p]['rss']:.1f}")
row("VmHWM, MiB", lambda p: f"{stats[p]['hwm']:.1f}")
row("threads", lambda p: f"{stats[p]['threads']:.0f}")
row("start to registration socket answered, ms", lambda p: fmt(stats[p]["registered"]))
row("start to its ResourceSlice at the API server, ms", lambda p: fmt(stats[p]["slice"]))
row("client-go waits for its rate limiter (log lines)", lambda p: "-" if p == "ours" else str(
    sum(r.get("throttled", 0) for r in runs if r["which"] == p)))
row("failed calls", lambda p: f"{stats[p]['errors']} of {2 * stats[p]['calls']}")
row("p99 prepare in kubelet's 45 s budget", lambda p: f"{stats[p]['prep99'] / (BUDGET_S * 1e3) * 100:.4f} %")
w("")
w("Every run, in the order taken:")
w("")
w("| round | plugin | load before | prepare p50 / p99, ms | unprepare p50 / p99, ms | CPU per pair, ms "
  "| VmRSS after, MiB | errors |")
w("|---|---|---|---|---|---|---|---|")
for r in runs:
    if not r.get("prepare_s"):
        w(f"| {r['round']} | {NAMES[r['which']]} | {r['load']} | failed | | | | |")
        continue
    p, u = r["prepare_s"], r["unprepare_s"]
    w(f"| {r['round']} | {NAMES[r['which']]} | {r['load']} | {fmt(ms(pct(p, .5)))} / {fmt(ms(pct(p, .99)))} "
      f"| {fmt(ms(pct(u, .5)))} / {fmt(ms(pct(u, .99)))} | {fmt(r['cpu_s'] / len(p) * 1e3)} "
      f"| {r['status_after']['VmRSS'] / 1024:.1f} | {r['error_count']} |")
print("\n".join(out))

with open(plot_data, "w") as f:
    # index 0: prepare and unprepare p50, p99 (ms)
    for p in present:
        s = stats[p]
        f.write(f'"{SHORT[p]}" {s["prep50"]:.4f} {s["prep99"]:.4f} {s["unprep50"]:.4f} {s["unprep99"]:.4f} '
                f'{s["floor50"]:.4f}\n')
    f.write("\n\n")
    # index 1: CPU per pair (ms), VmRSS after (MiB)
    for p in present:
        f.write(f'"{SHORT[p]}" {stats[p]["cpu"]:.4f} {stats[p]["rss"]:.2f}\n')
