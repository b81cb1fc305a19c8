#!/usr/bin/env bash
# The main job: the ingest on its embedded SQLite default, and a captured
# sandbox session whose timeline is then shown. Safe to run again.
#
#   bash scripts/run.sh      (as root, or as a user with sudo)
#
# Leaves the ingest running (ws://127.0.0.1:7433, store in the state dir) so
# you can go on with `build/sandglass ...`; `kill $(cat <state>/ingest.pid)`
# stops it. The uplink daemon (sandglass-uplink) exits by itself 30 s after
# the session.
set -euo pipefail
# Root is needed (namespaces, cgroups, Debian packages): as root this runs
# as it is (a fresh Debian has no sudo); as a user it goes through sudo.
if [ "$(id -u)" != 0 ]; then exec sudo -E bash "$0" "$@"; fi
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh >/dev/null
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
SG=$PWD/build/sandglass
state=${SANDGLASS_STATE_DIR:-/var/lib/sandglass}
mkdir -p "$state"

# 1. The ingest (WebSocket + HTTP on one port, SQLite in the state dir).
if ! curl -sf http://127.0.0.1:7433/healthz >/dev/null 2>&1; then
  nohup "$SG" ingest > "$state/ingest.log" 2>&1 &
  echo $! > "$state/ingest.pid"
  for _ in $(seq 50); do curl -sf http://127.0.0.1:7433/healthz >/dev/null 2>&1 && break; sleep 0.1; done
fi
echo "== ingest: $(head -1 "$state/ingest.log" 2>/dev/null || echo 'already running')"

# 2. A captured session: a learner works on a task inside a sandbox.
id=$("$SG" create --learner demo-learner --task hello-world --memory 256M --pids 128 --timeout 30)
echo "== sandbox $id (learner demo-learner, task hello-world)"
run() { echo "\$ $*"; "$SG" exec "$id" -- /bin/sh -c "$*" || true; }
run 'printf "def add(a, b):\n    return a + b\n" > calc.py'
run 'printf "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n" > test_calc.py'
run 'python3 -m unittest -v test_calc'
run 'sed -i "s/a + b/a - b + 0/" calc.py'
run 'python3 -m unittest test_calc'
run 'mkdir -p notes && echo "remember to check edge cases" > notes/todo.txt && mv notes/todo.txt notes/TODO'
run 'cat /etc/hostname; id -un; ls /'
echo "== rolling the workspace back to before the sed (shell-made changes included)"
ckpt=$("$SG" checkpoints "$id" --json | python3 -c 'import json,sys; print([c["id"] for c in json.load(sys.stdin) if "sed -i" in c["label"]][0])')
"$SG" rollback "$id" --to "$ckpt" --yes
run 'cat calc.py; ls'
"$SG" destroy "$id"

# 3. The timeline, as the ingest stored it.
sleep 0.3
echo "== timeline of $id"
"$SG" events --sandbox "$id"
