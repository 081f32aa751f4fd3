#!/usr/bin/env bash
# CLI import/export benchmark (run by hand; figures in BENCHMARKS.md, "CLI import/export").
#
#   benches/export.sh [WORKDIR]        (default /tmp/inferdb-export-bench; needs ~12 GB free)
#
# 1. generates 24 h x 8 simulated vLLM servers (15 s scrapes, 4224 series, 24.3 M samples,
#    3.7 GB) as one OpenMetrics file (kept in WORKDIR for later runs);
# 2. imports it with `inferdb import openmetrics` and with
#    `promtool tsdb create-blocks-from openmetrics` (Prometheus 2.42; apt-get install -y
#    prometheus), each after reading the file once so both find it in the page cache;
# 3. exports the whole store with `inferdb export parquet` (one file per metric; and
#    --partition-by day) and `inferdb export csv`.
# Each step prints wall and CPU seconds (user + sys, from GNU time; the figures to compare on a
# shared, loaded machine), peak RSS and samples (rows) per second of wall and of CPU time.
# SKIP_PROMTOOL=1 leaves promtool out; SKIP_IMPORT=1 reuses WORKDIR/data.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/inferdb-export-bench}
T=${CARGO_TARGET_DIR:-target}
mkdir -p "$W"
cargo build --release --bin inferdb --example gen_openmetrics
BIN=$T/release/inferdb
OM=$W/vllm-24h.om
[ -s "$OM" ] || "$T/release/examples/gen_openmetrics" "$OM" 8 24 15
ls -l "$OM"
SAMPLES=$(grep -vc '^#' "$OM")
echo "samples in the file: $SAMPLES"

# measure NAME COUNT CMD...: runs CMD under GNU time and prints one summary line.
measure() {
  local name=$1 count=$2
  shift 2
  /usr/bin/time -o "$W/time.txt" -f '%e %U %S %M' "$@" >"$W/out.txt" 2>&1 || {
    cat "$W/out.txt"
    return 1
  }
  read -r wall user sys rss <"$W/time.txt"
  awk -v n="$name" -v c="$count" -v w="$wall" -v u="$user" -v s="$sys" -v r="$rss" 'BEGIN {
    cpu = u + s
    printf "%-34s wall %7.2f s  cpu %7.2f s (user %.2f, sys %.2f)  max RSS %7.1f MiB  %6.2f M/s wall  %6.2f M/s per CPU-s\n",
      n, w, cpu, u, s, r / 1024, c / w / 1e6, c / cpu / 1e6 }'
}

if [ -z "${SKIP_IMPORT:-}" ]; then
  cat "$OM" >/dev/null
  rm -rf "$W/data"
  measure "inferdb import openmetrics" "$SAMPLES" "$BIN" import openmetrics --quiet --data-dir "$W/data" "$OM"
  head -1 "$W/out.txt"
  if [ -z "${SKIP_PROMTOOL:-}" ] && command -v promtool >/dev/null; then
    cat "$OM" >/dev/null
    rm -rf "$W/prom" && mkdir -p "$W/prom"
    measure "promtool create-blocks-from ($(promtool --version 2>&1 | head -1 | awk '{print $3}'))" \
      "$SAMPLES" promtool tsdb create-blocks-from openmetrics "$OM" "$W/prom"
  fi
fi

"$BIN" tsdb stats --data-dir "$W/data" --top 3
ROWS=$SAMPLES

for run in 1 2; do
  rm -rf "$W/out"
  measure "export parquet, per metric (run $run)" "$ROWS" "$BIN" export parquet --quiet --data-dir "$W/data" \
    --match '{__name__=~".+"}' --start 0 --end now --out "$W/out"
  head -1 "$W/out.txt"
done
du -sh "$W/out"
rm -rf "$W/out-day"
measure "export parquet --partition-by day" "$ROWS" "$BIN" export parquet --quiet --data-dir "$W/data" \
  --match '{__name__=~".+"}' --start 0 --end now --partition-by day --out "$W/out-day"
rm -f "$W/all.parquet"
measure "export parquet, one file" "$ROWS" "$BIN" export parquet --quiet --data-dir "$W/data" \
  --match '{__name__=~".+"}' --start 0 --end now --out "$W/all.parquet"
measure "export csv, one file" "$ROWS" "$BIN" export csv --quiet --overwrite --data-dir "$W/data" \
  --match '{__name__=~".+"}' --start 0 --end now --out "$W/all.csv"
ls -l "$W/all.parquet" "$W/all.csv"
rm -f "$W/all.csv"
