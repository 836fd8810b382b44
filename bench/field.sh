#!/usr/bin/env bash
# field.sh ROW [-i INPUT] PROGRAM ARGS...: one program of mimalloc-bench (the
# rows of SUITE=mimalloc-bench bench/run.sh) under the caller's LD_PRELOAD
# and HAKMEM_* settings, in a scratch directory (rptest writes a file), its
# stdin from INPUT or /dev/null.  Prints the RESULT line: its time in seconds
# as mimalloc-bench's bench.sh counts it, and its own peak RSS (not this
# script's).  The time is the wall-clock time, except for the programs that
# run for a fixed time and report a rate, whose rate bench.sh turns into a
# time:
#   larson*        the "relative time: S" it prints
#   xmalloc-test*  the "rtime: S" it prints
#   rptest*        2,000,000 / the "memory ops" per CPU second it prints
#   glibc-thread   1,000,000,000 / the iterations it prints
set -euo pipefail
export LC_ALL=C                      # a decimal point in EPOCHREALTIME and awk
row=$1
shift
input=/dev/null
if [ "$1" = -i ]; then input=$2; shift 2; fi
preload=${LD_PRELOAD:-}
unset LD_PRELOAD
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"

start=$EPOCHREALTIME
/usr/bin/time -o rss -f %M env LD_PRELOAD="$preload" "$@" <"$input" >out || { cat rss >&2; exit 1; }
end=$EPOCHREALTIME
case $row in
  larson*) secs=$(sed -n 's/.*relative time: \([0-9.]*\)s.*/\1/p' out) ;;
  xmalloc-test*) secs=$(sed -n 's/^rtime: \([0-9.]*\).*/\1/p' out) ;;
  rptest*) secs=$(sed -n 's/.*\.\.\.\([0-9]*\) memory ops.*/\1/p' out | awk '$1 > 0 { print 2000000 / $1 }') ;;
  glibc-thread) secs=$(awk 'NR == 1 && $1 > 0 { print 1e9 / $1 }' out) ;;
  *) secs=$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }') ;;
esac
if [ -z "$secs" ]; then
  echo "field.sh: no time in the output of $row:" >&2
  tail -3 out >&2
  exit 1
fi
awk -v s="$secs" -v rss="$(tail -1 rss)" \
  'BEGIN { printf "RESULT ops=1 secs=%.6f ops_per_sec=%.6g peak_rss_kib=%d\n", s, 1 / s, rss }'
