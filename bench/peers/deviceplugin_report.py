#!/usr/bin/python3
"""The tables and the plot's data of bench/peers/deviceplugin.sh from the client's output.

Usage: deviceplugin_report.py WORK PLOT_DATA > section.md
WORK holds <ours|nvidia>-<round>.txt (kvgpu-bench-kubelet-client's lines, kubelet_client.cpp),
<...>.txt.load (the one-minute load average before the run) and order (the runs as taken). The run's facts come from the
environment (KV_*, set by the script)."""
import glob
import os
import re
import statistics
import sys

work, plot_data = sys.argv[1], sys.argv[2]
env = os.environ
rounds, starts, idle_s, allocate, gap_ms = env["KV_SETTINGS"].split()
NAMES = {"ours": "kvgpu-device-plugin", "nvidia": "kubevirt-gpu-device-plugin"}


def parse(path):
    run = {"starts": [], "allocate": [], "idle": None, "end": None, "precreated": None}
    for line in open(path):
        words = line.split()
        if not words:
            continue
        kind, rest = words[0], words[1:]
        if kind == "precreated":
            run["precreated"] = (int(rest[0]), rest[1])
            continue
        fields = {}
        if kind in ("start", "allocate"):
            fields["n"] = int(rest[0])
            rest = rest[1:]
        for key, value in zip(rest[::2], rest[1::2]):
            try:
                fields[key] = float(value)
            except ValueError:
                fields[key] = value
        if kind == "start":
            run["starts"].append(fields)
        elif kind == "allocate":
            run["allocate"].append(fields)
        elif kind in ("idle", "end"):
            run[kind] = fields
    return run


runs = []  # (round, which, load, run)
for path in sorted(glob.glob(os.path.join(work, "*-*.txt"))):
    m = re.match(r"(ours|nvidia)-(\d+)\.txt$", os.path.basename(path))
    if not m:
        continue
    load = open(path + ".load").read().strip() if os.path.exists(path + ".load") else "?"
    runs.append((int(m.group(2)), m.group(1), load, parse(path)))
order = open(os.path.join(work, "order")).read().split()  # the runs as taken
runs.sort(key=lambda r: order.index(f"{r[1]}-{r[0]}"))
if not any(w == "ours" for _, w, _, _ in runs) or not any(w == "nvidia" for _, w, _, _ in runs):
    sys.exit("deviceplugin_report: both plugins' runs are needed")


def pct(samples, q):
    """Nearest-rank percentile as bench/bench_stats.h takes it."""
    s = sorted(samples)
    return s[int(q * (len(s) - 1))]


def of(which):
    return [run for _, w, _, run in runs if w == which]


def ms(us):
    return us / 1000.0


def fmt_ms(value):
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def mib(kib):
    return kib / 1024.0


summary = {}
for which in ("ours", "nvidia"):
    rs = of(which)
    starts_all = [s for r in rs for s in r["starts"]]
    alloc = [a for r in rs for a in r["allocate"]]
    idles = [r["idle"] for r in rs]
    ends = [r["end"] for r in rs]
    total = [a["total_us"] for a in alloc]
    summary[which] = {
        "first": [s["first_list_ms"] for s in starts_all],
        "all": [s["all_lists_ms"] for s in starts_all],
        "register": [s["register_ms"] for s in starts_all],
        "start_cpu": [s["cpu_ms"] for s in starts_all],
        "resources": int(starts_all[-1]["resources"]),
        "devices": int(starts_all[-1]["devices"]),
        "total": total,
        "without": [a["total_us"] - a["kernel_us"] for a in alloc] if which == "ours" else None,
        "kernel": [a["kernel_us"] for a in alloc] if which == "ours" else None,
        "plugin": [a["plugin_us"] for a in alloc] if which == "ours" else None,
        "idle_cpu": [i["cpu_ms"] / i["seconds"] * 60 for i in idles],
        "idle_run": [i["thread_run_ms"] / i["seconds"] * 60 for i in idles],
        "rss": [i["vmrss_kib"] for i in idles],
        "rss_max": [i["vmrss_max_kib"] for i in idles],
        "anon": [i["rssanon_kib"] for i in idles],
        "file": [i["rssfile_kib"] for i in idles],
        "hwm_idle": [i["vmhwm_kib"] for i in idles],
        "hwm_end": [e["vmhwm_kib"] for e in ends],
        "threads": [i["threads"] for i in idles],
        "updates": [i["list_updates"] for i in idles],
    }
o, n = summary["ours"], summary["nvidia"]
med = statistics.median


