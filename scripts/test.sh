#!/usr/bin/env bash
# Runs every test once for each coverage it gives, and ends with
# "N passed, N failed, N skipped" (counted over the TAP checks inside each
# program), after one line with each part's time.
#
# Which suites run in which build, and why (docs/TESTING.md):
# - ASan+UBSan build: unit, integration and adversarial, in full. Every
#   process the tests start (CLI, supervisors, workers, daemons, init) is
#   sanitized, so this is where a behaviour is checked.
# - plain build: the suite static-e2e only (tests/meson.build names its
#   programs: test_sandbox, test_cli, test_shell, ready_child, exec_fds,
#   test_install): they exercise end to end what only the plain build
#   ships — the static musl CLI, the static-pie init and sandglass-exec,
#   the ready child's program, which the sanitized build does not make, and
#   the build installed into a DESTDIR — plus the unit tests
#   valgrind cannot run (suite no-valgrind) and the lint checks.
# - valgrind: the unit tests of the plain build (uninitialised reads, which
#   ASan does not see; and leaks), so the plain build runs no other unit test.
# - fuzz: built, then each target for SG_FUZZ_SECONDS (15) after its seeds,
#   all alongside the suites (their tests wait on the kernel and on each
#   other much of the time; the fuzz build and targets use the CPU
#   meanwhile), off the run's critical path.
# The plain build's suites and valgrind run in a lane beside the ASan suite,
# one program at a time, niced (as the fuzz runs are) so the ASan suite
# keeps the CPU; the slowest programs start first (slow_tests in
# tests/meson.build). Test programs run SG_TEST_JOBS (2) at a time: each has its own state
# directory, ports, cgroups and temporary files (tests/meson.build lists the
# few that must run alone).
#
# Hermetic: every test lives under this run's own directory SG_TEST_ROOT
# (also TMPDIR), its captured sandboxes stream to a port of its own
# (SANDGLASS_INGEST), and the run ends with scripts/leakcheck.py: a process,
# cgroup, mount, loop device or uid slot this run made and left fails it.
# Two runs side by side (two checkouts) share nothing.
#
# With CI=true (as .ci/run runs it) a skipped check is a failure unless
# tests/allowed-skips.txt excuses its reason in that build: a green CI means
# every required suite ran. Any sanitizer report from any process fails the
# run. Budget: 15 minutes on the 2-core CI machine (docs/TESTING.md).
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
jobs=${SG_TEST_JOBS:-2}
times=()
t_start=$SECONDS
part_start=$SECONDS
part_done() { times+=("$1 $((SECONDS - part_start))s"); part_start=$SECONDS; }

# This run's own directory: every test's files, state directories and
# sandboxes live under it (sgtest.py reads SG_TEST_ROOT; tempfile and
# node's tmpdir() read TMPDIR), and the leak check looks for nothing else.
SG_TEST_ROOT=$(mktemp -d /tmp/sgrun-XXXXXX) || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
chmod 1777 "$SG_TEST_ROOT"  # as /tmp: the rootless tests' users make files here
export SG_TEST_ROOT TMPDIR=$SG_TEST_ROOT
# No operator's config reaches a test: no key's SANDGLASS_* default of the
# caller's is passed on (src/cli/config.c names every one), and no config
# file is read (sandglass.conf(5)); a test sets the ones it means.
for v in $(grep -o 'SANDGLASS_[A-Z_]*' src/cli/config.c | sort -u); do
  unset "$v"
done
export SANDGLASS_CONFIG=none

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

# Node peers for the integration tests (ws, MCP Inspector, playwright-core,
# asciinema-player; jest, vitest and mocha, which test_testcounts.py runs):
# installed anew when one of them is missing (an older
# checkout's node_modules lacks the ones added since).
if [ -f tests/node/package.json ] && { [ ! -d tests/node/node_modules ] ||
     [ ! -d tests/node/node_modules/playwright-core ] ||
     [ ! -d tests/node/node_modules/asciinema-player ] ||
     [ ! -d tests/node/node_modules/jest ] || [ ! -d tests/node/node_modules/vitest ] ||
     [ ! -d tests/node/node_modules/mocha ]; }; then
  if ! (cd tests/node && npm install --no-audit --no-fund --silent >/dev/null 2>&1); then
    echo "  [setup] npm install in tests/node failed: the Node peer tests cannot run"
    failed=$((failed + 1))
  fi
fi

