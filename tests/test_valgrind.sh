#!/usr/bin/env bash
# hakmem's code under valgrind's memcheck: no read of an uninitialised value,
# no access outside what it mapped, no bad system call argument, in the unit
# tests (hakmem linked in) and in real programs (hakmem preloaded).
# memcheck does not know hakmem's blocks (no client requests), so it checks
# hakmem's own work, not the programs' use of their blocks; ASan covers the
# rest (make test-sanitize).  Threaded stress tests are left out: valgrind
# runs one thread at a time and they would not finish in the time budget.
set -u
BUILD=${BUILD:-build}
LIB=$(cd "$BUILD" && pwd)/libhakmem.so
if ! command -v valgrind >/dev/null; then
  echo "ok - valgrind # SKIP valgrind not installed (Debian: valgrind)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Error exit status 99: a memcheck report.  nouserintercepts: memcheck must not
# replace the malloc of a preloaded library (hakmem's) with its own.
VG=(valgrind -q --error-exitcode=99 --soname-synonyms=somalloc=nouserintercepts)

verdict() {  # name rc log [expected-output-file actual-output-file]
  local name=$1 rc=$2 log=$3
  if [ "$rc" -eq 99 ]; then
    echo "not ok - valgrind:$name: memcheck reported errors:"; grep '^==' "$log" | head -20 | sed 's/^/    # /'
  elif [ "$rc" -ne 0 ] || grep -q '^not ok' "$log"; then
    echo "not ok - valgrind:$name: exit status $rc"; grep -v '^ok' "$log" | tail -8 | sed 's/^/    # /'
  elif [ $# -ge 5 ] && ! cmp -s "$4" "$5"; then
    echo "not ok - valgrind:$name: output differs from the run without valgrind"
  else
    echo "ok - valgrind:$name"
  fi
}

# Unit tests: every case must pass under memcheck too, except test_api's
# one_gigabyte: valgrind 3.19 marks the part that mremap(MREMAP_FIXED) adds to
# a moved mapping as not addressable, though the kernel maps it (the write
# works, and the case passes without valgrind).
for t in test_sizeclass test_api test_integrity test_lineage; do
  bin=$BUILD/tests/$t
  if [ ! -x "$bin" ]; then echo "not ok - valgrind:$t: $bin not built"; continue; fi
  cases=()
  [ "$t" = test_api ] && mapfile -t cases < <(sed -n 's/^TEST(\([a-z_0-9]*\)).*/\1/p' tests/test_api.c | grep -vx one_gigabyte)
  "${VG[@]}" "$bin" "${cases[@]}" >"$tmp/log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q '^ok - ' "$tmp/log"; then echo "not ok - valgrind:$t: ran no case"; continue; fi
  verdict "$t" $rc "$tmp/log"
done

# Real programs with hakmem preloaded; the stats report proves hakmem (not
# memcheck's own malloc) served them.
py=/usr/bin/python3
if [ -x "$py" ]; then
  code='import json; d=[{"k":i,"s":str(i)*3,"l":[i]*3} for i in range(20000)]; s=json.dumps(d); assert json.loads(s)==d; print(len(s))'
  "$py" -c "$code" >"$tmp/ref" 2>&1
  HAKMEM_STATS=1 LD_PRELOAD=$LIB "${VG[@]}" "$py" -c "$code" >"$tmp/out" 2>"$tmp/log"
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q '^hakmem' "$tmp/log"; then
    echo "not ok - valgrind:python3: no hakmem stats report: hakmem did not run"
  else verdict python3 $rc "$tmp/log" "$tmp/ref" "$tmp/out"; fi
fi
if command -v sqlite3 >/dev/null; then
  sql='create table t(a integer primary key, b text);
with recursive c(x) as (select 1 union all select x+1 from c where x<20000)
insert into t select x, hex(randomblob(20)) || x from c;
create index i on t(b);
select count(*), sum(length(b)) from t;'
  sqlite3 :memory: "$sql" >"$tmp/ref" 2>&1
  LD_PRELOAD=$LIB "${VG[@]}" sqlite3 :memory: "$sql" >"$tmp/out" 2>"$tmp/log"
  verdict sqlite3 $? "$tmp/log" "$tmp/ref" "$tmp/out"
fi
