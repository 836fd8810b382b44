#!/usr/bin/env bash
# mimalloc's test-stress (1, 2, 8 and 32 threads) and the standard-name part of
# its test-api, in our own versions (tests/ext/mimalloc_*.c), each run under
# glibc's malloc and under hakmem, default and HAKMEM_SECURE=1.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/ext/modes.sh
for name in mimalloc_api mimalloc_stress; do
  if [ ! -x "$BUILD/ext/$name" ]; then echo "not ok - $name: $BUILD/ext/$name not built"; continue; fi
  ext_tap "$name" 120 "$BUILD/ext/$name"
done
