#!/usr/bin/env bash
# The HAKMEM_* options of README.md's table, under LD_PRELOAD: a valid value
# is silent; a malformed or out-of-range one prints exactly one warning that
# names the variable and the default (HAKMEM_SECURE: the strictest level, and
# the program runs hardened), and the program still works; a misspelt name
# gets one warning with the closest name; the extreme values work;
# HAKMEM_STATS=1 prints the report to stderr at exit.
set -u
BUILD=${BUILD:-build}
LIB=$(cd "$BUILD" && pwd)/libhakmem.so
if [ ! -f "$LIB" ]; then echo "not ok - options:library: $LIB missing"; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A program that allocates (ls does; /bin/true may never call malloc).
prog=(ls -la /usr/lib)
"${prog[@]}" >"$tmp/ref" 2>/dev/null

# name default, from README's table rows: | `HAKMEM_X` | default | meaning |
mapfile -t opts < <(sed -n 's/^| `\(HAKMEM_[A-Z_]*\)` | \([0-9][0-9]*\) |.*/\1 \2/p' README.md)
if [ ${#opts[@]} -eq 0 ]; then echo "not ok - options:readme_table: no HAKMEM_* rows found in README.md"; exit 1; fi

for row in "${opts[@]}"; do
  name=${row% *} def=${row#* }
  # valid: the default itself -> silent
  env "$name=$def" LD_PRELOAD="$LIB" "${prog[@]}" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 0 ] && cmp -s "$tmp/ref" "$tmp/out" && [ ! -s "$tmp/err" ]; then echo "ok - options:${name}_valid"
  else echo "not ok - options:${name}_valid: $name=$def: exit $rc, stderr: $(head -c 200 "$tmp/err")"; fi
  # malformed / out of range -> one warning naming the variable and the default
  bad_ok=1 why=""
  for v in abc 5x "" -1 99999999999 999999999999999999999999; do
    env "$name=$v" LD_PRELOAD="$LIB" "${prog[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    n=$(grep -c "$name" "$tmp/err")
    lines=$(wc -l <"$tmp/err")
    if [ $rc -ne 0 ] || ! cmp -s "$tmp/ref" "$tmp/out"; then bad_ok=0 why="$name='$v': exit $rc or output changed"; break; fi
    want="the default $def"
    [ "$name" = HAKMEM_SECURE ] && want="the strictest, 2"
    if [ "$n" -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -q "$want" "$tmp/err"; then
      bad_ok=0 why="$name='$v': expected one warning line naming $name and $want, got: $(head -c 300 "$tmp/err" | tr '\n' '|')"
      break
    fi
  done
  if [ $bad_ok -eq 1 ]; then echo "ok - options:${name}_malformed_warns_once"; else echo "not ok - options:${name}_malformed_warns_once: $why"; fi
done

# A malformed request for hardening runs hardened (guard pages: mprotect
# calls in the statistics), never unhardened.
HAKMEM_SECURE=yes HAKMEM_STATS=1 LD_PRELOAD="$LIB" "${prog[@]}" >"$tmp/out" 2>"$tmp/err"
guards=$(sed -n 's/.*mprotect \([0-9]*\).*/\1/p' "$tmp/err")
if [ "${guards:-0}" -gt 0 ] && cmp -s "$tmp/ref" "$tmp/out"; then echo "ok - options:secure_malformed_runs_hardened ($guards mprotect calls)"
else echo "not ok - options:secure_malformed_runs_hardened: mprotect calls '${guards:-none}', stderr: $(head -c 300 "$tmp/err" | tr '\n' '|')"; fi

# A misspelt option: one warning naming it and the option it resembles.
HAKMEM_PURGE_DELAY=5 LD_PRELOAD="$LIB" "${prog[@]}" >"$tmp/out" 2>"$tmp/err"
if [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "HAKMEM_PURGE_DELAY is not a hakmem option (did you mean HAKMEM_PURGE_DELAY_MS?)" "$tmp/err"
then echo "ok - options:unknown_name_warns_once"
else echo "not ok - options:unknown_name_warns_once: stderr: $(head -c 300 "$tmp/err" | tr '\n' '|')"; fi

# Extreme values of the tuning options still run a real workload correctly.
cat >"$tmp/work.py" <<'PY'
import json
d = [{"k": i, "s": "x" * (i % 300)} for i in range(60000)]
for r in range(2):
    d = json.loads(json.dumps(d))
print(sum(len(x["s"]) for x in d))
PY
# (the interpreter itself, not a pyenv-style shim script in front of it)
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)
if [ -n "$PY" ]; then
  "$PY" "$tmp/work.py" >"$tmp/ref.py" 2>/dev/null
  for setting in HAKMEM_PURGE_DELAY_MS=0 HAKMEM_PURGE_DELAY_MS=60000 HAKMEM_SEGMENT_CACHE=0 HAKMEM_SEGMENT_CACHE=1024 \
                 HAKMEM_THREAD_CACHE_KB=0 HAKMEM_THREAD_CACHE_KB=1048576; do
    grep -q "^${setting%%=*} " < <(printf '%s\n' "${opts[@]}") || continue
    env "$setting" LD_PRELOAD="$LIB" timeout 120 "$PY" "$tmp/work.py" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 0 ] && cmp -s "$tmp/ref.py" "$tmp/out" && [ ! -s "$tmp/err" ]; then echo "ok - options:workload_$setting"
    else echo "not ok - options:workload_$setting: exit $rc, stderr: $(head -c 200 "$tmp/err")"; fi
  done
else
  echo "ok - options:workloads # SKIP python3 not installed"
fi

if printf '%s\n' "${opts[@]}" | grep -q '^HAKMEM_STATS '; then
  HAKMEM_STATS=1 LD_PRELOAD="$LIB" "${prog[@]}" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  # (ls closes its stderr before exit: the report must come all the same)
  if [ $rc -eq 0 ] && cmp -s "$tmp/ref" "$tmp/out" && grep -q '^hakmem: statistics' "$tmp/err"; then echo "ok - options:stats_report"
  else echo "not ok - options:stats_report: exit $rc, stderr: $(head -c 200 "$tmp/err")"; fi
fi
