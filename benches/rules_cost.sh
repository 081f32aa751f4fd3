#!/usr/bin/env bash
# Rule evaluation cost, inferdb vs Prometheus 2.42 (Debian package) on the same load: both scrape
# the same SERVERS simulated vLLM servers (one `inferdb simulate` process, not measured) every
# SCRAPE seconds and evaluate the same generated rule file every EVAL seconds: RECORD recording
# rules (10 vLLM-style expressions: token rates, prefix-cache hit ratio, TTFT / ITL / e2e
# quantiles, KV usage, Little's law, waiting per running, preemptions) in groups of 100, and
# ALERTS alerting rules (KV usage, preemptions, TTFT p95, queue thresholds, some firing) in
# groups of 100, with templated annotations. The two servers run side by side, twice: with the
# rule file and without it (same scrape load), each time WARMUP seconds to settle, then
# DURATION seconds measured, the same wall window for both servers:
#   cpu_with_s   user+system CPU seconds of the server over the window, with the rules
#                (utime+stime of /proc/<pid>/stat, all threads)
#   cpu_wo_s     the same without the rules
#   added_s      cpu_with_s - cpu_wo_s: the CPU the rules add over the window
#   rounds       evaluation rounds done in the window: the increase of
#                prometheus_rule_evaluations_total (summed over groups) / number of rules
#                (at most DURATION / EVAL + 1; fewer when rounds are missed)
#   ms/round     added_s / rounds: the CPU one round of every rule costs
#   missed       increase of prometheus_rule_group_iterations_missed_total in the window
#                (group evaluations skipped because the previous one was still running); a
#                server that misses rounds does less work, so compare ms/round, not added_s
#   rss_MB       peak resident memory (VmHWM) at the end of the run with rules
# The last line gives inferdb's added CPU and CPU per round as a multiple of Prometheus'.
#
# Run by hand (not in CI), on a machine as quiet as can be had (the load average is printed).
# On a small machine keep EVAL long enough that neither server falls behind (missed = 0):
#   benches/rules_cost.sh [WORKDIR]                       # default /tmp/inferdb-rules-cost
#   SERVERS=200 RECORD=1000 ALERTS=200 SCRAPE=15 EVAL=60 WARMUP=90 DURATION=240 benches/rules_cost.sh
#   INFERDB_BIN=path/to/inferdb ...   skip the cargo build
#   DISTINCT=1 ...                    give every rule its own selectors: each `vllm:` metric
#                                     of rule i reads `{instance!="rule-i"}` (the same series,
#                                     a selector no other rule has), so no two rules of a group
#                                     share a selection; without it the rules repeat 10 + 4
#                                     expression shapes, which inferdb's shared selections favour
#   RULES_ONLY=1 ...                  write WORKDIR/rules.yml and stop (for profiling harnesses)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-rules-cost}
SERVERS=${SERVERS:-200}
RECORD=${RECORD:-1000}
ALERTS=${ALERTS:-200}
SCRAPE=${SCRAPE:-15}
EVAL=${EVAL:-60}
WARMUP=${WARMUP:-90}
DURATION=${DURATION:-240}
PORT=${PORT:-24000}
IPORT=${IPORT:-29190}
PPORT=${PPORT:-29191}

