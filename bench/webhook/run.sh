#!/usr/bin/env bash
# Benchmarks kvgpu-webhook against the peer users would otherwise run, a Go net/http +
# encoding/json webhook doing the same mutation (go-peer/, built here with the `go` on PATH into
# a cache outside the clone), paired and interleaved: every round measures both servers at each
# connection count, in alternating order, so that a machine shared with other work weighs on both
# alike. nginx serving a static response of the same size is measured once, as the ceiling of an
# HTTPS server here. All over TLS with keep-alive, wrk posting a realistic AdmissionReview;
# loopback only, bounded time. With two or more cores each server is pinned to CPU 0 and wrk to
# CPU 1 (PIN=0: no pinning). The measuring is harness.sh's, shared with bench/peers/webhook.sh.
#   bash bench/webhook/run.sh [path/to/kvgpu-webhook]
# Env: DURATION (s per measurement, default 10), CONNECTIONS ("4 64"), ROUNDS (3), WRK_THREADS
# (1 pinned, else 2), WORKERS (1: the webhook's --workers and nginx's worker_processes; Go's
# GOMAXPROCS follows the pinning), NGINX (1: measure nginx's static answer too),
# KVGPU_CACHE (~/.cache/kata-vgpu: the Go build cache and the peer's binary).
set -o errexit -o nounset -o pipefail

bench_name=bench-webhook
# shellcheck source=bench/webhook/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
webhook=${1:-$root/build-webhook/webhook/kvgpu-webhook}
[[ -x "$webhook" ]] || die "no webhook binary at $webhook (build with -DKVGPU_COMPONENTS=webhook)"
require_tools wrk nginx openssl curl go

make_cert
make_review "$work/review.json"
export REVIEW_FILE=$work/review.json

# The Go peer (standard library only: its go.mod names no dependency, so there is no go.sum).
go_build "$harness_dir/go-peer" "$cache/go-peer"

start_webhook "$webhook" 18443 19443
post_review 18443 "$REVIEW_FILE" "$work/response.json"
grep -q '"patchType":"JSONPatch"' "$work/response.json" || die "the webhook did not mutate"

# The Go peer is given the webhook's own patch as its template (go-peer/main.go).
"$python" -c 'import base64, json, sys; print(base64.b64decode(json.load(open(sys.argv[1]))["response"]["patch"]).decode())' \
  "$work/response.json" >"$work/patch.json"
start_server go-peer "$cache/go-peer" -listen 127.0.0.1:18445 -cert "$work/tls.crt" -key "$work/tls.key" \
  -template "$work/patch.json"
go_pid=$server_pid
wait_port 18445 "$go_pid"
post_review 18445 "$REVIEW_FILE" "$work/go-response.json"
cmp -s <("$python" -c 'import json,sys; r=json.load(open(sys.argv[1]))["response"]; print(r["patch"])' "$work/response.json") \
  <("$python" -c 'import json,sys; r=json.load(open(sys.argv[1]))["response"]; print(r["patch"])' "$work/go-response.json") ||
  info "note: the Go peer's patch differs in bytes from the webhook's (same operations, its own encoding)"

info "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load average $(cut -d' ' -f1-3 /proc/loadavg)"
interleaved_rounds "$work/results" "webhook:18443:$webhook_pid" "go:18445:$go_pid"
w_rss=$(peak_rss_kib "$webhook_pid")
g_rss=$(peak_rss_kib "$go_pid")
mutations=$(curl -s --max-time 10 http://127.0.0.1:19443/metrics | awk '/^kvgpu_webhook_mutations_total/ {print $2}')

# nginx: same certificate, same request, a fixed body of the webhook's exact response size.
if [[ ${NGINX:-1} != 0 ]]; then
  grep -q "'" "$work/response.json" && die "response contains a quote; cannot inline it for nginx"
  mkdir -p "$work/nginx"
  cat >"$work/nginx/nginx.conf" <<NGINX
worker_processes $workers;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  server {
    listen 127.0.0.1:18444 ssl;
    ssl_certificate $work/tls.crt;
    ssl_certificate_key $work/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    keepalive_requests 1000000;
    client_body_buffer_size 64k;
    location = /mutate {
      default_type application/json;
      # The webhook's own response, inlined: nginx's static file module refuses POST.
      return 200 '$(cat "$work/response.json")';
    }
  }
}
NGINX
  start_server nginx nginx -c "$work/nginx/nginx.conf" -p "$work/nginx"
  wait_port 18444 "$server_pid"
  for c in $connection_counts; do
    read -r rps p50 p99 bad _ < <(run_wrk https://127.0.0.1:18444/mutate "$c")
    echo "| - | $c | nginx static, same size ($(wc -c <"$work/response.json") B) | $rps | $p50 | $p99 | $bad | | | | $(cut -d' ' -f1 /proc/loadavg) |"
  done
fi

# Medians over the rounds, and the ratios the issue asks for.
echo
summarize "$work/results" webhook go webhook Go
cat <<TAIL

peak RSS: kvgpu-webhook $((w_rss / 1024)) MiB, Go peer $((g_rss / 1024)) MiB; mutations counted by the webhook: $mutations
(wrk -t$threads -d${duration}s per measurement, $workers event loop(s) / nginx worker(s), TLS keep-alive, $(wc -c <"$REVIEW_FILE") B request,
$(nproc) cores, servers pinned: ${pin_server[*]:-no}, wrk pinned: ${pin_client[*]:-no}; $(go version))
TAIL
