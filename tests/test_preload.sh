#!/usr/bin/env bash
# Real programs under LD_PRELOAD=libhakmem.so: each must exit cleanly and print
# exactly what it prints under glibc's malloc.
set -u
BUILD=${BUILD:-build}
LIB=$(cd "$BUILD" && pwd)/libhakmem.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() {  # name, command string (run by bash -c)
  local name=$1 cmd=$2
  local tool=${cmd%% *}
  if ! command -v "$tool" >/dev/null 2>&1; then echo "ok - preload:$name # SKIP $tool not installed"; return; fi
  timeout 300 bash -c "$cmd" >"$tmp/ref" 2>"$tmp/ref.err"
  local rc_ref=$?
  # The preload is exported inside, so every process of the pipeline runs on hakmem.
  timeout 300 bash -c "export LD_PRELOAD=$LIB; $cmd" >"$tmp/out" 2>"$tmp/out.err"
  local rc=$?
  if [ $rc -ne $rc_ref ]; then
    echo "not ok - preload:$name: exit status $rc under hakmem, $rc_ref under glibc"
    head -5 "$tmp/out.err" | sed 's/^/    # /'
  elif ! cmp -s "$tmp/ref" "$tmp/out"; then
    echo "not ok - preload:$name: output differs from glibc's"
    diff "$tmp/ref" "$tmp/out" | head -5 | sed 's/^/    # /'
  elif grep -q '^hakmem:' "$tmp/out.err"; then
    echo "not ok - preload:$name: hakmem reported an error"
    grep '^hakmem:' "$tmp/out.err" | head -3 | sed 's/^/    # /'
  else
    echo "ok - preload:$name ($(wc -c <"$tmp/out") bytes of output)"
  fi
}

# Is the library really in use?  The exit report only appears when it is.
if HAKMEM_STATS=1 LD_PRELOAD=$LIB ls / 2>&1 >/dev/null | grep -q '^hakmem: statistics'; then
  echo "ok - preload:library_active"
else
  echo "not ok - preload:library_active: HAKMEM_STATS=1 report missing under LD_PRELOAD"
fi

PY=$(command -v python3 || true)
check python_json "$PY -c '
import json, hashlib
d = [{\"id\": i, \"name\": \"item%d\" % i, \"tags\": [i % 7, i % 11, str(i)], \"v\": i * 0.5} for i in range(200000)]
s = json.dumps(d)
e = json.loads(s)
assert e == d
print(len(s), hashlib.sha256(s.encode()).hexdigest())
'"

check python_dicts "$PY -c '
import random
random.seed(7)
m = {}
for i in range(300000):
    k = random.randrange(100000)
    if k in m and i % 3 == 0: del m[k]
    else: m[k] = [k] * (k % 17)
print(len(m), sum(len(v) for v in m.values()))
'"

check sqlite3_index "sqlite3 $tmp/db.sqlite <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, s TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
INSERT INTO t(k, s) SELECT (x * 7919) % 100003, printf('row-%08d-%x', x, x * 31) FROM c;
CREATE INDEX t_k ON t(k);
SELECT count(*), sum(k), min(s), max(s) FROM t;
SELECT k, count(*) FROM t WHERE k BETWEEN 5000 AND 5010 GROUP BY k;
SELECT count(*) FROM t a JOIN t b ON a.k = b.k WHERE a.id < 2000;
SQL
rm -f $tmp/db.sqlite"

repo=$tmp/repo
git init -q "$repo" && git -C "$repo" config user.email t@t && git -C "$repo" config user.name t
for i in $(seq 1 30); do echo "line $i" >>"$repo/f$((i % 5)).txt"; git -C "$repo" add -A; git -C "$repo" commit -qm "commit $i"; done
check git_log "git -C $repo log --stat --format='%s' | head -200"
check git_repack "git -C $repo gc -q --aggressive && git -C $repo fsck --no-progress 2>&1 && git -C $repo count-objects"

seq 1 300000 | awk '{ printf "%08x %d\n", ($1 * 2654435761) % 4294967296, $1 }' >"$tmp/nums"
check sort_uniq "sort -k1,1 $tmp/nums | uniq -c -w4 | sort -n | tail -5"

cat >"$tmp/prog.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
struct node { struct node *next; int v; };
int main(void) { struct node *h = 0; for (int i = 0; i < 1000; i++) { struct node *n = malloc(sizeof *n); n->v = i; n->next = h; h = n; }
  long s = 0; while (h) { struct node *n = h->next; s += h->v; free(h); h = n; } printf("%ld\n", s); return 0; }
C
check gcc_compile "gcc -O2 -Wall -c $tmp/prog.c -o $tmp/prog.o && gcc $tmp/prog.o -o $tmp/prog && $tmp/prog"
