#!/usr/bin/env bash
# Address space under a limit (issue 34, item 9): under `ulimit -v` a program
# on hakmem (preloaded) gets at least 90 % of the blocks it gets on glibc's
# malloc, counted by build/ext/as_limit (1 MiB and 64 KiB blocks until malloc
# fails; it opens a stream first).  One line per limit and size with both
# counts; HAKMEM_SECURE=1's counts as a note (guard pages cost address space).
set -u
BUILD=${BUILD:-build}
LIB=$(cd "$BUILD" && pwd)/libhakmem.so
PROG=$BUILD/ext/as_limit
for f in "$LIB" "$PROG"; do
  if [ ! -f "$f" ]; then echo "not ok - addrspace:build: $f missing"; exit 1; fi
done

count() {  # limit KiB, size, preload (or empty), env...
  local limit=$1 size=$2 pre=$3; shift 3
  env "$@" bash -c "ulimit -v $limit && LD_PRELOAD=$pre exec timeout 60 $PROG $size" 2>&1
}

for limit in 70000 102400 204800 409600; do
  for size in 1048576 65536; do
    name="addrspace:$((size >> 10)) KiB blocks, ulimit -v $limit"
    ref=$(count "$limit" "$size" "")
    got=$(count "$limit" "$size" "$LIB")
    sec=$(count "$limit" "$size" "$LIB" HAKMEM_SECURE=1)
    case "$ref" in ''|*[!0-9]*) echo "ok - $name # SKIP glibc's run failed: $ref"; continue ;; esac
    case "$got" in
      ''|*[!0-9]*) echo "not ok - $name: hakmem's run failed: $(echo "$got" | head -1)"; continue ;;
    esac
    pct=$((got * 100 / ref))
    echo "# $name: glibc $ref, hakmem $got ($pct %), HAKMEM_SECURE=1 $sec"
    if [ $((got * 10)) -ge $((ref * 9)) ]; then
      echo "ok - $name"
    else
      echo "not ok - $name: hakmem $got blocks, glibc $ref: $pct %, below 90 %"
    fi
  done
done
