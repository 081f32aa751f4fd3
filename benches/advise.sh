#!/usr/bin/env bash
# `inferdb advise` over 24 h of 8 vLLM servers (run by hand; figures in BENCHMARKS.md,
# "Advise and compare").
#
#   benches/advise.sh [WORKDIR]        (default /tmp/inferdb-advise-bench; needs ~8 GB free)
#
# 1. generates 24 h x 8 simulated vLLM servers (15 s scrapes, every family of the vLLM page:
#    4224 series, 24.3 M samples) with examples/gen_openmetrics.rs (kept in WORKDIR; OM=FILE
#    reuses a file benches/export.sh wrote);
# 2. imports it with `inferdb import openmetrics` into WORKDIR/data (kept; delete to redo);
# 3. runs `inferdb advise --data-dir WORKDIR/data` over the whole day RUNS times (default 5),
#    JSON and table, and `inferdb compare` of the first and second 12 h by instance, printing
#    wall and CPU seconds (GNU time) and peak RSS of each run, and the load average before.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/inferdb-advise-bench}
T=${CARGO_TARGET_DIR:-target}
RUNS=${RUNS:-5}
mkdir -p "$W"
cargo build --release --bin inferdb --example gen_openmetrics
BIN=$T/release/inferdb
OM=${OM:-$W/vllm-24h.om}
[ -s "$OM" ] || "$T/release/examples/gen_openmetrics" "$OM" 8 24 15
[ -d "$W/data" ] || "$BIN" import openmetrics --quiet --data-dir "$W/data" "$OM"
START=2026-12-01T00:00:00Z
MID=2026-12-01T12:00:00Z
END=2026-12-02T00:00:00Z

measure() {
  local name=$1
  shift
  /usr/bin/time -o "$W/time.txt" -f '%e %U %S %M' "$@" >"$W/out.txt" 2>"$W/err.txt" || {
    cat "$W/err.txt"
    return 1
  }
  read -r wall user sys rss <"$W/time.txt"
  printf '%-26s wall %6.2f s  cpu %6.2f s (user %.2f, sys %.2f)  max RSS %7.1f MiB\n' \
    "$name" "$wall" "$(echo "$user + $sys" | bc)" "$user" "$sys" "$(echo "$rss / 1024" | bc -l)"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
for i in $(seq 1 "$RUNS"); do
  measure "advise json #$i" "$BIN" advise --data-dir "$W/data" --start $START --end $END --format json
done
echo "findings: $(grep -o '"kind":"[a-z_]*"' "$W/out.txt" | sort | uniq -c | tr '\n' ' ')"
measure "advise table" "$BIN" advise --data-dir "$W/data" --start $START --end $END
measure "compare by instance" "$BIN" compare --data-dir "$W/data" --a $START..$MID --b $MID..$END --by instance --format json
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
