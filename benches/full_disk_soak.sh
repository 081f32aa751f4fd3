#!/usr/bin/env bash
# Full-disk soak (issue #13): `inferdb serve` scrapes four simulated vLLM servers every second
# with its data folder on a 48 MB tmpfs and 2 s blocks (so blocks are cut and compacted all
# the time: compaction ranges are 2 s x 3^k); each round starts `inferdb import` into another
# folder of the same file system, fills the file system after a random 1-6 s, holds it full
# for 2-5 s, frees it, waits for scraping to resume, kills the server with SIGKILL, restarts
# it and compares every sample a query returned before the kill; then stops it, runs
# `inferdb tsdb check` and starts it again. Each round's line counts the compactions done and
# failed (on the full disk) and says whether the import was refused.
#
# Needs root (it mounts the tmpfs). Usage: benches/full_disk_soak.sh [ROUNDS] [SEED]
# Prints one line per round and a summary ("samples lost", "tsdb check clean N/N", rounds
# where the fill failed a compaction / refused the import).
set -euo pipefail
cd "$(dirname "$0")/.."
export INFERDB_SOAK_ROUNDS="${1:-10}"
if [ -n "${2:-}" ]; then export INFERDB_SOAK_SEED="$2"; fi
exec cargo test -p inferdb --test serve_full_disk -- --ignored soak --nocapture --test-threads 1
