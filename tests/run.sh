#!/usr/bin/env bash
# Run every test program ($BUILD/tests/test_*) and every script test
# (tests/test_*.sh), each under a time limit, showing their "ok - " /
# "not ok - " lines (and "# " notes) as they come, and count them.
#
# A program or script that crashes, times out, exits non-zero without a
# "not ok" line, or prints no result line at all counts as one failure, with a
# line naming it and its exit status or signal, followed by the end of its
# output.  A check that could not run here says "ok - ... # SKIP why" and is
# counted as skipped, not passed.  The last line is exactly
# "N passed, N failed, N skipped"; the exit status is 1 if anything failed.
#
# Env: BUILD (default build); ONLY="test_api test_mt ..." to run only those;
#      SANITIZED=1 (sanitizer builds: scripts are skipped, passed on to tests);
#      TEST_TIMEOUT seconds per program or script (default 300).
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
TIMEOUT=${TEST_TIMEOUT:-300}
pass=0 fail=0 skip=0
export BUILD SANITIZED=${SANITIZED:-0}
# test_threads keeps 10,000 threads alive at once: as many processes as the
# hard limit allows (a login shell's soft limit is often lower).
ulimit -u "$(ulimit -Hu)" 2>/dev/null || true

signame() { kill -l "$1" 2>/dev/null | sed 's/^/SIG/' || echo "?"; }

run_one() {  # name, command...
  local name=$1; shift
  local out start=$SECONDS rc
  out=$(mktemp)
  # Stream the result lines as they are printed; keep everything for the report.
  timeout --kill-after=10 "$TIMEOUT" "$@" </dev/null 2>&1 | tee "$out" | grep --line-buffered -E '^(ok|not ok) - |^# '
  rc=${PIPESTATUS[0]}
  local ok nok skipped
  ok=$(grep -c '^ok - ' "$out")
  nok=$(grep -c '^not ok - ' "$out")
  skipped=$(grep -c '^ok - .* # SKIP' "$out")
  pass=$((pass + ok - skipped)); fail=$((fail + nok)); skip=$((skip + skipped))
  local why="" abnormal=0 elapsed=$((SECONDS - start))
  if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$elapsed" -ge $((TIMEOUT - 1)) ]; }; then
    why="timed out after ${TIMEOUT}s (exit status $rc)"; abnormal=1
  elif [ "$rc" -gt 128 ]; then
    why="killed by signal $((rc - 128)) ($(signame $((rc - 128))))"; abnormal=1
  elif [ "$rc" -ne 0 ]; then
    why="exit status $rc"
  fi
  # A sanitizer report fails the program even if every case printed "ok".
  local san
  san=$(grep -m1 -E '^SUMMARY: [A-Za-z]+Sanitizer' "$out")
  if [ -n "$san" ]; then
    why="${why:-exit status 0}; ${san#SUMMARY: }"
    [ "$nok" -gt 0 ] && [ "$abnormal" -eq 0 ] && echo "    # $name: $why"
  fi
  # A crash or a time-out is a failure of its own even after "not ok" lines,
  # unless the harness already reported it ("crashed with signal", "timed out").
  if [ "$abnormal" -eq 1 ] && grep -qE '^not ok - .*: (crashed with signal|timed out after)' "$out"; then
    :
  elif [ "$abnormal" -eq 1 ] || { [ -n "$why" ] && [ "$nok" -eq 0 ]; }; then
    fail=$((fail + 1))
    echo "not ok - $name: $why"
  elif [ $((ok + nok)) -eq 0 ]; then
    fail=$((fail + 1))
    echo "not ok - $name: printed no result line"
  fi
  if [ -n "$why" ] || [ "$nok" -gt 0 ] || [ $((ok + nok)) -eq 0 ]; then
    grep -vE '^(ok|not ok) - |^# ' "$out" | tail -n 25 | sed 's/^/    # /'
  fi
  echo "    # $name: $((SECONDS - start))s"
  rm -f "$out"
}

selected() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# Asked for by name but not built: a failure if its source exists (the build
# went wrong), a note otherwise (e.g. test_sizeclass.c not written yet).
for name in ${ONLY:-}; do
  if [ ! -x "$BUILD/tests/$name" ] && [ ! -f "tests/$name.sh" ]; then
    if [ -f "tests/$name.c" ]; then
      echo "not ok - $name: tests/$name.c exists but $BUILD/tests/$name was not built"
      fail=$((fail + 1))
    else
      echo "# $name: no such test, skipped"
    fi
  fi
done

for bin in "$BUILD"/tests/test_*; do
  [ -f "$bin" ] && [ -x "$bin" ] || continue
  name=$(basename "$bin")
  case $name in *.*) continue ;; esac          # logs and other by-products
  selected "$name" || continue
  run_one "$name" "$bin"
done
if [ "$SANITIZED" != 1 ]; then
  for sh in tests/test_*.sh; do
    [ -f "$sh" ] || continue
    name=$(basename "$sh" .sh)
    selected "$name" || continue
    run_one "$name" bash "$sh"
  done
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
