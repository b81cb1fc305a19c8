#!/usr/bin/env bash
# Builds jansson with musl for the static musl CLI (meson.build: use_musl).
# Debian ships jansson only compiled against glibc (with _FORTIFY_SOURCE, so
# it calls glibc's __*_chk entry points, which musl lacks); this compiles
# Debian's own source package with musl-gcc instead, with jansson's own
# build system, into $SG_MUSL_PREFIX (default /usr/local/lib/sandglass-musl).
# apt authenticates the source package (signed Sources index). Idempotent:
# nothing to do when the archive is there. Run by scripts/install-deps.sh.
set -euo pipefail
prefix=${SG_MUSL_PREFIX:-/usr/local/lib/sandglass-musl}
if [ -f "$prefix/lib/libjansson.a" ] && [ -f "$prefix/include/jansson.h" ]; then exit 0; fi
command -v musl-gcc >/dev/null || { echo "build-musl-jansson: musl-gcc missing (musl-tools)" >&2; exit 1; }
command -v cmake >/dev/null || { echo "build-musl-jansson: cmake missing" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A private deb-src list for this one download: the system's apt
# configuration is left as it is. Same mirror and release as the system's.
uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 !~ /^\[/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
mkdir -p "$work/apt/lists/partial" "$work/src"
cat > "$work/apt/src.sources" <<SRC
Types: deb-src
URIs: $uri
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/apt"
          -o "Dir::State::Lists=$work/apt/lists" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
(cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only -qq jansson >/dev/null)
tar -xzf "$work"/src/jansson_*.orig.tar.gz -C "$work/src"
srcdir=$(find "$work/src" -maxdepth 1 -type d -name 'jansson-*' | head -1)
cmake -S "$srcdir" -B "$work/build" -DCMAKE_C_COMPILER=musl-gcc \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DJANSSON_BUILD_SHARED_LIBS=OFF -DJANSSON_EXAMPLES=OFF \
  -DJANSSON_BUILD_DOCS=OFF -DJANSSON_WITHOUT_TESTS=ON --log-level=WARNING >/dev/null
cmake --build "$work/build" -j 2 >/dev/null
cmake --install "$work/build" >/dev/null
echo "build-musl-jansson: $(basename "$srcdir") built with musl into $prefix"
