#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests and benches.
#
#   pg-server.sh start DIR PORT   initdb (first time) + start; prints the URL
#   pg-server.sh stop DIR PORT    fast shutdown (no-op if not running)
#   pg-server.sh kill DIR PORT    immediate shutdown (like a crash: backends
#                                 die at once, crash recovery on next start)
#   pg-server.sh have             exit 0 if the server binaries are installed
#
# The cluster lives in DIR/pgdata, listens on 127.0.0.1:PORT and on a unix
# socket in DIR/pgsock only, with trust auth (local tests only). It runs as
# the `postgres` OS user when we are root (initdb refuses root); DIR is made
# traversable (o+x) for that user.
set -euo pipefail

PGBIN=${PGBIN:-}
if [ -z "$PGBIN" ]; then
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && PGBIN=$d
  done
fi

cmd=${1:-}
if [ "$cmd" = have ]; then
  [ -n "$PGBIN" ] && [ -x "$PGBIN/pg_ctl" ] && [ -x "$PGBIN/postgres" ]
  exit
fi
[ $# -eq 3 ] || { echo "usage: pg-server.sh start|stop|kill DIR PORT | have" >&2; exit 2; }
dir=$(realpath -m "$2")
port=$3
[ -n "$PGBIN" ] || { echo "pg-server: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 3; }

if [ "$(id -u)" -eq 0 ]; then
  as_pg() { runuser -u postgres -- "$@"; }
  owner=postgres
else
  as_pg() { "$@"; }
  owner=$(id -un)
fi

data=$dir/pgdata
sock=$dir/pgsock
log=$dir/pg.log

case "$cmd" in
start)
  mkdir -p "$dir"
  chmod o+x "$dir"
  # The server user must reach DIR: say so rather than fail deep in initdb.
  if [ "$owner" != "$(id -un)" ] && ! runuser -u "$owner" -- test -x "$dir"; then
    echo "pg-server: user $owner cannot reach $dir: make its parent directories traversable (chmod o+x)" >&2
    exit 1
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$sock"
    chown "$owner" "$sock"
    # In a test run (SG_TEST_ROOT) the first cluster is made once, as a
    # template, and copied (0.7 s) for the others: initdb took 4-10 s each.
    # -N: no fsync of a cluster thrown away with the run.
    if [ -n "${SG_TEST_ROOT:-}" ] && [ -d "$SG_TEST_ROOT" ]; then
      tmpl=$SG_TEST_ROOT/pg-template
      (
        flock 9
        if [ ! -f "$tmpl/data/PG_VERSION" ]; then
          rm -rf "$tmpl"
          mkdir -p "$tmpl/data"
          chmod o+x "$tmpl"
          chown "$owner" "$tmpl/data"
          chmod 0700 "$tmpl/data"
          as_pg "$PGBIN/initdb" -N -D "$tmpl/data" -U postgres --auth=trust --encoding=UTF8 \
            --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
            { cat "$dir/initdb.log" >&2; rm -rf "$tmpl"; exit 1; }
        fi
      ) 9>"$SG_TEST_ROOT/pg-template.lock" || exit 1
      cp -a "$tmpl/data" "$data"
    else
      mkdir -p "$data"
      chown "$owner" "$data"
      chmod 0700 "$data"
      as_pg "$PGBIN/initdb" -N -D "$data" -U postgres --auth=trust --encoding=UTF8 \
        --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    fi
  fi
  touch "$log" && chown "$owner" "$log"
  # In a test run, no fsync: an immediate shutdown (kill) still loses
  # nothing the server acknowledged (a commit's WAL is still written to
  # the page cache, which survives it; only a host crash would not). A
  # bench measures the real, fsynced server.
  opts="-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$sock"
  if [ -n "${SG_TEST_ROOT:-}" ]; then
    opts="$opts -c fsync=off -c full_page_writes=off"
  fi
  as_pg "$PGBIN/pg_ctl" -D "$data" -l "$log" -w -t 60 start -o "$opts" \
    >/dev/null || { tail -20 "$log" >&2; exit 1; }
  echo "postgresql://postgres@127.0.0.1:$port/postgres"
  ;;
stop | kill)
  [ -f "$data/postmaster.pid" ] || exit 0
  mode=fast
  [ "$cmd" = kill ] && mode=immediate
  as_pg "$PGBIN/pg_ctl" -D "$data" -m "$mode" -w -t 60 stop >/dev/null
  ;;
*)
  echo "usage: pg-server.sh start|stop|kill DIR PORT | have" >&2
  exit 2
  ;;
esac
