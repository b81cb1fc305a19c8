#!/usr/bin/env bash
# Runs every test: unit and integration tests in the plain build and in the
# ASan+UBSan build, the unit tests under valgrind, and each fuzz target for
# a short run. Prints per-program results, every skipped check with its
# reason, and ends with "N passed, N failed, N skipped" (counted over the
# TAP checks inside each program).
#
# With CI=true (as .ci/run runs it) a skipped check is a failure unless its
# reason is listed in tests/allowed-skips.txt: a green CI means every
# required suite ran. Any sanitizer report from any process (the CLI, the
# supervisors, the workers, the daemons, init) fails the run.
set -uo pipefail
# Root is needed (namespaces, cgroups, Debian packages): as root this runs
# as it is (a fresh Debian has no sudo); as a user it goes through sudo.
if [ "$(id -u)" != 0 ]; then exec sudo -E bash "$0" "$@"; fi
cd "$(dirname "$0")/.."
root=$(pwd)
strict=()
if [ "${CI:-}" = true ] || [ "${SG_STRICT:-}" = 1 ]; then strict=(--strict); fi

bash scripts/install-deps.sh >/dev/null || { echo "install-deps failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

passed=0; failed=0; skipped=0

# A build directory is (re)made when the options it was set up with differ
# from the ones asked for: a stale build-asan without -Db_sanitize, or a
# build-fuzz made with gcc, would otherwise run the tests unsanitized.
build() { # dir, extra meson args...
  local dir=$1; shift
  local want="CC=${CC:-cc} $*"
  if [ -f "$dir/build.ninja" ] && [ "$(cat "$dir/.sg-setup" 2>/dev/null)" != "$want" ]; then
    echo "  [build] $dir was set up with other options: making it anew"
    rm -rf "$dir"
  fi
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >/dev/null || return 1
    printf '%s' "$want" > "$dir/.sg-setup"
  fi
  ninja -C "$dir" >/dev/null || { ninja -C "$dir" | tail -40; return 1; }
}

# The option a build dir really has (meson's own record, not our stamp).
build_option() { # dir, option
  meson introspect --buildoptions "$1" 2>/dev/null |
    python3 -c "import json,sys; print(next((str(o['value']) for o in json.load(sys.stdin) if o['name']=='$2'), ''))"
}

# The browser terminal's page needs xterm.js (web/package.json), which
# `sandglass serve` serves from web/node_modules.
if [ -f web/package.json ] && [ ! -d web/node_modules ]; then
  if ! (cd web && npm install --no-audit --no-fund --silent >/dev/null 2>&1); then
    echo "  [setup] npm install in web failed: the browser terminal tests cannot run"
    failed=$((failed + 1))
  fi
fi
# Node peers for the integration tests (ws, MCP Inspector, playwright-core,
# asciinema-player): installed anew when one of them is missing (an older
# checkout's node_modules lacks the ones added since).
if [ -f tests/node/package.json ] && { [ ! -d tests/node/node_modules ] ||
     [ ! -d tests/node/node_modules/playwright-core ] ||
     [ ! -d tests/node/node_modules/asciinema-player ]; }; then
  if ! (cd tests/node && npm install --no-audit --no-fund --silent >/dev/null 2>&1); then
    echo "  [setup] npm install in tests/node failed: the Node peer tests cannot run"
    failed=$((failed + 1))
  fi
fi

run_suite() { # dir, label, meson test args...
  local dir=$1 label=$2
  rm -f "$dir/meson-logs/testlog-$label".*  "$dir/meson-logs/testlog-$label"-*
  meson test -C "$dir" --print-errorlogs --no-rebuild --num-processes 1 --logbase "testlog-$label" "${@:3}" \
    > "$dir/test-output-$label.txt" 2>&1
  # meson appends the wrapper's name to the log's name
  local log base
  log=$(ls -t "$dir/meson-logs/testlog-$label"*.json 2>/dev/null | head -1)
  base=${log%.json}
  if [ -n "$log" ] && [ -f "$log" ]; then
    local out counts p f s
    out=$(python3 scripts/testlog.py "$log" "$label" "${strict[@]}" --allowed tests/allowed-skips.txt)
    counts=$(printf '%s\n' "$out" | tail -1)
    printf '%s\n' "$out" | sed '$d'
    read -r p f s <<<"$counts"
    if [ "$f" != 0 ]; then
      grep -E '^(not ok|#)' "$base.txt" | head -80
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  else
    failed=$((failed + 1))
    tail -40 "$dir/test-output-$label.txt"
  fi
}

# Sanitizer reports of every process go to files in this directory
# (log_path), so that a report of a detached supervisor or daemon, or one
# written at exit after its log was deleted, still fails the run; the
# supervisors' own logs are archived there before a destroy deletes them
# (SANDGLASS_LOG_ARCHIVE, read by the state module).
san_dir="$root/build-asan-reports" # per checkout: two runs side by side keep apart
check_sanitizer_reports() { # label
  local n=0 f
  for f in "$san_dir"/report.* ; do
    [ -s "$f" ] || continue
    n=$((n + 1)); echo "  [$1] SANITIZER REPORT $f:"; head -40 "$f"
  done
  for f in "$san_dir"/logs/*.log ; do
    [ -f "$f" ] || continue
    if grep -qE 'Sanitizer|runtime error:|Can.t open file' "$f"; then
      n=$((n + 1)); echo "  [$1] SANITIZER REPORT in a supervisor log $f:"
      grep -E -A20 'Sanitizer|runtime error:|Can.t open file' "$f" | head -40
    fi
  done
  failed=$((failed + n))
  [ "$n" = 0 ] && echo "  [$1] no sanitizer report from any process"
}

if build build; then run_suite build plain; else failed=$((failed + 1)); echo "plain build failed"; fi

if build build-asan -Db_sanitize=address,undefined -Db_lundef=false &&
   [ "$(build_option build-asan b_sanitize)" = "address,undefined" ]; then
  rm -rf "$san_dir"; mkdir -p "$san_dir/logs"; chmod 1777 "$san_dir" "$san_dir/logs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:log_path=$san_dir/report \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$san_dir/report \
  SANDGLASS_LOG_ARCHIVE=$san_dir/logs \
    run_suite build-asan asan
  check_sanitizer_reports asan
else
  failed=$((failed + 1)); echo "sanitizer build failed (or is not sanitized: b_sanitize=$(build_option build-asan b_sanitize))"
fi

# Unit tests under valgrind: no leaks, no invalid accesses. The suite
# no-valgrind is left out: valgrind does not emulate seccomp(2), which
# test_execnotify needs (it runs in the plain and ASan builds).
if [ -f build/build.ninja ]; then
  run_suite build valgrind --suite unit --no-suite no-valgrind \
    --wrapper "valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --trace-children=no"
fi

# Fuzz targets (clang, libFuzzer + ASan + UBSan, no recovery): build, then
# a short run each; a crash or any sanitizer report fails it.
if CC=clang build build-fuzz -Dfuzz=true && [ "$(build_option build-fuzz fuzz)" = True ]; then
  nfuzz=0
  for f in build-fuzz/fuzz/fuzz_*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    nfuzz=$((nfuzz + 1))
    name=$(basename "$f")
    mkdir -p "build-fuzz/corpus-$name"
    seeds="fuzz/corpus/${name#fuzz_}"
    [ -d "$seeds" ] && cp -n "$seeds"/* "build-fuzz/corpus-$name/" 2>/dev/null
    if UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
       "$f" -max_total_time="${SG_FUZZ_SECONDS:-15}" -artifact_prefix="build-fuzz/$name-" \
            "build-fuzz/corpus-$name" >"build-fuzz/$name.log" 2>&1 &&
       ! grep -qE 'runtime error:|Sanitizer' "build-fuzz/$name.log"; then
      passed=$((passed + 1)); echo "  [fuzz] OK       $name ($(grep -o 'Done [0-9]* runs' "build-fuzz/$name.log"))"
    else
      failed=$((failed + 1)); echo "  [fuzz] FAIL     $name"; tail -30 "build-fuzz/$name.log"
    fi
  done
  if [ "$nfuzz" = 0 ]; then failed=$((failed + 1)); echo "  [fuzz] FAIL     no fuzz target was built"; fi
  # Every target in fuzz/ was built and run (a target left out of
  # fuzz/meson.build would otherwise never run).
  for src in fuzz/fuzz_*.c; do
    t=$(basename "$src" .c)
    if [ ! -x "build-fuzz/fuzz/$t" ]; then failed=$((failed + 1)); echo "  [fuzz] FAIL     $t: in fuzz/ but not built"; fi
  done
  rm -f /dev/shm/sg-fuzz-* 2>/dev/null  # what a crashed target left behind
else
  failed=$((failed + 1)); echo "fuzz build failed (or is not a fuzz build)"
fi

echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" = 0 ]
