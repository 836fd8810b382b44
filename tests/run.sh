#!/usr/bin/env bash
# Run every test program ($BUILD/tests/test_*) and script (tests/test_*.sh),
# each under a time limit, and count their "ok -" / "not ok -" lines.
# Env: BUILD (default build), ONLY="name ..." to restrict, SANITIZED=1 to skip
# scripts, TEST_TIMEOUT seconds per test (default 300).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TIMEOUT=${TEST_TIMEOUT:-300}
pass=0 fail=0

run_one() {  # name, command...
  local name=$1; shift
  local out rc start=$SECONDS
  out=$(mktemp)
  timeout --kill-after=10 "$TIMEOUT" "$@" >"$out" 2>&1
  rc=$?
  local ok nok
  ok=$(grep -c '^ok - ' "$out")
  nok=$(grep -c '^not ok - ' "$out")
  grep -E '^(ok|not ok) - ' "$out"
  pass=$((pass + ok)); fail=$((fail + nok))
  if [ "$rc" -ne 0 ] && [ "$nok" -eq 0 ]; then
    fail=$((fail + 1))
    local why="exit status $rc"
    [ "$rc" -eq 124 ] && why="timed out after ${TIMEOUT}s"
    [ "$rc" -gt 128 ] && [ "$rc" -ne 124 ] && why="killed by signal $((rc - 128))"
    echo "not ok - $name: $why"
    tail -n 20 "$out" | sed 's/^/    # /'
  elif [ "$nok" -gt 0 ]; then
    grep -vE '^(ok|not ok) - ' "$out" | tail -n 20 | sed 's/^/    # /'
  fi
  echo "    # $name: $((SECONDS - start))s"
  rm -f "$out"
}

selected() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

for bin in "$BUILD"/tests/test_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  selected "$name" || continue
  run_one "$name" "$bin"
done
if [ "${SANITIZED:-0}" != 1 ]; then
  for sh in tests/test_*.sh; do
    [ -f "$sh" ] || continue
    name=$(basename "$sh" .sh)
    selected "$name" || continue
    run_one "$name" env BUILD="$BUILD" bash "$sh"
  done
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