# One meson test run, counted by scripts/testlog.py. It fails when meson
# fails, when testlog.py fails, or when the programs in the log are not
# exactly those `meson test --list` names for the same selection (a killed
# meson, a program that never ran); testlog.py fails a program without a
# TAP plan, with a plan its checks do not match, or that printed nothing.
run_suite() { # dir, label, build kind (plain/asan/valgrind), meson test args...
  local dir=$1 label=$2 kind=$3; shift 3
  rm -f "$dir/meson-logs/testlog-$label".*  "$dir/meson-logs/testlog-$label"-*
  meson test -C "$dir" --no-rebuild --list "$@" 2>/dev/null | grep ' / ' > "$dir/test-list-$label.txt"
  meson test -C "$dir" --print-errorlogs --no-rebuild --num-processes "$jobs" --logbase "testlog-$label" "$@" \
    > "$dir/test-output-$label.txt" 2>&1
  local mstatus=$?
  # meson appends the wrapper's name to the log's name
  local log base
  log=$(ls -t "$dir/meson-logs/testlog-$label"*.json 2>/dev/null | head -1)
  base=${log%.json}
  if [ -z "$log" ] || [ ! -f "$log" ]; then
    failed=$((failed + 1))
    echo "  [$label] FAIL     no test log (meson test exited $mstatus)"
    tail -40 "$dir/test-output-$label.txt"
    return
  fi
  local out counts p f s tstatus
  out=$(python3 scripts/testlog.py "$log" "$label" "${strict[@]}" --build "$kind" \
          --allowed tests/allowed-skips.txt --expect "$dir/test-list-$label.txt" --meson-status "$mstatus")
  tstatus=$?
  counts=$(printf '%s\n' "$out" | tail -1)
  printf '%s\n' "$out" | sed '$d'
  if [ "$tstatus" != 0 ] || ! [[ "$counts" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]]; then
    failed=$((failed + 1))
    echo "  [$label] FAIL     testlog.py failed (exit $tstatus): its count is not trusted"
    return
  fi
  read -r p f s <<<"$counts"
  if [ "$f" != 0 ]; then
    grep -E '^(not ok|#)' "$base.txt" | grep -vE '^# ok - ' | head -80  # cmocka's "# ok - tests" says nothing
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
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
    # LeakSanitizer prints this when a thread exits while it stops the
    # world; it is a note, not a finding (the check goes on without it).
    if ! grep -v 'Unable to get registers from thread' "$f" | grep -q '[^[:space:]]'; then
      echo "  [$1] sanitizer note (not a finding) $f: $(head -1 "$f")"; continue
    fi
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

# The ASan build first: its suite is the run's critical path. The plain
# build is made in the plain lane, beside that suite (below).
asan_ok=0
if ! { build build-asan -Db_sanitize=address,undefined -Db_lundef=false &&
       [ "$(build_option build-asan b_sanitize)" = "address,undefined" ]; }; then
  failed=$((failed + 1)); asan_ok=1
  echo "sanitizer build failed (or is not sanitized: b_sanitize=$(build_option build-asan b_sanitize))"
fi
part_done build

# Fuzz targets (clang, libFuzzer + ASan + UBSan, no recovery): built, then
# a short run each, seeds first (fuzz/corpus); a crash or any sanitizer
# report fails it. All of it alongside the suites (off their critical
# path); the results are counted when the run is done.
run_fuzz() {
  local nfuzz=0 f name seeds src t
  # Below the ASan suite's priority: the fuzz runs are time-boxed, so they
  # take its idle CPU and never slow it (a fresh-clone run beside them saw
  # a flood test's learner slowed 7x).
  renice -n 5 -p "$BASHPID" >/dev/null
  if ! { CC=clang build build-fuzz -Dfuzz=true && [ "$(build_option build-fuzz fuzz)" = True ]; }; then
    echo "FAIL the fuzz build failed (or is not a fuzz build)"; echo "END"; return
  fi
  echo "TIME build $((SECONDS - fuzz_start))s"
  for f in build-fuzz/fuzz/fuzz_*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    nfuzz=$((nfuzz + 1))
    name=$(basename "$f")
    mkdir -p "build-fuzz/corpus-$name"
    seeds="fuzz/corpus/${name#fuzz_}"
    [ -d "$seeds" ] && cp -n "$seeds"/* "build-fuzz/corpus-$name/" 2>/dev/null
    if UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
       "$f" -max_total_time="${SG_FUZZ_SECONDS:-15}" -timeout=30 -artifact_prefix="build-fuzz/$name-" \
            "build-fuzz/corpus-$name" >"build-fuzz/$name.log" 2>&1 &&
       ! grep -qE 'runtime error:|Sanitizer' "build-fuzz/$name.log"; then
      echo "OK $name ($(grep -o 'Done [0-9]* runs' "build-fuzz/$name.log"))"
    else
      echo "FAIL $name"; tail -30 "build-fuzz/$name.log" | sed 's/^/    /'
    fi
  done
  if [ "$nfuzz" = 0 ]; then echo "FAIL no fuzz target was built"; fi
  # Every target in fuzz/ was built and run (a target left out of
  # fuzz/meson.build would otherwise never run).
  for src in fuzz/fuzz_*.c; do
    t=$(basename "$src" .c)
    if [ ! -x "build-fuzz/fuzz/$t" ]; then echo "FAIL $t: in fuzz/ but not built"; fi
  done
  # what a crashed target left behind (named by its pid): only dead
  # targets' (another run's live targets share /dev/shm)
  for d in /dev/shm/sg-fuzz-*; do
    [ -e "$d" ] && ! kill -0 "${d##*-}" 2>/dev/null && rm -rf "$d"
  done
  echo "END"
}
fuzz_start=$SECONDS
fuzz_results="$SG_TEST_ROOT/fuzz-results"
run_fuzz > "$fuzz_results" 2>&1 &
fuzz_pid=$!

# The plain build, its suites, then valgrind, in a lane of their own beside
# the ASan suite (each test is hermetic; run one after the other they
# added ~150 s to the run). Its counts and times come back in its last line.
run_plain_lane() {
  renice -n 5 -p "$BASHPID" >/dev/null  # the ASan suite first: this lane fills its idle CPU
  passed=0; failed=0; skipped=0; times=(); part_start=$SECONDS
  if ! build build; then
    echo "  [plain] FAIL     the plain build failed"
    echo "LANE 0 1 0 plain-build $((SECONDS - part_start))s"
    return
  fi
  part_done plain-build
  jobs=1  # beside the ASan suite's own jobs: one at a time is enough to end first
  run_suite build plain plain --suite static-e2e --suite no-valgrind --suite lint
  part_done plain
  # Unit tests under valgrind: no leaks, no invalid accesses, no
  # uninitialised reads. The suite no-valgrind is left out: valgrind does
  # not emulate seccomp(2), which test_execnotify needs (it runs above).
  run_suite build valgrind valgrind --suite unit --no-suite no-valgrind \
    --wrapper "valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --trace-children=no"
  part_done valgrind
  echo "LANE $passed $failed $skipped ${times[*]}"
}
plain_lane="$SG_TEST_ROOT/plain-lane"
run_plain_lane > "$plain_lane" 2>&1 &
plain_pid=$!

if [ "$asan_ok" = 0 ]; then
  rm -rf "$san_dir"; mkdir -p "$san_dir/logs"; chmod 1777 "$san_dir" "$san_dir/logs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:log_path=$san_dir/report \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$san_dir/report \
  SANDGLASS_LOG_ARCHIVE=$san_dir/logs \
    run_suite build-asan asan asan --suite unit --suite integration --suite adversarial
  check_sanitizer_reports asan
  part_done asan
fi


wait "$plain_pid"
lane=$(grep '^LANE ' "$plain_lane" | tail -1)
grep -v '^LANE ' "$plain_lane"
if [ -z "$lane" ]; then
  failed=$((failed + 1)); echo "  [plain] FAIL     the plain lane did not finish"
else
  read -r _ p f sk rest <<<"$lane"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + sk))
  times+=("$rest (beside asan)")
fi
part_start=$SECONDS

wait "$fuzz_pid"
fuzz_build=?
while read -r verdict rest; do
  case $verdict in
    OK) passed=$((passed + 1)); echo "  [fuzz] OK       $rest" ;;
    FAIL) failed=$((failed + 1)); echo "  [fuzz] FAIL     $rest" ;;
    TIME) fuzz_build=${rest#build } ;;
    END) fuzz_end=1 ;;
    *) echo "  [fuzz] $verdict $rest" ;;
  esac
done < "$fuzz_results"
[ "${fuzz_end:-}" = 1 ] || { failed=$((failed + 1)); echo "  [fuzz] FAIL     the fuzz run did not finish"; }
times+=("fuzz(build $fuzz_build, then runs; alongside the suites) $((SECONDS - fuzz_start))s")
part_start=$SECONDS

# Nothing this run made is left: processes, cgroups, mounts, loop devices,
# uid slots (only this run's: two runs may share the host).
if python3 scripts/leakcheck.py "$SG_TEST_ROOT"; then
  echo "  [leaks] none: no process, cgroup, mount, loop device or uid slot of this run is left"
  rm -rf "$SG_TEST_ROOT"
else
  failed=$((failed + 1))
  echo "  [leaks] FAIL: the above is left by this run (its files stay in $SG_TEST_ROOT)"
fi
part_done leakcheck

echo "time: ${times[*]}; total $((SECONDS - t_start))s (CPU shared with whatever else runs)"
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" = 0 ]
