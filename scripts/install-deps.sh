#!/usr/bin/env bash
# Installs, idempotently, every Debian package sandglass needs to build, run
# and test. Safe to run again: apt-get skips what is already there.
set -euo pipefail

pkgs=(
  build-essential pkg-config meson ninja-build clang
  libwebsockets-dev libwebsockets-evlib-uv libuv1-dev libjansson-dev
  libgit2-dev libseccomp-dev libsqlite3-dev libpq-dev libssl-dev libcap-dev
  libcmocka-dev valgrind
  sqlite3 postgresql
  bubblewrap iproute2 util-linux procps python3 hyperfine curl git perl
  rsync musl-tools cmake
  chromium  # a real browser for the terminal page test (tests/node/browser_terminal.mjs)
  e2fsprogs  # mkfs.ext4: each workspace's own file system (src/sandbox/disk.c)
  tmux vim  # a real terminal and a full-screen program for the reattach test (test_shell.py)
  # real test runners whose summaries test_result parses (test_testcounts.py): the sandbox
  # runs the host's /usr/bin ones; cargo works offline on a crate without dependencies
  python3-pytest golang-go cargo
)
# Node and npm run the independent peers in tests/node (ws, the MCP
# Inspector). Debian's nodejs and npm, unless a node with npm is already
# there (a NodeSource nodejs ships its own npm and conflicts with Debian's).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "install-deps: run as root to install: ${missing[*]}" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The plain build's static musl CLI and sandglass-exec need jansson built
# with musl: without it that build would lack binaries its configuration
# asks for (and their tests would have nothing to test), so this fails.
if ! bash "$(dirname "$0")/build-musl-jansson.sh"; then
  echo "install-deps: cannot build jansson with musl (scripts/build-musl-jansson.sh): the plain build" \
       "would have no static musl CLI and no sandglass-exec" >&2
  exit 1
fi
echo "install-deps: all packages present"
