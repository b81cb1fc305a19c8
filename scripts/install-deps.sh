#!/usr/bin/env bash
# Installs, idempotently, every Debian package sandglass needs to build, run
# and test. Safe to run again: apt-get skips what is already there.
set -euo pipefail

pkgs=(
  build-essential pkg-config meson ninja-build clang
  libwebsockets-dev libwebsockets-evlib-uv libuv1-dev libjansson-dev
  libgit2-dev libseccomp-dev libsqlite3-dev libpq-dev libssl-dev libcap-dev
  libcmocka-dev valgrind
  libexpat1-dev  # JUnit XML test reports (src/capture/junit.c)
  libinih-dev  # the config files (src/cli/config.c, sandglass.conf(5))
  libarchive-dev  # create --from TARBALL: secure extraction (src/checkpoint/seed.c, sandglass-seed)
  sqlite3 postgresql
  bubblewrap iproute2 util-linux procps python3 hyperfine curl git perl
  rsync musl-tools cmake
  chromium  # a real browser for the terminal page test (tests/node/browser_terminal.mjs)
  e2fsprogs  # mkfs.ext4: each workspace's own file system (src/sandbox/disk.c)
  tmux vim  # a real terminal and a full-screen program for the reattach test (test_shell.py)
  nano  # an editor whose saves test_saves.py records (emacs-nox is 70 MB: a script does its pattern)
  # real test runners whose summaries test_result parses (test_testcounts.py): the sandbox
  # runs the host's /usr/bin ones; cargo works offline on a crate without dependencies
  python3-pytest golang-go cargo
  ruby-rspec  # 17 packages, ~12 s to install here
  python3-pandas  # an independent reader of the csv and ProgSnap2 exports (test_export.py)
  systemd  # systemd-analyze verify checks the installed units (test_install.py)
  bash-completion  # its loader finds the installed completion (test_install.py)
  lxcfs  # the sandbox's own /proc/meminfo & co (test_lxcfs.py starts one on its own directory)
  prometheus  # a real server scrapes the ingest's /metrics, and promtool lints it (test_metrics.py)
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
  # Debian's prometheus enables and starts its service at install (port 9090,
  # scraping localhost): test_metrics.py starts its own server on a free
  # loopback port, so the one installed here is stopped and disabled (a
  # prometheus that was there before is left alone).
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
  # Debian's lxcfs starts its service too, on /var/lib/lxcfs, which every
  # sandbox would then bind: the tests expect /proc as a host without LXCFS
  # shows it unless they start their own.
  if [[ " ${missing[*]} " == *" lxcfs "* ]]; then
    if [ -d /run/systemd/system ]; then
      systemctl disable --now lxcfs.service >/dev/null 2>&1 || true
    elif [ -x /etc/init.d/lxcfs ]; then
      /etc/init.d/lxcfs stop >/dev/null 2>&1 || true
    fi
  fi
fi
# The plain build's static musl CLI and sandglass-exec need jansson built
# with musl: without it that build would lack binaries its configuration
# asks for (and their tests would have nothing to test), so this fails.
if ! bash "$(dirname "$0")/build-musl-jansson.sh"; then
  echo "install-deps: cannot build jansson with musl (scripts/build-musl-jansson.sh): the plain build" \
       "would have no static musl CLI and no sandglass-exec" >&2
  exit 1
fi
# The page of `sandglass serve` loads xterm.js from npm: `npm ci` installs
# exactly what the committed web/package-lock.json names (again when the
# lock file changed since), and the build copies those files into the
# build and the install (meson.build: web). Nothing is fetched at build or
# run time. A node_modules that is a link (a second worktree's, made by
# hand) is left as it is.
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -L "$root/web/node_modules" ] && ! cmp -s "$root/web/package-lock.json" "$root/web/node_modules/.sandglass-lock" 2>/dev/null; then
  if ! (cd "$root/web" && npm ci --no-audit --no-fund --silent >/dev/null 2>&1 &&
        cp package-lock.json node_modules/.sandglass-lock); then
    echo "install-deps: npm ci in web/ failed: the build cannot stage serve's page (xterm.js)" >&2
    exit 1
  fi
fi
echo "install-deps: all packages present"
