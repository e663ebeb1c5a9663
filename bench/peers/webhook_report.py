"""The Markdown section and the plot's data of bench/peers/webhook.sh.

usage: webhook_report.py RESULTS RSS ROUNDS_MD PLOT_DAT  (the run's facts in KV_* variables)

RESULTS: "NAME CONNECTIONS REQ/S P50 P99 CPU-US LOAD WAIT-US WRK-US" per measurement
(bench/webhook/harness.sh's interleaved_rounds); RSS: "NAME KIB-AFTER-SMALL KIB-AFTER-4MIB KIB-5S-LATER PEAK-KIB" per server;
ROUNDS_MD: the per-measurement table as printed. Writes PLOT_DAT (one line per connection count:
requests/s median, min, max of each server, then p99 the same) and prints the section.
"""
import os
import statistics
import sys

OURS, PEER = "kvgpu-webhook", "controller-runtime"


def ms(text):
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    raise ValueError(text)


def mib(kib):
    return f"{int(kib) / 1024:.1f} MiB"


def main(results_path, rss_path, rounds_path, plot_path):
    env = os.environ
    rows, loads = {}, []
    for line in open(results_path):
        name, c, rps, p50, p99, cpu, load, wait, wrk = line.split()
        rows.setdefault((int(c), name), []).append(
            {"rps": float(rps), "p50": ms(p50), "p99": ms(p99), "cpu": float(cpu),
             "wait": float(wait), "wrk": float(wrk),
             "server_busy": float(rps) * float(cpu) / 1e6, "wrk_busy": float(rps) * float(wrk) / 1e6})
        loads.append(float(load))
    counts = sorted({c for c, _ in rows})
    med = lambda c, name, key: statistics.median(s[key] for s in rows[(c, name)])
    span = lambda c, name, key: [f(s[key] for s in rows[(c, name)]) for f in (min, max)]

    with open(plot_path, "w") as plot:
        for c in counts:
            fields = [str(c)]
            for key in ("rps", "p99"):
                for name in (OURS, PEER):
                    fields += [f"{med(c, name, key):.3f}"] + [f"{v:.3f}" for v in span(c, name, key)]
            plot.write(" ".join(fields) + "\n")

    out = []
    w = out.append
    w("Command (kvgpu-webhook built as in bench/webhook/README.md, "
      "`cmake -S . -B build-webhook -G Ninja -DKVGPU_COMPONENTS=webhook -DCMAKE_BUILD_TYPE=Release`):")
    w("")
    w(f"    ROUNDS={env['KV_ROUNDS']} DURATION={env['KV_DURATION']} CONNECTIONS=\"{env['KV_CONNECTIONS']}\" "
      f"bash bench/peers/webhook.sh {env['KV_BINARY_ARG']}".rstrip())
    w("")
    w(f"Run {env['KV_DATE']}, commit {env['KV_COMMIT']}. Machine: {env['KV_MODEL']}, "
      f"{env['KV_CORES']} cores; load average {env['KV_LOAD_START']} at the start, "
      f"{env['KV_LOAD_END']} at the end, {min(loads):.2f}-{max(loads):.2f} before the measurements.")
    if max(loads) > 2.5:
        w(f"**Other work shared the machine** (the benchmark itself keeps about two processes busy, "
          f"the server and wrk, yet the load reached {max(loads):.2f} on {env['KV_CORES']} cores): "
          "each server's core was not its own, so the absolute numbers are low and noisy; the "
          "interleaved rounds give both servers the same chance of meeting it.")
    else:
        w("The load average stayed at what the benchmark's own two busy processes (server, wrk) "
          "explain: no other work to speak of shared the machine.")
    w(f"Servers: {env['KV_SERVERS']}; peer {env['KV_PEER']}; wrk: {env['KV_WRK']}; "
      f"{env['KV_DURATION']} s per measurement, TLS keep-alive, the benchmark review "
      "(bench/webhook/harness.sh's: the kube-apiserver fixture made a Kata pod asking for one vGPU).")
    w("")
    w("![requests/s and p99 of both webhooks at 1, 4 and 64 connections](images/bench-peers-webhook.png)")
    w("")
    w(f"| connections | {OURS} req/s | {PEER} req/s | ratio | per round | p50 ours / peer "
      "| p99 ours / peer | p99 lower in | goal: ≥ 2× with a lower p99 |")
    w("|---|---|---|---|---|---|---|---|---|")
    for c in counts:
        ours, peer = rows[(c, OURS)], rows[(c, PEER)]
        ratio = med(c, OURS, "rps") / med(c, PEER, "rps")
        per_round = [a["rps"] / b["rps"] for a, b in zip(ours, peer)]
        lower = sum(1 for a, b in zip(ours, peer) if a["p99"] < b["p99"])
        rounds = len(per_round)
        p99_ok = med(c, OURS, "p99") < med(c, PEER, "p99")
        if all(r >= 2 for r in per_round) and lower == rounds:
            goal = "**met** in every round"
        elif ratio >= 2 and p99_ok:
            goal = (f"met in the medians, not in every round (≥ 2× in {sum(r >= 2 for r in per_round)} "
                    f"of {rounds}, lower p99 in {lower} of {rounds})")
        else:
            missed = [f"requests/s {ratio:.2f}×"] if ratio < 2 else []
            missed += [] if p99_ok else ["p99 not lower"]
            goal = "**missed**: " + ", ".join(missed)
        w(f"| {c} | {med(c, OURS, 'rps'):.0f} | {med(c, PEER, 'rps'):.0f} | {ratio:.2f}× "
          f"| {', '.join(f'{r:.2f}' for r in per_round)} "
          f"| {med(c, OURS, 'p50'):.2f} / {med(c, PEER, 'p50'):.2f} ms "
          f"| {med(c, OURS, 'p99'):.2f} / {med(c, PEER, 'p99'):.2f} ms | {lower} of {rounds} | {goal} |")
    w("")
    w("Medians over the rounds; \"per round\" is each round's ratio of requests/s.")
    w("")
    w("Where a request's time went (medians over the rounds): the server's CPU time (user + system, "
      "`/proc/PID/stat`), the time its threads were runnable but waited for a CPU "
      "(`/proc/PID/task/*/schedstat`), and wrk's CPU time, each divided by the requests wrk "
      "counted; \"busy\" is requests/s × CPU per request, the share of its core each used.")
    w("")
    w("| connections | server | CPU per request | waited for a CPU per request | wrk CPU per request "
      "| server's core busy | wrk's core busy |")
    w("|---|---|---|---|---|---|---|")
    for c in counts:
        for name in (OURS, PEER):
            w(f"| {c} | {name} | {med(c, name, 'cpu'):.0f} µs | {med(c, name, 'wait'):.0f} µs "
              f"| {med(c, name, 'wrk'):.0f} µs | {med(c, name, 'server_busy'):.0%} "
              f"| {med(c, name, 'wrk_busy'):.0%} |")
    w("")
    peak_ours, peak_peer = env["KV_PEAK"].split()
    peaks = {OURS: peak_ours, PEER: peak_peer}
    w("| server | RSS after one benchmark review | after one 4 MiB review | 5 s later "
      "| peak (fresh process) | peak of the measured process (both checks, all rounds) |")
    w("|---|---|---|---|---|---|")
    for line in open(rss_path):
        name, small, big, later, peak = line.split()
        w(f"| {name} | {mib(small)} | {mib(big)} | {mib(later)} | {mib(peak)} | {mib(peaks[name])} |")
    w("")
    w("Each server was started afresh for these, answered one benchmark review, then one AdmissionReview "
      f"of exactly 4 MiB (the same pod with {env['KV_BIG']} in its vGPU container), which both "
      "mutate alike (checked before the rounds). kvgpu-webhook's own count of mutations "
      f"(`kvgpu_webhook_mutations_total`) after the rounds: {env['KV_MUTATIONS']}.")
    w("")
    w("Every measurement, in the order taken:")
    w("")
    out.extend(line.rstrip("\n") for line in open(rounds_path))
    print("\n".join(out))


if __name__ == "__main__":
    main(*sys.argv[1:5])
