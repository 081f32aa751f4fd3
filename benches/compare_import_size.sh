#!/usr/bin/env bash
# Bytes per sample of an imported history, inferdb beside Prometheus 2.42 (and VictoriaMetrics):
# 24 h x 8 simulated vLLM servers at 15 s (gen_openmetrics), imported
#   - by `inferdb import openmetrics` (2 h blocks, then compacted as history: histogram groups),
#   - by `promtool tsdb create-blocks-from openmetrics --max-block-duration=24h`,
#   - with VM=1, into `victoria-metrics` through /api/v1/import/prometheus (timestamps in ms),
#     measured after /internal/force_flush, /internal/force_merge of the month and a minute of
#     background merges;
# then prints each whole data folder's bytes (du -sb), B/sample and the ratio to Prometheus,
# inferdb's bytes by kind of series (`workload_db classes`) and its decode speed through the
# querier (`workload_db decode`: every series, one low `le`, `le="+Inf"`, `_count`, all buckets).
#
#   benches/compare_import_size.sh [WORKDIR]     (default /tmp/inferdb-import-size; ~5 GB free)
#
# IDB=path/to/inferdb (default target/release/inferdb), GEN=path/to/gen_openmetrics,
# SERVERS/HOURS (default 8/24), VM=1 adds VictoriaMetrics (force-merged, then VM_MERGE_S seconds,
# default 60, to finish its merges), SKIP_PROMTOOL=1 reuses WORKDIR/prom.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/inferdb-import-size}
T=${CARGO_TARGET_DIR:-target}
IDB=${IDB:-$T/release/inferdb}
GEN=${GEN:-$T/release/examples/gen_openmetrics}
SERVERS=${SERVERS:-8}
HOURS=${HOURS:-24}
mkdir -p "$W"
[ -x "$IDB" ] && [ -x "$GEN" ] || cargo build --release --bin inferdb --example gen_openmetrics
cargo build --release -p inferdb-storage --example workload_db
WDB=$T/release/examples/workload_db
OM=$W/vllm-${HOURS}h-${SERVERS}.om
[ -s "$OM" ] || "$GEN" "$OM" "$SERVERS" "$HOURS" 15
SAMPLES=$(grep -vc '^#' "$OM")
echo "samples in the file: $SAMPLES"

rm -rf "$W/inferdb"
/usr/bin/time -f 'inferdb import: %e s wall, %U s user, %S s sys, %M KiB max RSS' \
	"$IDB" import openmetrics --quiet --data-dir "$W/inferdb" "$OM" | tail -4
if [ -z "${SKIP_PROMTOOL:-}" ]; then
	rm -rf "$W/prom" && mkdir -p "$W/prom"
	/usr/bin/time -f 'promtool: %e s wall, %U s user, %S s sys, %M KiB max RSS' \
		promtool tsdb create-blocks-from openmetrics -q --max-block-duration=24h "$OM" "$W/prom"
fi
if [ "${VM:-0}" = 1 ]; then
	rm -rf "$W/vm"
	PORT=18428
	victoria-metrics -storageDataPath="$W/vm" -retentionPeriod=100y \
		-httpListenAddr=127.0.0.1:$PORT -loggerLevel=WARN >"$W/vm.log" 2>&1 &
	VMPID=$!
	trap 'kill $VMPID 2>/dev/null || true' EXIT
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
	# OpenMetrics seconds with 3 decimals -> Prometheus text milliseconds
	grep -v '^#' "$OM" | sed -E 's/ ([0-9]+)\.([0-9]{3})$/ \1\2/' |
		curl -sf -X POST -T - -H 'Content-Type: text/plain' "http://127.0.0.1:$PORT/api/v1/import/prometheus"
	curl -sf "http://127.0.0.1:$PORT/internal/force_flush" >/dev/null
	# its smallest form: every part of the history's month merged into as few as it can
	curl -sf "http://127.0.0.1:$PORT/internal/force_merge?partition_prefix=${VM_MONTH:-2026_12}" >/dev/null ||
		echo "VictoriaMetrics force_merge of ${VM_MONTH:-2026_12} failed: its figure is not force-merged" >&2
	sleep "${VM_MERGE_S:-60}"
	curl -sf "http://127.0.0.1:$PORT/internal/force_flush" >/dev/null
	kill $VMPID && wait $VMPID 2>/dev/null || true
	trap - EXIT
fi

# with SKIP_PROMTOOL=1 and no earlier Prometheus store, the ratios are left out
PROM=$( [ -d "$W/prom" ] && du -sb "$W/prom" | cut -f1 || echo 0)
for s in inferdb prom vm; do
	[ -d "$W/$s" ] || continue
	b=$(du -sb "$W/$s" | cut -f1)
	awk -v s="$s" -v b="$b" -v n="$SAMPLES" -v p="$PROM" \
		'BEGIN { printf "%-8s %12d bytes  %.3f B/sample", s, b, b / n
		         if (p > 0) printf "  %.3f of Prometheus", b / p
		         printf "\n" }'
done
"$WDB" classes "$W/inferdb"
"$WDB" decode "$W/inferdb" 5
