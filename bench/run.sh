#!/usr/bin/env bash
# The benchmark comparison: every benchmark under hakmem, glibc, mimalloc,
# jemalloc and tcmalloc, interleaved (run 1 of each, run 2 of each, ...),
# reporting the median and range of throughput and the median peak RSS.
#   RUNS=5 bench/run.sh            more repetitions (default 3)
#   BENCH="small mixed" ALLOCS="hakmem mimalloc" bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
out=build/bench
mkdir -p "$out" bench/results

# ---- allocators ------------------------------------------------------------
need=()
command -v /usr/bin/time >/dev/null || need+=(time)
for p in libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} ..."
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"; } >/dev/null 2>&1 ||
    echo "note: could not install ${need[*]}; those allocators are skipped"
fi
libpath() { dpkg -L "$1" 2>/dev/null | grep -E "/$2[^/]*\.so(\.[0-9]+)*$" | head -1; }
declare -A LIB=([hakmem]="$PWD/build/libhakmem.so" [glibc]="")
m=$(libpath libmimalloc2.0 libmimalloc) && [ -n "$m" ] && LIB[mimalloc]=$m
j=$(libpath libjemalloc2 libjemalloc) && [ -n "$j" ] && LIB[jemalloc]=$j
t=$(libpath libtcmalloc-minimal4 libtcmalloc_minimal) && [ -n "$t" ] && LIB[tcmalloc]=$t
ALLOCS=${ALLOCS:-hakmem glibc mimalloc jemalloc tcmalloc}
allocs=()
for a in $ALLOCS; do
  if [ -v "LIB[$a]" ]; then allocs+=("$a"); else echo "note: $a not available, skipped"; fi
done

# ---- benchmarks ------------------------------------------------------------
make -s all
cc -O2 -Wall bench/random_mixed.c -o "$out/random_mixed"
cc -O2 -Wall -pthread bench/mt_remote.c -o "$out/mt_remote"
cc -O2 -Wall -pthread bench/larson.c -o "$out/larson"
declare -A CMD=(
  [small]="$out/random_mixed 20000000 400 16 2048 1"
  [medium]="$out/random_mixed 10000000 400 4096 32768 1"
  [mixed]="$out/random_mixed 10000000 400 16 32768 1"
  [app]="$out/random_mixed 20000000 400 16 32768 1 app"
  [remote0]="$out/mt_remote 2 5000000 400 16 2048 0"
  [remote50]="$out/mt_remote 2 3000000 400 16 2048 50"
  [remote90]="$out/mt_remote 2 3000000 400 16 2048 90"
  [larson]="$out/larson 4 2 1000 8 1024 20000"
)
ORDER="small medium mixed app remote0 remote50 remote90 larson"
BENCH=${BENCH:-$ORDER}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
stem=bench/results/$(date +%F)-$commit
raw=$stem.raw
: >"$raw"
total=$((RUNS * $(wc -w <<<"$BENCH") * ${#allocs[@]})) n=0
for run in $(seq 1 "$RUNS"); do
  for b in $BENCH; do
    for a in "${allocs[@]}"; do
      n=$((n + 1))
      printf '\r[%d/%d] run %d %-9s %-9s' "$n" "$total" "$run" "$b" "$a" >&2
      res=$(env LD_PRELOAD="${LIB[$a]}" /usr/bin/time -f 'MAXRSS %M' ${CMD[$b]} 2>&1) || { echo "FAILED $b $a: $res" >&2; continue; }
      ops=$(sed -n 's/.*ops_per_sec=\([0-9.]*\).*/\1/p' <<<"$res")
      rss=$(sed -n 's/^MAXRSS \([0-9]*\)/\1/p' <<<"$res")
      echo "$b $a $run $ops $rss" >>"$raw"
    done
  done
done
echo >&2
python3 bench/report.py "$raw" "$stem" "$commit" "$RUNS" "$BENCH" "${allocs[*]}"