def span(values, f=fmt_ms):
    return f"{f(med(values))} ({f(min(values))}-{f(max(values))})"


def p(values):
    return f"{fmt_ms(ms(pct(values, 0.5)))} / {fmt_ms(ms(pct(values, 0.99)))} ms"


out = []
w = out.append
w("Command (kvgpu-device-plugin built as the DaemonSet's image builds it, RelWithDebInfo; "
  "the build dir as at the top of the script):")
w("")
arg = env.get("KV_BUILD_ARG", "")
w(f"    bash bench/peers/deviceplugin.sh {arg}".rstrip())
w("")
settings = (f"ROUNDS={rounds} STARTS={starts} IDLE_S={idle_s} ALLOCATE={allocate} GAP_MS={gap_ms}")
w(f"Run {env['KV_DATE']}, commit {env['KV_COMMIT']}, {settings}. Machine: {env['KV_MODEL']}, "
  f"{env['KV_CORES']} cores; load average {env['KV_LOAD_START']} at the start, "
  f"{env['KV_LOAD_END']} at the end, "
  f"{min(float(l) for _, _, l, _ in runs):.2f}-{max(float(l) for _, _, l, _ in runs):.2f} "
  "before the runs.")
w(f"Ours: kvgpu-device-plugin ({env.get('KV_BUILD_TYPE') or 'build type unknown'}), the "
  "DaemonSet's config.yaml, no API server. Peer: "
  f"{env['KV_PEER']}, built with {env['KV_GO']} as its Dockerfile does (CGO_ENABLED=1, "
  "-trimpath, its vendor/). Neither pinned to a CPU.")
pre = of("nvidia")[0]["precreated"]
w(f"Node: kvgpu-sim t4x2 (two Tesla T4, 12 vGPU types each), a fresh simulator per run; for the "
  f"peer {pre[0]} {pre[1]} (GRID T4-1Q) vGPUs made before it starts, ours starts on the empty "
  "node.")
w("")
w("![time to the first list, Allocate, memory and idle CPU of both plugins]"
  "(images/bench-peers-deviceplugin.png)")
w("")
w("| | kvgpu-device-plugin | kubevirt-gpu-device-plugin |")
w("|---|---|---|")
w(f"| serves | {o['resources']} resources, {o['devices']} devices (every type the GPUs can make) "
  f"| {n['resources']} resource, {n['devices']} devices (the vGPUs made beforehand) |")
w(f"| start → first Register, ms (median, min-max of {len(o['first'])} and {len(n['first'])} "
  f"starts) | {span(o['register'])} | {span(n['register'])} |")
w(f"| start → first ListAndWatch with devices, ms | {span(o['first'])} | {span(n['first'])} |")
w(f"| start → every resource's first list, ms | {span(o['all'])} | {span(n['all'])} |")
w(f"| the plugin's CPU time until every list was there, ms (10 ms ticks) | {span(o['start_cpu'], lambda v: f'{v:.0f}')} "
  f"| {span(n['start_cpu'], lambda v: f'{v:.0f}')} |")
w(f"| Allocate, 1 device, p50 / p99 ({len(o['total'])} and {len(n['total'])} calls) "
  f"| with the kernel's create: {p(o['total'])}; without it: {p(o['without'])} "
  f"| {p(n['total'])} (no create: the vGPU exists) |")
w(f"| CPU idle, ms per 60 s: the threads' run time (schedstat; median, min-max of the runs) "
  f"| {span(o['idle_run'], lambda v: f'{v:.1f}')} | {span(n['idle_run'], lambda v: f'{v:.2f}')} |")
w(f"| the same as utime + stime (/proc/PID/stat, 10 ms ticks) "
  f"| {span(o['idle_cpu'], lambda v: f'{v:.0f}')} | {span(n['idle_cpu'], lambda v: f'{v:.0f}')} |")
w(f"| VmRSS idle, MiB | {span([mib(v) for v in o['rss']], lambda v: f'{v:.1f}')} "
  f"| {span([mib(v) for v in n['rss']], lambda v: f'{v:.1f}')} |")
w(f"| of which RssAnon / RssFile, MiB | {mib(med(o['anon'])):.1f} / {mib(med(o['file'])):.1f} "
  f"| {mib(med(n['anon'])):.1f} / {mib(med(n['file'])):.1f} |")
w(f"| VmHWM (peak) at the end of the run, MiB | {mib(med(o['hwm_end'])):.1f} "
  f"| {mib(med(n['hwm_end'])):.1f} |")
w(f"| threads idle | {med(o['threads']):.0f} | {med(n['threads']):.0f} |")
w(f"| ListAndWatch messages while idle | {med(o['updates']):.0f} | {med(n['updates']):.0f} |")
w("")


