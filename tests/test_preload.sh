#!/usr/bin/env bash
# Real programs under LD_PRELOAD=libhakmem.so: each must exit with the same
# status and print exactly what it prints under glibc's malloc, and hakmem
# must report no error.  A program that is not installed is skipped (one
# "ok - ... # SKIP" line); each run has a time limit (PRELOAD_TIMEOUT, 120 s).
# A note gives each check's time (both runs).
set -u
BUILD=${BUILD:-build}
LIB=$(cd "$BUILD" && pwd)/libhakmem.so
LIMIT=${PRELOAD_TIMEOUT:-120}
if [ ! -f "$LIB" ]; then echo "not ok - preload:library: $LIB missing"; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() {  # name, command string (run by bash -c)
  local name=$1 cmd=$2
  local tool=${cmd%% *}
  if [ -z "$tool" ] || ! command -v "$tool" >/dev/null 2>&1; then
    echo "ok - preload:$name # SKIP ${tool:-program} not installed"; return
  fi
  local start=$SECONDS
  timeout "$LIMIT" bash -c "$cmd" >"$tmp/ref" 2>"$tmp/ref.err"
  local rc_ref=$?
  # The preload is exported inside, so every process of the pipeline runs on hakmem.
  timeout "$LIMIT" bash -c "export LD_PRELOAD=$LIB; $cmd" >"$tmp/out" 2>"$tmp/out.err"
  local rc=$?
  if [ $rc -eq 124 ]; then
    echo "not ok - preload:$name: timed out after ${LIMIT}s under hakmem (glibc: exit status $rc_ref)"
  elif [ $rc -ne $rc_ref ]; then
    echo "not ok - preload:$name: exit status $rc under hakmem, $rc_ref under glibc"
    head -5 "$tmp/out.err" | sed 's/^/    # /'
  elif ! cmp -s "$tmp/ref" "$tmp/out"; then
    echo "not ok - preload:$name: output differs from glibc's"
    diff "$tmp/ref" "$tmp/out" | head -5 | sed 's/^/    # /'
  elif grep -q '^hakmem:' "$tmp/out.err"; then
    echo "not ok - preload:$name: hakmem reported an error"
    grep '^hakmem:' "$tmp/out.err" | head -3 | sed 's/^/    # /'
  elif [ $rc -ne 0 ]; then
    echo "not ok - preload:$name: exit status $rc (also under glibc: the check itself is broken)"
    head -5 "$tmp/ref.err" | sed 's/^/    # /'
  else
    echo "ok - preload:$name ($(wc -c <"$tmp/out") bytes of output)"
  fi
  echo "# preload:$name: $((SECONDS - start))s (glibc and hakmem)"
}

# Is the library really in use?  The exit report only appears when it is.
# shellcheck disable=SC2010  # ls is the program under test, not a file lister here
if HAKMEM_STATS=1 LD_PRELOAD=$LIB ls / 2>&1 >/dev/null | grep -q '^hakmem: statistics'; then
  echo "ok - preload:library_active"
else
  echo "not ok - preload:library_active: HAKMEM_STATS=1 report missing under LD_PRELOAD"
fi

# the interpreter itself, not a pyenv-style shim script in front of it
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)
cat >"$tmp/roundtrip.py" <<'PY'
import json, hashlib
d = [{"id": i, "name": "item%d" % i, "tags": [i % 7, i % 11, str(i)], "v": i * 0.5} for i in range(200000)]
s = json.dumps(d)
e = json.loads(s)
assert e == d
print(len(s), hashlib.sha256(s.encode()).hexdigest())
PY
check python_json "$PY $tmp/roundtrip.py"

cat >"$tmp/dicts.py" <<'PY'
import random
random.seed(7)
m = {}
for i in range(300000):
    k = random.randrange(100000)
    if k in m and i % 3 == 0: del m[k]
    else: m[k] = [k] * (k % 17)
print(len(m), sum(len(v) for v in m.values()))
PY
check python_dicts "$PY $tmp/dicts.py"

