#!/usr/bin/env bash
# bench/run.sh — hakmem's benchmark runner (`make bench` runs the first mode).
#
#   bench/run.sh                  every benchmark under hakmem, glibc, mimalloc,
#                                 jemalloc and tcmalloc, interleaved; table + chart
#   SUITE=mimalloc-bench MIMALLOC_BENCH=DIR bench/run.sh
#                                 the same with the programs of mimalloc-bench
#                                 (built in DIR) and its bench.sh's arguments
#   bench/run.sh ab SPEC_A SPEC_B two builds or two settings of hakmem, RUNS >= 10
#                                 interleaved; a GO / NEUTRAL / NO-GO verdict each
#   bench/run.sh callgrind [SPEC...]  instructions per malloc+free pair (valgrind),
#                                 of the allocators or of the given hakmem SPECs
#   bench/run.sh syscalls         mmap/munmap/madvise/mremap/brk calls (strace)
#
# SPEC is a git revision, "." for the working tree, either one followed by
# ":VAR=VALUE" settings:  ab a7b24ae 581c59b   ab . .:HAKMEM_PURGE_DELAY_MS=0
#
# Environment: RUNS (repetitions; 5, 3 for mimalloc-bench, 10 for ab),
# SUITE=full (adds the 8-thread and other longer variants), BENCH="names" (a
# subset), ALLOCS="names" (a name is also NAME=LIBRARY.so[@VERSION]), REF (the
# allocator the ratios are to), SAVE=1 (the run becomes bench/results/latest.*),
# TIMEOUT (seconds per run, 300), SETTLE_MB (memory touched before each run,
# 0: none).  See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-compare}
OUT=build/bench
RESULTS=$OUT/results     # untracked: a run leaves the clone as it was, unless SAVE=1
TIMEOUT=${TIMEOUT:-300}
mkdir -p "$OUT" "$RESULTS"
TMP=$(mktemp -d "$OUT/run.XXXXXX")     # this run's scratch files: runs may overlap
TMP=$(cd "$TMP" && pwd)                # (absolute: field.sh runs its program in a directory of its own)
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM   # timeout keeps runs out of the terminal's signals: stop after this run
note() { echo "note: $*" >&2; }
failed() { printf '\nFAILED: %s under %s:\n' "$1" "$2" >&2; tail -5 "$TMP/last.err" >&2; }
# Progress: one line rewritten in place on a terminal, a line each in a log.
progress() { if [ -t 2 ]; then printf '\r%s ' "$*" >&2; else echo "$*" >&2; fi; }

# ---- what the mode needs, installed when missing (tools/deps.sh: the names
# of this Debian or Ubuntu release; it keeps redis's service from starting) ----
targets=(bench)
[ "${SUITE:-}" != mimalloc-bench ] || targets+=(field)
case $MODE in
  callgrind) targets+=(callgrind) ;;
  syscalls) targets+=(syscalls) ;;
esac
tools/deps.sh "${targets[@]}" >/dev/null 2>&1 || note "could not install all of what ${targets[*]} needs; what is missing is skipped"

