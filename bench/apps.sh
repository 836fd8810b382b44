#!/usr/bin/env bash
# apps.sh APP: a real program from Debian's packages under the allocator (the
# caller's LD_PRELOAD and HAKMEM_* settings), on a workload of bench/ or an
# input bench/gen.py generates.  Only the program runs under the allocator
# and is timed, not the generating and the checking.  Its output is compared
# with the right answer: a wrong one is a failed run (exit 1), not a time.
# Prints the RESULT line: work units per CPU second of the program (user +
# system, its child processes included).
#   lua   lua5.4 bench/gc.lua 15 1: binary trees, strings and tables; a tree node checked
#   z3    z3 on 12 random 3-SAT instances of 200 variables, 852 clauses; an instance
#   gcc   gcc -O2 of a generated C program of 600 functions, then run; a function
#   perl  perl bench/text.pl 200000 2: words counted, substituted, sorted; a word
set -euo pipefail
app=$1
dir=$(dirname "$0")
preload=${LD_PRELOAD:-}
unset LD_PRELOAD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

case $app in
  lua)
    ops=6313311
    cmd=(lua5.4 "$dir/gc.lua" 15 1)
    expect=$'trees 6313311\nstrings 5001729153' ;;
  z3)
    ops=12
    python3 "$dir/gen.py" sat3 12 200 852 >"$tmp/in.smt2"
    cmd=(z3 "$tmp/in.smt2")
    expect=$(printf '%s\n' sat unsat unsat sat unsat unsat sat unsat unsat sat unsat sat) ;;
  gcc)
    ops=600
    expect=$(python3 "$dir/gen.py" c 600 "$tmp/big.c")
    cmd=(gcc -O2 "$tmp/big.c" -o "$tmp/big") ;;
  perl)
    ops=400000
    cmd=(perl "$dir/text.pl" 200000 2)
    expect=$'distinct 366745\nchars 3993877' ;;
  *) echo "apps.sh: unknown application $app" >&2; exit 2 ;;
esac

TIMEFORMAT='%U %S'
t=$({ time LD_PRELOAD=$preload "${cmd[@]}" >"$tmp/out" 2>"$tmp/err"; } 2>&1) ||
  { cat "$tmp/err" >&2; exit 1; }
grep -h 'cannot be preloaded' "$tmp/err" >&2 || true   # (bench/run.sh fails such a run)
[ "$app" != gcc ] || "$tmp/big" >"$tmp/out"    # the compiled program's answer
if [ "$(cat "$tmp/out")" != "$expect" ]; then
  echo "apps.sh: $app gave a wrong answer:" >&2
  diff <(echo "$expect") "$tmp/out" | head -5 >&2
  exit 1
fi
awk -v ops="$ops" '{ secs = $1 + $2; if (secs <= 0) exit 1
  printf "RESULT ops=%d secs=%.6f ops_per_sec=%.6g\n", ops, secs, ops / secs }' <<<"$t"
