#!/usr/bin/env bash
# Rule evaluation cost, inferdb vs Prometheus 2.42 (Debian package) on the same load: both scrape
# the same SERVERS simulated vLLM servers (one `inferdb simulate` process, not measured) every
# INTERVAL and evaluate the same generated rule file: RECORD recording rules (10 vLLM-style
# expressions: token rates, prefix-cache hit ratio, TTFT / ITL / e2e quantiles, KV usage,
# Little's law, waiting per running, preemptions) in groups of 100, and ALERTS alerting rules
# (KV usage, preemptions, TTFT p95, queue thresholds, some firing) in groups of 100, with
# templated annotations. The two servers run side by side, twice: with the rule file and
# without it (same scrape load), each time WARMUP seconds to settle, then DURATION measured:
#   cpu_s        user+system CPU seconds of the server over the DURATION (/proc/<pid>/stat)
#   rounds       evaluation rounds in the DURATION: the increase of
#                prometheus_rule_group_iterations_total summed over groups / number of groups
#   cpu_ms/round (cpu_s with rules - cpu_s without) / rounds: the CPU one round of every group costs
#   rss_MB       peak resident memory (VmHWM) at the end of the run with rules
#   missed       prometheus_rule_group_iterations_missed_total at the end (rounds skipped
#                because the previous one was still running)
#
# Run by hand (not in CI), on a machine as quiet as can be had (the load average is printed):
#   benches/rules_cost.sh [WORKDIR]                       # default /tmp/inferdb-rules-cost
#   SERVERS=200 RECORD=1000 ALERTS=200 INTERVAL=15 WARMUP=90 DURATION=240 benches/rules_cost.sh
#   INFERDB_BIN=path/to/inferdb ...   skip the cargo build
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-rules-cost}
SERVERS=${SERVERS:-200}
RECORD=${RECORD:-1000}
ALERTS=${ALERTS:-200}
INTERVAL=${INTERVAL:-15}
WARMUP=${WARMUP:-90}
DURATION=${DURATION:-240}
PORT=${PORT:-24000}
IPORT=${IPORT:-29190}
PPORT=${PPORT:-29191}

command -v prometheus >/dev/null || {
	echo "prometheus missing: apt-get update && apt-get install -y prometheus" >&2
	exit 1
}
if [ -z "${INFERDB_BIN:-}" ]; then
	(cd "$ROOT" && cargo build --release --bin inferdb)
	INFERDB_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/inferdb
fi

mkdir -p "$W"
rm -rf "$W"/inferdb-* "$W"/prom-* "$W"/*.out
CLK=$(getconf CLK_TCK)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

# --- the rule file -----------------------------------------------------------------------
RECS=(
	'sum by (instance, model_name) (rate(vllm:generation_tokens_total[5m]))'
	'sum by (instance, model_name) (rate(vllm:prompt_tokens_total[5m]))'
	'sum by (instance, model_name) (rate(vllm:prefix_cache_hits_total[5m])) / sum by (instance, model_name) (rate(vllm:prefix_cache_queries_total[5m]))'
	'histogram_quantile(0.95, sum by (instance, model_name, le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))'
	'histogram_quantile(0.99, sum by (instance, model_name, le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))'
	'histogram_quantile(0.5, sum by (instance, model_name, le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))'
	'max by (instance, model_name) (vllm:kv_cache_usage_perc)'
	'sum by (instance, model_name) (avg_over_time(vllm:num_requests_running[5m])) / sum by (instance, model_name) (rate(vllm:request_success_total[5m]))'
	'sum by (instance, model_name) (vllm:num_requests_waiting) / sum by (instance, model_name) (vllm:num_requests_running)'
	'sum by (model_name) (rate(vllm:num_preemptions_total[5m]))'
)
ALRT=(
	'max by (instance, model_name) (vllm:kv_cache_usage_perc) > 0.%02d'
	'sum by (instance, model_name) (rate(vllm:num_preemptions_total[5m])) > %d'
	'histogram_quantile(0.95, sum by (instance, model_name, le) (rate(vllm:time_to_first_token_seconds_bucket[5m]))) > 0.%02d'
	'sum by (instance, model_name) (vllm:num_requests_waiting) >= %d'
)
{
	echo "groups:"
	for ((i = 0; i < RECORD; i++)); do
		if ((i % 100 == 0)); then
			printf '  - name: record-%d\n    rules:\n' $((i / 100))
		fi
		printf '      - record: bench:rec_%d\n        expr: %s\n' "$i" "${RECS[i % ${#RECS[@]}]}"
	done
	for ((i = 0; i < ALERTS; i++)); do
		if ((i % 100 == 0)); then
			printf '  - name: alert-%d\n    rules:\n' $((i / 100))
		fi
		# shellcheck disable=SC2059
		expr=$(printf "${ALRT[i % ${#ALRT[@]}]}" $((i % 50)))
		printf '      - alert: BenchAlert%d\n        expr: %s\n        for: 1m\n' "$i" "$expr"
		printf '        labels:\n          severity: warning\n'
		printf '        annotations:\n          summary: "{{ $labels.instance }} ({{ $labels.model_name }}) at {{ $value | humanize }}"\n'
	done
} >"$W/rules.yml"
promtool check rules "$W/rules.yml" | tail -1

targets=$(for ((i = 0; i < SERVERS; i++)); do printf '"127.0.0.1:%d",' $((PORT + i)); done)
config() { # $1: with rules (1/0)
	printf 'global:\n  scrape_interval: %ds\n  evaluation_interval: %ds\n' "$INTERVAL" "$INTERVAL"
	if [ "$1" = 1 ]; then printf 'rule_files: [%s/rules.yml]\n' "$W"; fi
	printf 'scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [%s]\n' "${targets%,}"
}
config 1 >"$W/with.yml"
config 0 >"$W/without.yml"

# --- the simulated servers ---------------------------------------------------------------
"$INFERDB_BIN" simulate --servers "$SERVERS" --port "$PORT" >"$W/sim.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$((PORT + SERVERS - 1))/metrics" >/dev/null && break
	sleep 0.2
done

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { # $1 port, $2 metric name: the sum over its series
	curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '{n = $1; sub(/\{.*/, "", n)} n == m {s += $NF} END {printf "%.0f", s}'
}
wait_ready() {
	for _ in $(seq 300); do
		curl -sf "http://127.0.0.1:$1/-/ready" >/dev/null && return 0
		sleep 0.2
	done
	echo "server on $1 not ready" >&2
	return 1
}

