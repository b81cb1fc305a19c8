#!/bin/sh
# layer-includes.sh ROOT SRC LAYER...: for each LAYER (lowest first), the
# directory ROOT/LAYER holding links to SRC/<it> and SRC/<every layer below
# it>: the include path its library is compiled with (meson.build), so an
# include of a folder above it does not compile.
set -e
root=$1 src=$2
shift 2
below=
for l in "$@"; do
  below="$below $l"
  rm -rf "${root:?}/$l"
  mkdir -p "$root/$l"
  for m in $below; do ln -s "$src/$m" "$root/$l/$m"; done
done