# glibc's malloc is chosen by preloading libc itself: a program linked with
# another allocator (Debian's redis-server uses jemalloc) then gets glibc's.
# VER: each allocator's version for the tables: hakmem's commit, the Debian
# package's version.
libpath() { dpkg -L "$1" 2>/dev/null | grep -E "/$2[^/]*\.so(\.[0-9]+)*$" | head -1; }
pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo unknown; }
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src include 2>/dev/null || commit+="+dirty"
declare -A LIB=([hakmem]="$PWD/build/libhakmem.so" [glibc]="$(readlink -f "$(cc -print-file-name=libc.so.6)")")
declare -A VER=([hakmem]=$commit [glibc]=$(pkgver libc6))
for spec in mimalloc:libmimalloc2.0,libmimalloc3:libmimalloc jemalloc:libjemalloc2:libjemalloc \
            tcmalloc:libtcmalloc-minimal4t64,libtcmalloc-minimal4:libtcmalloc_minimal; do
  IFS=: read -r name pkgs file <<<"$spec"
  for pkg in ${pkgs//,/ }; do
    path=$(libpath "$pkg" "$file") && [ -n "$path" ] && { LIB[$name]=$path; VER[$name]=$(pkgver "$pkg"); break; }
  done
done

# The version of a library given by path (ALLOCS="NAME=PATH"): a VERSION file
# beside it, else `git describe` of its source: the cmake source of the build
# directory it is in, or the git checkout it is in; else "unknown".
libversion() {
  local dir src
  dir=$(dirname "$1")
  [ ! -f "$dir/VERSION" ] || { head -1 "$dir/VERSION"; return; }
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$dir/CMakeCache.txt" 2>/dev/null)
  git -C "${src:-$dir}" describe --tags --always --dirty 2>/dev/null || echo unknown
}

# ---- the suite ---------------------------------------------------------------
make -s all
for src in bench/*.c; do
  bin=$OUT/$(basename "$src" .c)
  [ "$bin" -nt "$src" ] && [ "$bin" -nt bench/bench.h ] ||
    { cc -O2 -g -Wall -fno-builtin -pthread "$src" -o "$TMP/bin" && mv "$TMP/bin" "$bin"; }
done
B=$OUT
# name  suite  command  (each run prints one RESULT line; see bench/README.md).
# "startup" (no allocation at all) is the syscalls mode's baseline.
SUITE_TABLE=$(cat <<EOF
small          default  $B/random_mixed 20000000 400 16 2048 1
medium         default  $B/random_mixed 10000000 400 4096 32768 1
mixed          default  $B/random_mixed 10000000 400 16 32768 1
large          default  $B/random_mixed 4000000 64 32768 262144 1
xlarge         default  $B/random_mixed 1000000 64 262144 1048576 1
app            default  $B/random_mixed 20000000 400 16 32768 1 app
fixed-64       default  $B/fixed_size 50000000 64 100
fixed-4k       default  $B/fixed_size 20000000 4096 25
aligned-64     default  $B/fixed_size 30000000 200 64 64
realloc        default  $B/realloc_growth 4000000 16 1048576 256
realloc-64     full     $B/realloc_growth 2000000 64 524288 512
realloc-2m     full     $B/realloc_growth 2000000 16 2000000 1024
realloc-256k   full     $B/realloc_growth 2000000 64 262144 256
remote0-t2     default  $B/mt_remote 2 20000000 400 16 2048 0
remote50-t2    default  $B/mt_remote 2 12000000 400 16 2048 50
remote90-t2    default  $B/mt_remote 2 12000000 400 16 2048 90
remote0-t4     default  $B/mt_remote 4 10000000 400 16 2048 0
remote50-t4    default  $B/mt_remote 4 6000000 400 16 2048 50
remote90-t4    default  $B/mt_remote 4 6000000 400 16 2048 90
remote0-t8     full     $B/mt_remote 8 5000000 400 16 2048 0
remote50-t8    full     $B/mt_remote 8 3000000 400 16 2048 50
remote90-t8    full     $B/mt_remote 8 3000000 400 16 2048 90
larson-t2      default  $B/larson 2 1 1000 8 1024 20000
larson-t4      default  $B/larson 4 1 1000 8 1024 20000
larson-t8      full     $B/larson 8 1 1000 8 1024 20000
midlarge-t2    default  $B/mt_remote 2 20000000 400 8192 32768 0 mid
midlarge-t4    full     $B/mt_remote 4 5000000 400 8192 32768 0 mid
prodcons-t2    default  $B/prodcons 1 20000000 16 1024
prodcons-t4    full     $B/prodcons 2 10000000 16 1024
fanin-t4       full     $B/prodcons 3 2000000 16 1024 fanin
falseshare-t2  default  $B/false_sharing 2 1000000 8 100
falseshare-t4  full     $B/false_sharing 4 500000 8 100
churn          default  $B/thread_churn 500 4 2000
walk           full     $B/walk 2000000 10 64
walk-1g        full     $B/walk 16000000 3 64
rssfree-idle   default  $B/rss_free 4 300 idle
rssfree-exit   default  $B/rss_free 4 300 exit
redis          default  bench/redis.sh 100000
python         default  python3 bench/python_objects.py 100000
sqlite         default  bench/sqlite.sh 200000
lua            default  bench/apps.sh lua
z3             default  bench/apps.sh z3
gcc            default  bench/apps.sh gcc
perl           default  bench/apps.sh perl
startup        none     $B/fixed_size 0 16 1
EOF
)
declare -A CMD
ORDER=""
while read -r name suite cmd; do
  CMD[$name]=$cmd
  if [ "$suite" = default ] || { [ "$suite" = full ] && [ "${SUITE:-default}" = full ]; }; then ORDER+="$name "; fi
done <<<"$SUITE_TABLE"

# SUITE=mimalloc-bench: the programs of mimalloc-bench (github.com/daanx/mimalloc-bench),
# built outside this repository (bench/README.md), with the arguments its
# bench.sh gives them on this machine's P cores, under bench.sh's row names.
# Each runs under bench/field.sh, which times it as bench.sh does.
if [ "${SUITE:-}" = mimalloc-bench ]; then
  MB=${MIMALLOC_BENCH:?"SUITE=mimalloc-bench needs MIMALLOC_BENCH=<its built bench/ directory>"}
  MB=$(cd "$MB" && pwd)
  MS=${MIMALLOC_BENCH_SRC:-$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$MB/CMakeCache.txt" 2>/dev/null)}
  [ -d "$MS" ] || { echo "no mimalloc-bench sources (its bench/ folder): set MIMALLOC_BENCH_SRC" >&2; exit 2; }
  P=$(nproc)
  FIELD_TABLE=$(cat <<EOF
cfrac           $MB/cfrac 17545186520507317056371138836327483792789528
espresso        $MB/espresso $MS/espresso/largest.espresso
barnes          -i $MS/barnes/input $MB/barnes
redis           bench/redis.sh field
larsonN-sized   $MB/larson-sized 5 8 1000 5000 100 4141 $P
mstressN        $MB/mstress $P 50 25
rptestN         $MB/rptest $P 0 1 2 500 1000 100 8 16000
alloc-test1     $MB/alloc-test 1
alloc-testN     $MB/alloc-test $((P > 16 ? 16 : P))
sh6benchN       $MB/sh6bench $((2 * P))
sh8benchN       $MB/sh8bench $((2 * P))
xmalloc-testN   $MB/xmalloc-test -w $P -t 5 -s 64
cache-scratch1  $MB/cache-scratch 1 1000 1 2000000 $P
cache-scratchN  $MB/cache-scratch $P 1000 1 2000000 $P
glibc-simple    $MB/glibc-simple
glibc-thread    $MB/glibc-thread $P
larsonN         $MB/larson 5 8 1000 5000 100 4141 $P
malloc-large    $MB/malloc-large
mleak10         $MB/mleak 5
mleak100        $MB/mleak 50
rbstress1       ruby $MS/rbstress/stress_mem.rb 1
rbstressN       ruby $MS/rbstress/stress_mem.rb $P
cache-thrash1   $MB/cache-thrash 1 1000 1 2000000 $P
cache-thrashN   $MB/cache-thrash $P 1000 1 2000000 $P
z3              z3 -smt2 $MS/z3/test1.smt2
EOF
  )
  ORDER=""
  while read -r name cmd; do
    if [[ $cmd == bench/* ]]; then CMD[$name]=$cmd; else CMD[$name]="bench/field.sh $name $cmd"; fi
    ORDER+="$name "
  done <<<"$FIELD_TABLE"
fi
BENCH=${BENCH:-$ORDER}
for b in $BENCH; do [ -v "CMD[$b]" ] || { echo "unknown benchmark $b; known: ${!CMD[*]}" >&2; exit 2; }; done

# A row whose program, input or tool is missing is skipped, and the report says
# so: its command's first word and every absolute path in it must exist, and
# what NEEDS lists for it must be installed.
declare -A NEEDS=([redis]="redis-server redis-cli redis-benchmark" [sqlite]=sqlite3 [lua]=lua5.4 [z3]=z3 [gcc]=gcc
  [perl]=perl)
missing() {  # bench: prints what it lacks
  local w words
  read -ra words <<<"${CMD[$1]#bench/field.sh $1 }"
  [ "${words[0]}" != -i ] || words=("${words[@]:2}" "${words[1]}")
  for w in "${words[0]}" ${NEEDS[$1]:-}; do command -v "$w" >/dev/null || echo "$w"; done
  for w in "${words[@]:1}"; do [[ $w != /* ]] || [ -e "$w" ] || echo "$w"; done
}
SKIPPED=""     # lines "bench why"
skip() { note "$1 is skipped: $2"; SKIPPED+="$1 $2"$'\n'; }
run=""
for b in $BENCH; do
  lacks=$(missing "$b" | paste -sd ' ')
  if [ -n "$lacks" ]; then skip "$b" "not found: $lacks"
  elif [ "${P:-2}" -eq 1 ] && [[ $b =~ ^(alloc-test|cache-scratch|cache-thrash|rbstress)N$ ]]; then
    skip "$b" "one core (bench.sh runs it on more than one)"
  else run+="$b "; fi
done
BENCH=$run

# ---- variants: what is compared (allocators, or hakmem builds/settings) ------
declare -A VLIB VENV      # variant -> library to preload, "VAR=VALUE ..." settings
VARIANTS=()
# An allocator is a name of LIB, or NAME=PATH[@VERSION]: a library built
# elsewhere (the newest releases: bench/README.md), its version given or found;
# either may be followed by :VAR=VALUE settings for its runs
# (mimalloc3-large=$P/libmimalloc.so:MIMALLOC_ALLOW_LARGE_OS_PAGES=1; a
# value may hold colons: jemalloc-prof=...:MALLOC_CONF=prof:true).
use_allocs() {
  local a name path settings
  for a in ${ALLOCS:-$1}; do
    settings=""
    if [[ $a == *:* ]]; then settings=${a#*:}; a=${a%%:*}; fi
    name=${a%%=*}
    if [ "$name" != "$a" ]; then
      path=${a#*=}
      LIB[$name]=${path%@*}
      if [ "$path" != "${path%@*}" ]; then VER[$name]=${path##*@}; else VER[$name]=$(libversion "${LIB[$name]}"); fi
      [ -f "${LIB[$name]}" ] || { note "$name: no library ${LIB[$name]}; skipped"; continue; }
    fi
    if [ -v "LIB[$name]" ]; then VARIANTS+=("$name"); VLIB[$name]=${LIB[$name]}; VENV[$name]=$(sed -E 's/:([A-Z_][A-Z0-9_]*=)/ \1/g' <<<"$settings")
    else note "$name is not available (install failed?); skipped"; fi
  done
}

# The library for a git revision: exported with git archive and built under
# build/ab/<commit>/, once.  "." is the working tree's own build.
build_rev() {
  [ "$1" = . ] && { echo "$PWD/build/libhakmem.so"; return; }
  local sha dir
  sha=$(git rev-parse --verify "$1^{commit}") || { echo "not a revision: $1" >&2; exit 2; }
  dir=build/ab/$sha
  if [ ! -f "$dir/build/libhakmem.so" ]; then
    echo "building $1 ($sha) in $dir ..." >&2
    rm -rf "$dir" && mkdir -p "$dir"
    git archive "$sha" | tar -x -C "$dir"
    make -s -C "$dir" build/libhakmem.so >&2
  fi
  echo "$PWD/$dir/build/libhakmem.so"
}

# A variant from a SPEC: REV[:VAR=VALUE...], "." (or nothing) for the working tree.
add_spec() {  # name spec
  local -a parts
  IFS=: read -ra parts <<<"$2"
  VARIANTS+=("$1"); VLIB[$1]=$(build_rev "${parts[0]:-.}"); VENV[$1]="${parts[*]:1}"
}

# ---- running one benchmark once ----------------------------------------------
# Only the benchmark gets the preload and settings (not timeout, time or a
# wrapper).  WRAP is a command put in front of it (strace); redis.sh puts it in
# front of the server instead.  Prints the RESULT fields plus maxrss_kib;
# returns non-zero (with the output in $TMP/last.err) on failure.
# The library runs from a fresh copy of its file each time: the speed of a
# tight loop follows which physical pages hold the library's code (two
# byte-identical files ran fixed-64 at 138 M and 240 M pairs/s, each
# run after run), so one file would bias every run of its variant.
# Before it, bench/settle touches SETTLE_MB MiB (default 1024, at most a
# quarter of the memory available) and exits: every run starts with that much
# memory freed a moment ago.  On a VM that hands free memory back to its host,
# a run otherwise waits for the host as the run before it left it (whether
# that one freed its memory at exit or gave it back as it went).
WRAP=""
SETTLE_MB=${SETTLE_MB:-$(awk '/^MemAvailable:/ { m = int($2 / 4096); print m < 1024 ? m : 1024 }' /proc/meminfo)}
run_one() {  # variant bench
  local v=$1 b=$2 res rc=0 lib=${VLIB[$v]}
  local -a envs=() pre=()
  case $lib in                                 # (not libc: the program would load its own file beside the copy)
  */libc.so.6) ;;
  *) rm -f "$TMP/preload-$v.so"             # (a new file: a server of the last run may still map the old one)
     cp "$lib" "$TMP/preload-$v.so" 2>"$TMP/last.err" || return 1
     lib=$TMP/preload-$v.so ;;
  esac
  read -ra envs <<<"${VENV[$v]}"
  if [ "$b" = redis ]; then pre=(env SERVER_WRAP="$WRAP"); else read -ra pre <<<"$WRAP"; fi
  "$OUT/settle" "${SETTLE_MB:-0}" || note "bench/settle could not touch $SETTLE_MB MiB"
  res=$(timeout -k 5 "$TIMEOUT" /usr/bin/time -o "$TMP/time" -f %M \
    "${pre[@]}" env LD_PRELOAD="$lib" "${envs[@]}" ${CMD[$b]} 2>"$TMP/last.err") || rc=$?
  res=$(sed -n 's/^RESULT //p' <<<"$res")
  # A library ld.so could not preload leaves the program on glibc's malloc: a failed run, not a time.
  if [ $rc -eq 0 ] && grep -q 'cannot be preloaded' "$TMP/last.err"; then rc=1; fi
  if [ $rc -ne 0 ] || [ -z "$res" ]; then echo "exit $rc: $res" >>"$TMP/last.err"; return 1; fi
  echo "$res maxrss_kib=$(tail -1 "$TMP/time")"
}