def goal(label, ours, peer, unit):
    verdict = "**met**" if ours <= peer else "**missed**"
    ratio = f" ({ours / peer:.{0 if ours / peer >= 100 else 2}f}×)" if peer > 0 else ""
    digits = 2 if min(ours, peer) < 1 else 1
    return (f"| {label} | {ours:.{digits}f} {unit} | {peer:.{digits}f} {unit} "
            f"| {verdict}{ratio} |")


w("| goal: ours ≤ the peer's (medians) | kvgpu-device-plugin | kubevirt-gpu-device-plugin | |")
w("|---|---|---|---|")
w(goal("VmRSS idle", mib(med(o["rss"])), mib(med(n["rss"])), "MiB"))
w(goal("RssAnon idle (the process's own memory)", mib(med(o["anon"])), mib(med(n["anon"])), "MiB"))
w(goal("CPU idle per 60 s (threads' run time)", med(o["idle_run"]), med(n["idle_run"]), "ms"))
w("")
kernel_share = med([k / t for k, t in zip(o["kernel"], o["total"])]) * 100
plugin_minus = [pl - k for pl, k in zip(o["plugin"], o["kernel"])]
outside = [t - pl for t, pl in zip(o["total"], o["plugin"])]
w("Where our Allocate's time went (p50 / p99 of each part over the same calls; the plugin's own "
  "histograms, read before and after each call): the kernel's create (the write to `create` "
  f"until the vGPU shows) {p(o['kernel'])}, the median call's {kernel_share:.0f} %; the rest of "
  f"the plugin's handler (`kvgpu_deviceplugin_allocate_seconds` less the create) "
  f"{p(plugin_minus)}; outside the handler (gRPC, the socket, the client) {p(outside)}.")
w("")
w("Every run, in the order taken:")
w("")
w("| round | plugin | load before | first list, ms (median of the starts) | Allocate p50 / p99, ms "
  "| ours without the create, p50 / p99 ms | CPU idle, ms per 60 s (run time) | VmRSS idle, MiB "
  "| RssAnon, MiB | VmHWM at the end, MiB |")
w("|---|---|---|---|---|---|---|---|---|---|")
for rnd, which, load, run in runs:
    total = [a["total_us"] for a in run["allocate"]]
    without = "-"
    if which == "ours":
        without = p([a["total_us"] - a["kernel_us"] for a in run["allocate"]]).replace(" ms", "")
    idle = run["idle"]
    w(f"| {rnd} | {NAMES[which]} | {load} | {fmt_ms(med(s['first_list_ms'] for s in run['starts']))} "
      f"| {p(total).replace(' ms', '')} | {without} "
      f"| {idle['thread_run_ms'] / idle['seconds'] * 60:.{1 if which == 'ours' else 2}f} "
      f"| {mib(idle['vmrss_kib']):.1f} | {mib(idle['rssanon_kib']):.1f} "
      f"| {mib(run['end']['vmhwm_kib']):.1f} |")
print("\n".join(out))

with open(plot_data, "w") as f:
    # index 0: time to the first list and to every list (ms, medians)
    f.write(f'"ours" {med(o["first"]):.3f} {med(o["all"]):.3f}\n')
    f.write(f'"NVIDIA" {med(n["first"]):.3f} {med(n["all"]):.3f}\n\n\n')
    # index 1: Allocate p50, p99 (ms)
    f.write(f'"ours, with create" {ms(pct(o["total"], .5)):.4f} {ms(pct(o["total"], .99)):.4f}\n')
    f.write(f'"ours, without" {ms(pct(o["without"], .5)):.4f} {ms(pct(o["without"], .99)):.4f}\n')
    f.write(f'"NVIDIA" {ms(pct(n["total"], .5)):.4f} {ms(pct(n["total"], .99)):.4f}\n\n\n')
    # index 2: memory idle (MiB): VmRSS, RssAnon, VmHWM at the end
    for label, s in (("ours", o), ("NVIDIA", n)):
        f.write(f'"{label}" {mib(med(s["rss"])):.2f} {mib(med(s["anon"])):.2f} '
                f'{mib(med(s["hwm_end"])):.2f}\n')
    f.write("\n\n")
    # index 3: idle CPU, the threads' run time (ms per 60 s): median, min, max
    for label, s in (("ours", o), ("NVIDIA", n)):
        f.write(f'"{label}" {med(s["idle_run"]):.3f} {min(s["idle_run"]):.3f} '
                f'{max(s["idle_run"]):.3f}\n')
