#!/usr/bin/env bash
# Renders the Grafana dashboard's main panels (deploy/monitoring/dashboards/kata-vgpu.json) to
# docs/images/dashboard.svg, the picture in docs/operations.md: the test workload runs on two
# simulated nodes, a real Prometheus scrapes the real daemons, and gnuplot draws each panel from
# its own query's answers (tests/monitoring/render_dashboard.py). Needs /dev/fuse and root, as
# the demo does. Re-run it after changing the dashboard.
set -o errexit -o nounset -o pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
build=${KVGPU_BUILD_DIR:-build}

bash scripts/install-deps.sh >&2
cmake -S . -B "$build" -G Ninja -DKVGPU_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target kvgpu-monitoring-workload >&2
mkdir -p docs/images
PYTHONDONTWRITEBYTECODE=1 KVGPU_SOURCE_DIR="$top" /usr/bin/python3 \
  tests/monitoring/render_dashboard.py "$build/tests/monitoring/kvgpu-monitoring-workload" \
  docs/images/dashboard.svg
echo "wrote docs/images/dashboard.svg"