run() { # $1: with|without
	local mode=$1
	"$INFERDB_BIN" serve --config.file "$W/$mode.yml" --data-dir "$W/inferdb-$mode" \
		--web.listen-address "127.0.0.1:$IPORT" >"$W/inferdb-$mode.out" 2>&1 &
	local ipid=$!
	PIDS+=("$ipid")
	prometheus --config.file "$W/$mode.yml" --storage.tsdb.path "$W/prom-$mode" \
		--web.listen-address "127.0.0.1:$PPORT" >"$W/prom-$mode.out" 2>&1 &
	local ppid=$!
	PIDS+=("$ppid")
	wait_ready "$IPORT"
	wait_ready "$PPORT"
	sleep "$WARMUP"
	local ic0 pc0 ii0 pi0 ic1 pc1 ii1 pi1
	ic0=$(cpu "$ipid")
	pc0=$(cpu "$ppid")
	ii0=$(metric "$IPORT" prometheus_rule_group_iterations_total)
	pi0=$(metric "$PPORT" prometheus_rule_group_iterations_total)
	sleep "$DURATION"
	ic1=$(cpu "$ipid")
	pc1=$(cpu "$ppid")
	ii1=$(metric "$IPORT" prometheus_rule_group_iterations_total)
	pi1=$(metric "$PPORT" prometheus_rule_group_iterations_total)
	local ihwm phwm imiss pmiss
	ihwm=$(awk '/VmHWM/ {print $2}' "/proc/$ipid/status")
	phwm=$(awk '/VmHWM/ {print $2}' "/proc/$ppid/status")
	imiss=$(metric "$IPORT" prometheus_rule_group_iterations_missed_total)
	pmiss=$(metric "$PPORT" prometheus_rule_group_iterations_missed_total)
	kill "$ipid" "$ppid"
	wait "$ipid" "$ppid" 2>/dev/null || true
	echo "$mode inferdb $(((ic1 - ic0))) $((ii1 - ii0)) $ihwm ${imiss:-0}" >>"$W/results.out"
	echo "$mode prometheus $(((pc1 - pc0))) $((pi1 - pi0)) $phwm ${pmiss:-0}" >>"$W/results.out"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run with
echo "load average between: $(cut -d' ' -f1-3 /proc/loadavg)"
run without
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

GROUPS_N=$(((RECORD + 99) / 100 + (ALERTS + 99) / 100))
echo
echo "$SERVERS targets every ${INTERVAL}s, $RECORD recording + $ALERTS alerting rules in $GROUPS_N groups, ${DURATION}s measured after ${WARMUP}s"
printf '%-11s %10s %10s %8s %14s %8s %7s\n' server cpu_with_s cpu_wo_s rounds cpu_ms/round rss_MB missed
for srv in inferdb prometheus; do
	read -r _ _ cw iw hw mw < <(grep "^with $srv " "$W/results.out")
	read -r _ _ co _ _ _ < <(grep "^without $srv " "$W/results.out")
	awk -v s="$srv" -v cw="$cw" -v co="$co" -v it="$iw" -v g="$GROUPS_N" -v clk="$CLK" -v hw="$hw" -v m="$mw" 'BEGIN {
		r = it / g
		printf "%-11s %10.2f %10.2f %8.1f %14.1f %8.1f %7d\n", s, cw / clk, co / clk, r, (r > 0 ? 1000 * (cw - co) / clk / r : 0), hw / 1024, m
	}'
done
