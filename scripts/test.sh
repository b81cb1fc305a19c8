#!/usr/bin/env bash
# Runs every test twice: in the plain build and in the ASan+UBSan build.
# Prints per-test results and ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash scripts/install-deps.sh >/dev/null || { echo "install-deps failed"; echo "0 passed, 1 failed"; exit 1; }

build() { # dir, extra meson args...
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >/dev/null || return 1
  fi
  ninja -C "$dir" >/dev/null || { ninja -C "$dir" | tail -40; return 1; }
}

# Node peers for the integration tests (ws, MCP inspector): installed once.
if [ -f tests/node/package.json ] && [ ! -d tests/node/node_modules ] && command -v npm >/dev/null; then
  (cd tests/node && npm install --no-audit --no-fund --silent >/dev/null 2>&1) || echo "warning: npm install failed; node peer tests will skip"
fi

passed=0; failed=0
run_suite() { # dir, label
  local dir=$1 label=$2
  rm -f "$dir/meson-logs/testlog-$label".*  "$dir/meson-logs/testlog-$label"-*
  meson test -C "$dir" --print-errorlogs --no-rebuild --num-processes 1 --logbase "testlog-$label" "${@:3}" \
    > "$dir/test-output-$label.txt" 2>&1
  # meson appends the wrapper's name to the log's name
  local log base
  log=$(ls -t "$dir/meson-logs/testlog-$label"*.json 2>/dev/null | head -1)
  base=${log%.json}
  if [ -n "$log" ] && [ -f "$log" ]; then
    local out counts p f
    out=$(python3 scripts/testlog.py "$log" "$label")
    counts=$(printf '%s\n' "$out" | tail -1)
    printf '%s\n' "$out" | sed '$d'
    p=${counts% *}; f=${counts#* }
    if [ "$f" != 0 ]; then
      grep -E '^(not ok|#)' "$base.txt" | head -80
    fi
    passed=$((passed + p)); failed=$((failed + f))
  else
    failed=$((failed + 1))
    tail -40 "$dir/test-output-$label.txt"
  fi
}

if build build; then run_suite build plain; else failed=$((failed + 1)); echo "plain build failed"; fi
if build build-asan -Db_sanitize=address,undefined -Db_lundef=false; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-asan asan
else
  failed=$((failed + 1)); echo "sanitizer build failed"
fi
# Unit tests under valgrind: no leaks, no invalid accesses.
if [ -f build/build.ninja ]; then
  run_suite build valgrind --suite unit \
    --wrapper "valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --trace-children=no"
fi
# Fuzz targets (clang, libFuzzer + ASan + UBSan): build, then a short run
# each; a crash or a sanitizer report fails it.
if CC=clang build build-fuzz -Dfuzz=true; then
  for f in build-fuzz/fuzz/fuzz_*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    name=$(basename "$f")
    mkdir -p "build-fuzz/corpus-$name"
    seeds="fuzz/corpus/${name#fuzz_}"
    [ -d "$seeds" ] && cp -n "$seeds"/* "build-fuzz/corpus-$name/" 2>/dev/null
    if "$f" -max_total_time="${SG_FUZZ_SECONDS:-15}" "build-fuzz/corpus-$name" >"build-fuzz/$name.log" 2>&1; then
      passed=$((passed + 1)); echo "  [fuzz] OK       $name ($(grep -o 'Done [0-9]* runs' "build-fuzz/$name.log"))"
    else
      failed=$((failed + 1)); echo "  [fuzz] FAIL     $name"; tail -30 "build-fuzz/$name.log"
    fi
  done
else
  failed=$((failed + 1)); echo "fuzz build failed"
fi

echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