# Interleaved: run r of every benchmark under every variant before run r+1,
# so slow drifts of a shared machine fall on all of them alike.  The order
# is run r's row of a Williams square (0 1 n-1 2 n-2 ..., plus r): who goes
# first and who follows whom change from run to run.  A plain rotation keeps
# each variant behind the same one, and what that one leaves (pages the
# host has taken back or not, caches) then biases every run.
# Raw lines: "bench variant run k=v ...".
interleave() {  # raw-file
  local raw=$1 nv=${#VARIANTS[@]} n=0 total start=$SECONDS
  total=$((RUNS * $(wc -w <<<"$BENCH") * nv))
  : >"$raw"
  for run in $(seq 1 "$RUNS"); do
    for b in $BENCH; do
      for i in $(seq 0 $((nv - 1))); do
        w=$((i == 0 ? 0 : i % 2 ? (i + 1) / 2 : nv - i / 2))
        v=${VARIANTS[$(((w + run - 1) % nv))]}
        n=$((n + 1))
        local left=$(((SECONDS - start) * (total - n + 1) / n))
        progress "$(printf '[%d/%d] run %d/%d %-14s %-9s %4ds elapsed, ~%ds left' "$n" "$total" "$run" "$RUNS" "$b" "$v" \
          $((SECONDS - start)) "$left")"
        if res=$(run_one "$v" "$b"); then echo "$b $v $run $res" >>"$raw"
        else failed "$b" "$v"; fi
      done
    done
  done
  [ ! -t 2 ] || printf '\r%*s\r' 70 "" >&2
  printf 'done: %d runs in %ds\n' "$total" $((SECONDS - start)) >&2
}

# For the report: "name version library" of each allocator, the skipped rows.
describe_run() {  # stem
  local v
  for v in "${VARIANTS[@]}"; do echo "$v ${VER[$v]:-unknown} ${VLIB[$v]}${VENV[$v]:+ with ${VENV[$v]}}"; done >"$1.allocs"
  printf '%s' "$SKIPPED" >"$1.skipped"
}

SUITE_NAME=${SUITE:-default}
stem=$RESULTS/$(date +%F-%H%M%S)-$commit
[ "$SUITE_NAME" != mimalloc-bench ] || stem+=-mimalloc-bench

case $MODE in
compare)
  if [ "$SUITE_NAME" = mimalloc-bench ]; then
    RUNS=${RUNS:-3}
    note="mimalloc-bench $(git -C "$MS" describe --tags --always --dirty 2>/dev/null || echo "in $MS") at $P threads"
  else RUNS=${RUNS:-5}; note=""; fi
  use_allocs "hakmem glibc mimalloc jemalloc tcmalloc"
  describe_run "$stem"
  interleave "$stem.raw"
  python3 bench/report.py compare "$stem" "$commit" "$RUNS" "$BENCH" "${VARIANTS[*]}" "$SUITE_NAME" "$note"
  # SAVE=1: the run becomes the tracked table and chart the README shows.
  if [ "${SAVE:-}" = 1 ]; then
    saved=bench/results/latest
    [ "$SUITE_NAME" != mimalloc-bench ] || saved=bench/results/mimalloc-bench
    cp "$stem.md" "$saved.md"
    [ ! -f "$stem.svg" ] || cp "$stem.svg" "$saved.svg"
    echo "saved as $saved.md and .svg" >&2
  fi ;;
