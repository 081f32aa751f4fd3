#!/usr/bin/env bash
# Full-disk soak (issue #13): `inferdb serve` scrapes four simulated vLLM servers every second
# with its data folder on a 48 MB tmpfs and 2 s blocks (so blocks are cut and compacted all
# the time); each round fills the file system after a random 1-6 s, holds it full for 2-5 s,
# frees it, waits for scraping to resume, kills the server with SIGKILL, restarts it and
# compares every sample a query returned before the kill; then stops it, runs
# `inferdb tsdb check` and starts it again. Every third round `inferdb import` writes blocks
# into another folder of the same file system while it fills.
#
# Needs root (it mounts the tmpfs). Usage: benches/full_disk_soak.sh [ROUNDS] [SEED]
# Prints one line per round and a summary ("samples lost", "tsdb check clean N/N").
set -euo pipefail
cd "$(dirname "$0")/.."
export INFERDB_SOAK_ROUNDS="${1:-10}"
if [ -n "${2:-}" ]; then export INFERDB_SOAK_SEED="$2"; fi
exec cargo test -p inferdb --test serve_full_disk -- --ignored soak --nocapture --test-threads 1
