#!/usr/bin/env bash
# Ingest throughput into PostgreSQL: the real `sandglassd ingest --store
# postgresql://...` next to a raw batched INSERT ceiling into the same
# server, in one run, on the same events (bench_ingest in PostgreSQL mode).
# A throwaway cluster (scripts/pg-server.sh) is started and stopped here.
#
# usage: bench/bench_ingest_pg.sh [BUILD_DIR [EVENTS [CONNS]]]
#        (default build, 200000, 32; writes bench/results/ingest_pg.json)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
events=${2:-200000}
conns=${3:-32}

bash scripts/pg-server.sh have || { echo "bench_ingest_pg: PostgreSQL server not installed" >&2; exit 1; }
ninja -C "$build" sandglassd bench_ingest >/dev/null
dir=$(mktemp -d /tmp/sg-bench-pg-XXXXXX)
chmod 0711 "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
trap 'bash scripts/pg-server.sh stop "$dir" "$port" || true; rm -rf "$dir"' EXIT
url=$(bash scripts/pg-server.sh start "$dir" "$port")
echo "server: $url (fsync on, synchronous_commit on: commits are durable)"
SG_BENCH_PG=$url "$build/bench_ingest" "$build/sandglassd" "$events" "$conns"
