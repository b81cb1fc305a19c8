#!/usr/bin/env bash
# Runs every benchmark in turn (quiet machine wanted) and prints where the
# figures went. Not part of the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null && ninja -C build bench_ingest bench_watch bench_checkpoint bench_seccomp bench_stream_reader >/dev/null
mkdir -p bench/results
run() { # the log is named after the bench (the first argument naming one)
  local name; name=$(printf '%s\n' "$@" | grep -m1 bench_ | xargs basename | sed 's/\..*//')
  echo "== $*"; "$@" > "bench/results/$name.log" 2>&1 || echo "   (failed, see bench/results/$name.log)"
}
run python3 bench/bench_sandbox.py --build build
run python3 bench/bench_latency.py --build build
run python3 bench/bench_kill.py --build build
run python3 bench/bench_rollback.py --build build
run python3 bench/bench_shell.py --build build
run python3 bench/bench_metrics.py --build build
run build/bench_ingest build/sandglassd
run build/bench_watch
run build/bench_checkpoint
run build/bench_seccomp
ls -la bench/results/
