"""Renders the Grafana dashboard's main panels to one SVG from the answers of a real Prometheus
scraping the real daemons (the workload of test_dashboard.py, run for four rounds), with gnuplot:
the picture in docs/operations.md. There is no Grafana here, so this is not a screenshot: each
plot is drawn from the very query of the panel it is titled after (variables set to All).

  render_dashboard.py WORKLOAD_BINARY OUTPUT.svg      (scripts/render-dashboard.sh runs it)
  render_dashboard.py WORKLOAD_BINARY PREVIEW.png     (the same as a PNG)
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import harness

ROUNDS = 4
PAUSE = 4.0  # seconds between rounds, so the time series show steps


def panel_expr(dashboard, title, ref="A"):
    for p in harness.panels(dashboard):
        if p["title"] == title:
            for t in p["targets"]:
                if t["refId"] == ref:
                    return t
    raise KeyError(title)


def short(resource):
    """tencent.com/vgpu-230 (the device plugin's) as vgpu-230, vgpu.tencent.com/vgpu-230 (DRA's)
    as DRA vgpu-230."""
    if resource.startswith("vgpu.tencent.com/"):
        return "DRA " + resource.split("/", 1)[1]
    return resource.replace("tencent.com/", "")


def legend(fmt, metric):
    out = fmt
    for k, v in metric.items():
        out = out.replace("{{%s}}" % k, short(v))
    return out.strip() or "value"


def main(workload_binary, output):
    dashboard = harness.load_dashboard()
    scratch = tempfile.mkdtemp(prefix="kvgpu-render-")
    workload = harness.Workload(workload_binary, os.path.join(scratch, "cluster"))
    prom = None
    try:
        targets = workload.start()
        os.makedirs(os.path.join(scratch, "prometheus"))
        prom = harness.Prometheus(targets, os.path.join(scratch, "prometheus"))
        start = time.time()
        prom.wait_scraped_since(start)
        time.sleep(PAUSE)
        for _ in range(ROUNDS):
            workload.phase()
            prom.wait_scraped_since(time.time())
            time.sleep(PAUSE)
        end = time.time()
        chosen, _ = harness.choose_all(prom, dashboard)
        draw(prom, dashboard, chosen, start, end, scratch, output)
    finally:
        if prom:
            prom.stop()
        workload.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def series(prom, dashboard, chosen, title, start, end, ref="A"):
    """A time series panel's query over [start, end]: [(legend, [(t, value)])]."""
    target = panel_expr(dashboard, title, ref)
    expr = harness.substitute(target["expr"], chosen).replace(harness.RATE_INTERVAL, "20s")
    data = prom.api("query_range", query=expr, start=start, end=end, step=1)
    out = []
    for s in data["result"]:
        points = [(float(t) - start, float(v)) for t, v in s["values"] if v not in ("NaN", "+Inf")]
        out.append((legend(target.get("legendFormat", ""), s["metric"]), points))
    return sorted(out)


def instant(prom, dashboard, chosen, title, ref="A"):
    target = panel_expr(dashboard, title, ref)
    return prom.query(harness.substitute(target["expr"], chosen))["result"]


def draw(prom, dashboard, chosen, start, end, scratch, output):
    files = []

    def write(name, rows):
        path = os.path.join(scratch, name)
        with open(path, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(" ".join(str(x) for x in row) + "\n")
        files.append(path)
        return path

    plots = []

    def timeseries(title, ylabel, ref="A", extra=None):
        lines = series(prom, dashboard, chosen, title, start, end, ref)
        if extra:
            lines += series(prom, dashboard, chosen, title, start, end, extra)
        # Series that stay 0 (every type nobody asked for) only crowd the legend.
        lines = [(n, p) for n, p in lines if any(v for _, v in p)]
        parts = []
        for i, (name, points) in enumerate(lines):
            path = write("ts-%d-%d.dat" % (len(plots), i), points)
            parts.append("'%s' using 1:2 with steps lw 2 title '%s'" % (path, name.replace("'", "")))
        plots.append("set title '%s'\nset xlabel 'seconds'\nset ylabel '%s'\nset style data lines\n"
                     "set key top left\nplot %s\n" % (title, ylabel, ", ".join(parts) or "NaN notitle"))

    def bars(title, rows):
        path = write("bars-%d.dat" % len(plots), [(i, v, '"%s"' % n) for i, (n, v) in enumerate(rows)])
        plots.append("set title '%s'\nset xlabel ''\nset ylabel 'vGPUs'\nset style fill solid 0.6\n"
                     "set boxwidth 0.7\nset xtics rotate by -45 font ',8'\nset key off\n"
                     "plot '%s' using 1:2:xtic(3) with boxes lc rgb '#3274d9'\nset xtics norotate font ''\n"
                     % (title, path))

    # Fleet: the stats, as text.
    stats = []
    for title, ref, label in (("vGPUs in use", "A", "vGPUs in use (both front ends)"),
                              ("vGPUs in use", "B", "of those, DRA claims prepared"),
                              ("Nodes ready", "A", "nodes ready"),
                              ("Nodes ready", "B", "nodes reporting"),
                              ("Nodes validated", "A", "nodes validated"),
                              ("Firing alerts", "A", "alerts")):
        for s in instant(prom, dashboard, chosen, title, ref):
            name = label + (" " + " ".join(s["metric"].values()) if s["metric"] else "")
            stats.append("%s: %s" % (name, s["value"][1]))
    gpus = []
    for s in instant(prom, dashboard, chosen, "GPUs: occupancy mode and lock"):
        m = s["metric"]
        gpus.append("%s %s  %s, locked to %s" % (m["node"], m["gpu"], m.get("occupancy", ""),
                                                  m.get("locked_type") or "nothing"))
    text = "\\n".join(["Fleet"] + stats + ["", "GPUs: occupancy mode and lock"] + sorted(gpus))
    plots.insert(0, "set title ''\nunset border\nunset xtics\nunset ytics\nunset key\n"
                    "set label 1 \"%s\" at screen 0.02, screen 0.97 left front font ',11'\n"
                    "plot [0:1][0:1] NaN notitle\nunset label 1\nset border\nset xtics\nset ytics\n"
                    % text)
    timeseries("vGPUs in use per type", "vGPUs")
    free = sorted((short(s["metric"]["resource"]), float(s["value"][1]))
                  for s in instant(prom, dashboard, chosen, "vGPUs free per type"))
    bars("vGPUs free per type (the types with room)", [(n, v) for n, v in free if v])
    timeseries("Allocate (percentiles)", "seconds", "A", "C")
    timeseries("DRA prepared claims", "claims")
    timeseries("Admission webhook", "seconds", "B")

    gp = os.path.join(scratch, "dashboard.gp")
    with open(gp, "w", encoding="utf-8") as f:
        if output.endswith(".png"):  # a preview where no SVG viewer is at hand
            f.write("set terminal pngcairo size 1400,1050 font 'Sans,10' background rgb 'white'\n")
        else:
            f.write("set terminal svg size 1400,1050 dynamic font 'Sans,10' "
                    "background rgb 'white'\n")
        f.write("set output '%s'\n" % output)
        f.write("set grid\nset multiplot layout 3,2 title 'kata-vgpu dashboard (two simulated "
                "nodes, %d rounds of the test workload)' font ',13'\n" % ROUNDS)
        for p in plots:
            f.write(p)
        f.write("unset multiplot\n")
    subprocess.run(["gnuplot", gp], check=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], os.path.abspath(sys.argv[2]))
