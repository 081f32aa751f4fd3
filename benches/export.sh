#!/usr/bin/env bash
# Import/export benchmark for the CLI (run manually; see BENCHMARKS.md, "CLI import/export").
#
#   benches/export.sh [WORKDIR]        (default /tmp/inferdb-export-bench)
#
# 1. generates 24 h x 8 simulated vLLM servers (15 s scrapes) as one OpenMetrics file;
# 2. imports it with `inferdb import openmetrics` and, when installed, with
#    `promtool tsdb create-blocks-from openmetrics` (apt-get install -y prometheus);
# 3. exports everything with `inferdb export parquet` (and csv), reporting rows/s and peak RSS
#    (GNU time's "Maximum resident set size").
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/inferdb-export-bench}
T=${CARGO_TARGET_DIR:-target}
mkdir -p "$W"
cargo build --release --bin inferdb --example gen_openmetrics
BIN=$T/release/inferdb
[ -s "$W/vllm-24h.om" ] || "$T/release/examples/gen_openmetrics" "$W/vllm-24h.om" 8 24 15
ls -l "$W/vllm-24h.om"
TIME="/usr/bin/time -f %e_s_wall_%M_KiB_maxrss"

echo "== inferdb import"
rm -rf "$W/data"
$TIME "$BIN" import openmetrics --quiet --data-dir "$W/data" "$W/vllm-24h.om"

if command -v promtool >/dev/null; then
  echo "== promtool tsdb create-blocks-from openmetrics ($(promtool --version 2>&1 | head -1))"
  rm -rf "$W/prom"
  $TIME promtool tsdb create-blocks-from openmetrics "$W/vllm-24h.om" "$W/prom" >/dev/null
else
  echo "== promtool not installed (apt-get install -y prometheus); skipped"
fi

"$BIN" tsdb stats --data-dir "$W/data" --top 3

for run in 1 2; do
  echo "== inferdb export parquet, one file per metric (run $run)"
  rm -rf "$W/out"
  $TIME "$BIN" export parquet --quiet --data-dir "$W/data" --match '{__name__=~".+"}' \
    --start 0 --end now --out "$W/out"
done
du -sh "$W/out"
echo "== inferdb export parquet --partition-by day"
rm -rf "$W/out-day"
$TIME "$BIN" export parquet --quiet --data-dir "$W/data" --match '{__name__=~".+"}' \
  --start 0 --end now --partition-by day --out "$W/out-day"
echo "== inferdb export csv (one file)"
$TIME "$BIN" export csv --quiet --overwrite --data-dir "$W/data" --match '{__name__=~".+"}' \
  --start 0 --end now --out "$W/all.csv"
