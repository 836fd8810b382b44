#!/usr/bin/env bash
# glibc's malloc tests of the public API, in our own versions (tests/ext/
# glibc_*.c; tests/ext/README.md lists what is left out and why), each run
# under glibc's malloc and under hakmem, default and HAKMEM_SECURE=1.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/ext/modes.sh
for src in tests/ext/glibc_*.c; do
  name=$(basename "$src" .c)
  if [ ! -x "$BUILD/ext/$name" ]; then echo "not ok - $name: $BUILD/ext/$name not built"; continue; fi
  ext_tap "$name" 120 "$BUILD/ext/$name"
done