ab)
  [ $# -eq 3 ] || { echo "usage: bench/run.sh ab SPEC_A SPEC_B   (SPEC: REV[:VAR=VALUE...], . = working tree)" >&2; exit 2; }
  RUNS=${RUNS:-10}
  [ "$RUNS" -ge 10 ] || note "RUNS=$RUNS: verdicts need at least 10 runs to be trusted"
  add_spec A "$2"
  add_spec B "$3"
  stem=$RESULTS/$(date +%F-%H%M%S)-ab
  interleave "$stem.raw"
  python3 bench/report.py ab "$stem" "$2" "$3" "$RUNS" "$BENCH" ;;
callgrind)
  command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
  if [ $# -gt 1 ]; then for spec in "${@:2}"; do add_spec "$spec" "$spec"; done
  else use_allocs "hakmem glibc mimalloc jemalloc tcmalloc"; describe_run "$stem"; fi
  # Two iteration counts; their difference cancels start-up and exit, and the
  # benchmark's own loop (main's self cost) is subtracted: what is left is the
  # allocator's instructions for the extra malloc+free pairs (user space only).
  CG=${CG_BENCH:-small medium app fixed-64 fixed-4k}
  : >"$stem-callgrind.raw"
  for b in $CG; do
    read -r prog _ args <<<"${CMD[$b]}"
    for v in "${VARIANTS[@]}"; do
      : >"$TMP/cg.lines"        # kept only when both counts are had
      for iters in 200000 1200000; do
        progress "$(printf 'callgrind %-10s %-9s %8d iterations' "$b" "$v" "$iters")"
        env LD_PRELOAD="${VLIB[$v]}" ${VENV[$v]} valgrind -q --tool=callgrind --callgrind-out-file="$TMP/cg.out" \
          "$prog" "$iters" $args >"$TMP/cg.res" 2>"$TMP/last.err" || { failed "$b (callgrind)" "$v"; continue 2; }
        callgrind_annotate --threshold=100 "$TMP/cg.out" >"$TMP/cg.txt"
        awk -v b="$b" -v v="$v" -v it="$iters" '
          FNR == NR { if (match($0, /mallocs=[0-9]+/)) m = substr($0, RSTART + 8, RLENGTH - 8); next }
          /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
          $0 ~ /:main( |$)/ { gsub(",", "", $1); self += $1 }
          END { if (m == "") { print b ": counts no mallocs (only malloc+free benchmarks apply)" >"/dev/stderr"; exit 1 }
                print b, v, it, m, total, self }' "$TMP/cg.res" "$TMP/cg.txt" >>"$TMP/cg.lines" 2>>"$TMP/last.err" ||
          { failed "$b (callgrind)" "$v"; continue 2; }
      done
      cat "$TMP/cg.lines" >>"$stem-callgrind.raw"
    done
  done
  [ ! -t 2 ] || echo >&2
  python3 bench/report.py callgrind "$stem" "$commit" ;;
syscalls)
  command -v strace >/dev/null || { echo "strace is not installed" >&2; exit 1; }
  use_allocs "hakmem mimalloc"
  describe_run "$stem"
  # One run each under strace (which distorts time, so no throughput here).
  : >"$stem-syscalls.raw"
  WRAP="strace -f -qq --seccomp-bpf -c -U name,calls -e trace=mmap,munmap,madvise,mremap,brk -o $PWD/$TMP/strace.txt"
  BENCH="startup $BENCH"
  for b in $BENCH; do
    for v in "${VARIANTS[@]}"; do
      progress "$(printf 'strace %-14s %-9s' "$b" "$v")"
      if res=$(run_one "$v" "$b"); then
        counts=$(awk '$1 ~ /^(mmap|munmap|madvise|mremap|brk)$/ { printf " %s=%s", $1, $2 }' "$TMP/strace.txt")
        echo "$b $v 1 ${res%% *}$counts" >>"$stem-syscalls.raw"
      else failed "$b" "$v"; fi
    done
  done
  [ ! -t 2 ] || echo >&2
  python3 bench/report.py syscalls "$stem" "$commit" "$BENCH" "${VARIANTS[*]}" ;;
*)
  sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