cat >"$tmp/threads.py" <<'PY'
import hashlib, threading
out = [None] * 4
def work(k):
    d = {}
    for i in range(150000):
        d[(k, i)] = str(i * k) * (i % 5)
        if i % 3 == 0: d.pop((k, i // 2), None)
    out[k] = hashlib.md5(repr(sorted(d.items())[:5000]).encode()).hexdigest() + " " + str(len(d))
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print(out)
PY
check python_threads "$PY $tmp/threads.py"

check sqlite3_index "sqlite3 $tmp/db.sqlite <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, s TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
INSERT INTO t(k, s) SELECT (x * 7919) % 100003, printf('row-%08d-%x', x, x * 31) FROM c;
CREATE INDEX t_k ON t(k);
SELECT count(*), sum(k), min(s), max(s) FROM t;
SELECT k, count(*) FROM t WHERE k BETWEEN 5000 AND 5010 GROUP BY k;
SELECT count(*) FROM t a JOIN t b ON a.k = b.k WHERE a.id < 2000;
SELECT k % 10, count(*), avg(length(s)) FROM t GROUP BY k % 10 ORDER BY 1;
SQL
rm -f $tmp/db.sqlite"

check sqlite3_memory "sqlite3 :memory: <<'SQL'
CREATE TABLE u(a INTEGER, b TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO u SELECT x, printf('%08d-%d', (x * 7919) % 1000003, x % 7) FROM c;
CREATE INDEX u_b ON u(b);
SELECT count(DISTINCT b), max(a), sum(length(b)) FROM u;
SELECT group_concat(b, ',') FROM (SELECT b FROM u ORDER BY b LIMIT 20);
SQL"

# git: a clone of this repository (its log, a change, status, diff), or a
# generated repository when there is no history to clone; then gc and fsck.
repo=$tmp/repo
if command -v git >/dev/null; then
  if git -C . rev-parse -q --verify HEAD >/dev/null 2>&1 && git clone -q --no-hardlinks . "$repo" 2>/dev/null; then
    echo "changed" >>"$repo/README.md"
    echo "new file" >"$repo/untracked.txt"
  else
    rm -rf "$repo"
    git init -q "$repo"
  fi
  git -C "$repo" config user.email t@t && git -C "$repo" config user.name t
  for i in $(seq 1 30); do
    echo "line $i" >>"$repo/f$((i % 5)).txt"
    git -C "$repo" add "f$((i % 5)).txt" && git -C "$repo" commit -qm "commit $i"
  done
fi
check git_log "git -C $repo log --oneline | head -50 && git -C $repo log --stat --format='%s' -40 | head -300"
check git_status "git -C $repo status --porcelain=v1 && git -C $repo diff --stat && git -C $repo diff | head -50"
check git_repack "git -C $repo gc -q --aggressive && git -C $repo fsck --no-progress 2>&1 && git -C $repo count-objects | cut -d, -f1"

check ls_usr_bin "ls -la /usr/bin >/dev/null && ls /usr/bin | wc -l && ls -laR /usr/include 2>/dev/null | wc -l"

seq 1 300000 | awk '{ printf "%08x %d\n", ($1 * 2654435761) % 4294967296, $1 }' >"$tmp/nums"
check sort_uniq "sort -k1,1 $tmp/nums | uniq -c -w4 | sort -n | tail -5"
check sort_parallel "sort --parallel=2 -S 64M -k2,2n -k1,1 $tmp/nums $tmp/nums | md5sum"

cat >"$tmp/prog.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
struct node { struct node *next; int v; };
int main(void) { struct node *h = 0; for (int i = 0; i < 1000; i++) { struct node *n = malloc(sizeof *n); n->v = i; n->next = h; h = n; }
  long s = 0; while (h) { struct node *n = h->next; s += h->v; free(h); h = n; } printf("%ld\n", s); return 0; }
C
check gcc_compile "gcc -O2 -Wall -c $tmp/prog.c -o $tmp/prog.o && gcc $tmp/prog.o -o $tmp/prog && $tmp/prog"

# Compilers at work: hakmem's own sources (gcc -O2 -g, the objects must be
# identical), and a template-heavy C++ program (cc1plus parses and optimizes
# much of the standard library) that then counts the words of this tree.
src=$PWD
mkdir "$tmp/hm"
check gcc_compile_hakmem "cd $tmp/hm && gcc -O2 -g -std=gnu11 -D_GNU_SOURCE -I$src/include -I$src/src -fPIC -c $src/src/*.c &&
  gcc -shared -pthread *.o -o hm.so && md5sum *.o && nm -D --defined-only hm.so | wc -l && rm -f *.o hm.so"
check gxx_compile_stl "g++ -O2 -Wall -frandom-seed=hakmem $src/tests/apps/wordfreq.cc -o $tmp/wordfreq &&
  cat $src/README.md $src/src/*.c $src/src/*.h | $tmp/wordfreq"
