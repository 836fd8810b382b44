#!/usr/bin/env bash
# Per-request allocation (bench/heaps.c): each request allocates OBJECTS small
# objects and drops them all.  Four ways, interleaved, RUNS rounds, medians:
# a hakmem first-class heap destroyed at the request's end; a mimalloc heap
# (mi_heap_new / mi_heap_destroy); malloc and free per object under hakmem and
# under mimalloc.
#
#   bench/heaps.sh                        # Debian's mimalloc (libmimalloc-dev)
#   MIMALLOC=/path/libmimalloc.so MIMALLOC_INCLUDE=/path/include bench/heaps.sh
#   RUNS=7 REQUESTS=20000 OBJECTS=2000 bench/heaps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5} REQUESTS=${REQUESTS:-20000} OBJECTS=${OBJECTS:-2000}
if [ -z "${MIMALLOC:-}" ]; then
  [ -e /usr/include/mimalloc.h ] || tools/deps.sh heaps
  MIMALLOC=$(ls /usr/lib/*/libmimalloc.so 2>/dev/null | head -1)
  MIMALLOC_INCLUDE=/usr/include
fi
MIMALLOC_INCLUDE=${MIMALLOC_INCLUDE:-$(dirname "$MIMALLOC")/include}
make -s build/libhakmem.so
out=build/heaps
mkdir -p "$out"
hm=$PWD/build/libhakmem.so
gcc -O2 -Iinclude -DHEAP_HAKMEM bench/heaps.c -o "$out/hakmem_heap" "$hm" -Wl,-rpath,"$(dirname "$hm")"
gcc -O2 -I"$MIMALLOC_INCLUDE" -DHEAP_MIMALLOC bench/heaps.c -o "$out/mi_heap" "$MIMALLOC" -Wl,-rpath,"$(dirname "$MIMALLOC")"
gcc -O2 bench/heaps.c -o "$out/malloc_free"

run() {  # name, command...: prints "requests/s destroy_ns"
  local name=$1; shift
  "$@" "$REQUESTS" "$OBJECTS" | sed -n 's/^RESULT .*ops_per_sec=\([0-9]*\).*destroy_ns=\([0-9]*\).*/\1 \2/p'
}
declare -A res end
variants="hakmem_heap mi_heap hakmem_malloc_free mimalloc_malloc_free"
for r in $(seq 1 "$RUNS"); do
  for v in $variants; do
    case $v in
      hakmem_heap) x=$(run "$v" "$out/hakmem_heap") ;;
      mi_heap) x=$(run "$v" "$out/mi_heap") ;;
      hakmem_malloc_free) x=$(LD_PRELOAD=$hm run "$v" "$out/malloc_free") ;;
      mimalloc_malloc_free) x=$(LD_PRELOAD=$MIMALLOC run "$v" "$out/malloc_free") ;;
    esac
    res[$v]+="${x% *} "
    end[$v]+="${x#* } "
  done
  echo "round $r/$RUNS done" >&2
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mi=$(echo "${res[mi_heap]}" | median)
echo "Per-request allocation: $REQUESTS requests of $OBJECTS objects (16-256 B), $RUNS interleaved runs;"
echo "requests per second (CPU time), median [min-max], and relative to mi_heap (mimalloc: $MIMALLOC)."
echo
echo "| way | requests/s | vs mi_heap | ending a request: destroy (heaps), the frees (malloc_free), ns |"
echo "|---|---|---|---|"
for v in $variants; do
  sorted=$(echo "${res[$v]}" | tr ' ' '\n' | grep . | sort -n)
  m=$(echo "${res[$v]}" | median)
  echo "| $v | $m [$(echo "$sorted" | head -1)-$(echo "$sorted" | tail -1)] | $(awk -v a="$m" -v b="$mi" 'BEGIN {printf "%.2fx", a / b}') | $(echo "${end[$v]}" | median) |"
done
