#!/usr/bin/env bash
# Service discovery under churn, side by side: inferdb following 1,000 pods through
# kubernetes_sd_configs (list + watch) and Prometheus 2.42 following the same 1,000 targets
# through http_sd_configs (refresh 5 s; Debian's Prometheus has no Kubernetes SD), while the
# fake source (examples/sd_churn_server.rs) replaces 10 % of them every minute, for 5 minutes.
# Reports each process' CPU seconds over the churn window, its RSS at the end and its peak
# RSS (VmHWM), and the active targets each shows at the end.
#
# Both jobs scrape every 1 h (timeout 1 s) so that scraping the (unreachable) targets
# costs little; what remains is discovery, relabelling and the scrape pool's bookkeeping.
#
#   benches/sd_churn.sh [SECONDS] [PODS] [REPLACED_PER_MINUTE]     # default 300 1000 100
#
# PROFILE=profiling builds with symbols (same optimisation as release); PERF=1 then also
# records inferdb with `perf record --call-graph dwarf` over the churn window into
# $W/perf.data and prints the functions with the most time below them. BIN_DIR=dir runs the
# inferdb and sd_churn_server found there instead of building.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-300}
PODS=${2:-1000}
PER_MIN=${3:-100}
PROFILE=${PROFILE:-release}
W=$(mktemp -d /tmp/inferdb-sd-churn.XXXX)
if [ -n "${BIN_DIR:-}" ]; then
  BIN=$BIN_DIR  # inferdb and sd_churn_server built before (to compare two builds)
  mkdir -p "$BIN/examples" && ln -sf "$BIN/sd_churn_server" "$BIN/examples/sd_churn_server"
else
  (cd "$ROOT" && cargo build --profile "$PROFILE" -p inferdb --bin inferdb --example sd_churn_server)
  BIN=$ROOT/target/$PROFILE
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SD=$(free_port); IP=$(free_port); PP=$(free_port)
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; }
PIDS=()
trap cleanup EXIT
"$BIN/examples/sd_churn_server" "$SD" "$PODS" "$PER_MIN" &
PIDS+=($!)
RELABEL='    relabel_configs:
      - {source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape], regex: "true", action: keep}
      - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
      - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
      - {source_labels: [__meta_kubernetes_pod_label_model], target_label: model}'
cat >"$W/inferdb.yml" <<YML
global: {scrape_interval: 1h, scrape_timeout: 1s}
scrape_configs:
  - job_name: vllm
    kubernetes_sd_configs: [{role: pod, api_server: "http://127.0.0.1:$SD"}]
$RELABEL
YML
cat >"$W/prometheus.yml" <<YML
global: {scrape_interval: 1h, scrape_timeout: 1s}
scrape_configs:
  - job_name: vllm
    http_sd_configs: [{url: "http://127.0.0.1:$SD/sd", refresh_interval: 5s}]
YML
sleep 1
"$BIN/inferdb" serve --no-gpu --config.file "$W/inferdb.yml" --data-dir "$W/idb" --web.listen-address "127.0.0.1:$IP" >"$W/inferdb.log" 2>&1 &
IPID=$!; PIDS+=($IPID)
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/prom" --web.listen-address="127.0.0.1:$PP" >"$W/prometheus.log" 2>&1 &
PPID_=$!; PIDS+=($PPID_)
cpu() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }  # utime+stime, USER_HZ=100
rss() { awk '/VmRSS/{print $2/1024}' "/proc/$1/status"; }
hwm() { awk '/VmHWM/{print $2/1024}' "/proc/$1/status"; }
active() { curl -s "http://127.0.0.1:$1/api/v1/targets?state=active" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["activeTargets"]))'; }
sleep 30  # start-up and the first full list
i0=$(cpu $IPID); p0=$(cpu $PPID_)
echo "after start-up: inferdb ${i0}s CPU $(rss $IPID) MB, prometheus ${p0}s CPU $(rss $PPID_) MB; active $(active $IP) / $(active $PP)"
if [ "${PERF:-0}" = 1 ]; then
  perf record -F 199 --call-graph dwarf,16384 -o "$W/perf.data" -p "$IPID" -- sleep "$SECS" >/dev/null 2>&1
else
  sleep "$SECS"
fi
i1=$(cpu $IPID); p1=$(cpu $PPID_)
printf "%-10s %12s %10s %10s %8s\n" process "cpu_s/${SECS}s" rss_MB peak_MB active
printf "%-10s %12.2f %10.1f %10.1f %8s\n" inferdb "$(echo "$i1 - $i0" | bc)" "$(rss $IPID)" "$(hwm $IPID)" "$(active $IP)"
printf "%-10s %12.2f %10.1f %10.1f %8s\n" prometheus "$(echo "$p1 - $p0" | bc)" "$(rss $PPID_)" "$(hwm $PPID_)" "$(active $PP)"
if [ "${PERF:-0}" = 1 ]; then
  perf report -i "$W/perf.data" --children --no-call-graph --percent-limit 3 --stdio 2>/dev/null | grep -v "^$" | head -60
  echo "perf data: $W/perf.data"
fi