command -v prometheus >/dev/null || {
	echo "prometheus missing: apt-get update && apt-get install -y prometheus" >&2
	exit 1
}
if [ -z "${INFERDB_BIN:-}" ] && [ -z "${RULES_ONLY:-}" ]; then
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
# the expression of rule $1 (0..RECORD+ALERTS): $2 as is, or with its own selectors
own() {
	if [ -n "${DISTINCT:-}" ]; then
		sed -E "s/(vllm:[a-z0-9_]+)/\1{instance!=\"rule-$1\"}/g" <<<"$2"
	else
		echo "$2"
	fi
}
{
	echo "groups:"
	for ((i = 0; i < RECORD; i++)); do
		if ((i % 100 == 0)); then
			printf '  - name: record-%d\n    rules:\n' $((i / 100))
		fi
		printf '      - record: bench:rec_%d\n        expr: %s\n' "$i" "$(own "$i" "${RECS[i % ${#RECS[@]}]}")"
	done
	for ((i = 0; i < ALERTS; i++)); do
		if ((i % 100 == 0)); then
			printf '  - name: alert-%d\n    rules:\n' $((i / 100))
		fi
		# shellcheck disable=SC2059
		expr=$(own $((RECORD + i)) "$(printf "${ALRT[i % ${#ALRT[@]}]}" $((i % 50)))")
		printf '      - alert: BenchAlert%d\n        expr: %s\n        for: 1m\n' "$i" "$expr"
		printf '        labels:\n          severity: warning\n'
		printf '        annotations:\n          summary: "{{ $labels.instance }} ({{ $labels.model_name }}) at {{ $value | humanize }}"\n'
	done
} >"$W/rules.yml"
promtool check rules "$W/rules.yml" | tail -1
if [ -n "${RULES_ONLY:-}" ]; then exit 0; fi

targets=$(for ((i = 0; i < SERVERS; i++)); do printf '"127.0.0.1:%d",' $((PORT + i)); done)
config() { # $1: with rules (1/0)
	printf 'global:\n  scrape_interval: %ds\n  evaluation_interval: %ds\n' "$SCRAPE" "$EVAL"
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
	# each server's counters are read next to its CPU, so its three readings cover the same
	# window even when the other server is slow to answer /metrics
	local ie0 pe0 im0 pm0 ic0 pc0 ie1 pe1 im1 pm1 ic1 pc1
	ie0=$(metric "$IPORT" prometheus_rule_evaluations_total)
	im0=$(metric "$IPORT" prometheus_rule_group_iterations_missed_total)
	ic0=$(cpu "$ipid")
	pe0=$(metric "$PPORT" prometheus_rule_evaluations_total)
	pm0=$(metric "$PPORT" prometheus_rule_group_iterations_missed_total)
	pc0=$(cpu "$ppid")
	sleep "$DURATION"
	ic1=$(cpu "$ipid")
	ie1=$(metric "$IPORT" prometheus_rule_evaluations_total)
	im1=$(metric "$IPORT" prometheus_rule_group_iterations_missed_total)
	pc1=$(cpu "$ppid")
	pe1=$(metric "$PPORT" prometheus_rule_evaluations_total)
	pm1=$(metric "$PPORT" prometheus_rule_group_iterations_missed_total)
	local ihwm phwm
	ihwm=$(awk '/VmHWM/ {print $2}' "/proc/$ipid/status")
	phwm=$(awk '/VmHWM/ {print $2}' "/proc/$ppid/status")
	kill "$ipid" "$ppid"
	wait "$ipid" "$ppid" 2>/dev/null || true
	echo "$mode inferdb $((ic1 - ic0)) $((${ie1:-0} - ${ie0:-0})) $((${im1:-0} - ${im0:-0})) $ihwm" >>"$W/results.out"
	echo "$mode prometheus $((pc1 - pc0)) $((${pe1:-0} - ${pe0:-0})) $((${pm1:-0} - ${pm0:-0})) $phwm" >>"$W/results.out"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run with
echo "load average between: $(cut -d' ' -f1-3 /proc/loadavg)"
run without
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

GROUPS_N=$(((RECORD + 99) / 100 + (ALERTS + 99) / 100))
RULES_N=$((RECORD + ALERTS))
echo
echo "$SERVERS targets scraped every ${SCRAPE}s; $RECORD recording + $ALERTS alerting rules in $GROUPS_N groups every ${EVAL}s${DISTINCT:+ (a distinct selector per rule)}; ${DURATION}s measured after ${WARMUP}s"
printf '%-11s %10s %9s %8s %7s %9s %7s %7s\n' server cpu_with_s cpu_wo_s added_s rounds ms/round missed rss_MB
for srv in inferdb prometheus; do
	read -r _ _ cw ew mw hw < <(grep "^with $srv " "$W/results.out")
	read -r _ _ co _ _ _ < <(grep "^without $srv " "$W/results.out")
	awk -v s="$srv" -v cw="$cw" -v co="$co" -v ev="$ew" -v n="$RULES_N" -v clk="$CLK" -v hw="$hw" -v m="$mw" 'BEGIN {
		r = ev / n
		a = (cw - co) / clk
		printf "%-11s %10.2f %9.2f %8.2f %7.2f %9.1f %7d %7.1f\n", s, cw / clk, co / clk, a, r, (r > 0 ? 1000 * a / r : 0), m, hw / 1024
	}' | tee -a "$W/table.out"
done
awk '$1 == "inferdb" {ia = $4; ir = $6} $1 == "prometheus" {pa = $4; pr = $6}
	END {printf "inferdb / prometheus: added CPU %.2fx, CPU per round %.2fx\n", (pa > 0 ? ia / pa : 0), (pr > 0 ? ir / pr : 0)}' "$W/table.out"
