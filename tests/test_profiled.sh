#!/usr/bin/env bash
# The API, thread-cache, remote-free, fork, lifecycle and first-class-heap
# test programs again with the heap profiler on (HAKMEM_PROFILE, one sample
# per 4 KiB): profiling is a slow mode of its own, whose frees take paths
# the default mode never takes (free.c: free_buffered, profile_free_local).
# Each case's line comes out as "ok - profiled:test_x.c:case"; a program
# that ends badly without a "not ok" line of its own is one failure.
# (test_purge's RSS bounds are the default mode's: the samples' marked
# pages stay resident longer.)
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
for t in test_api test_heaps test_tcache test_mt test_fork test_lifecycle test_spares; do
  bin=$BUILD/tests/$t
  if [ ! -x "$bin" ]; then
    echo "not ok - profiled:$t: $bin was not built"
    status=1
    continue
  fi
  out=$(HAKMEM_PROFILE="$dir/p" HAKMEM_PROFILE_RATE=4096 timeout --kill-after=10 240 "$bin" 2>&1 </dev/null)
  rc=$?
  printf '%s\n' "$out" | sed -nE 's/^(ok|not ok) - /\1 - profiled:/p'
  if [ "$rc" -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^not ok - '; then
    echo "not ok - profiled:$t: exit status $rc"
    printf '%s\n' "$out" | tail -n 15 | sed 's/^/    # /'
  fi
  [ "$rc" -eq 0 ] || status=1
done
exit $status
