#!/usr/bin/env bash
# sqlite.sh ROWS: sqlite3 under the allocator (the caller's LD_PRELOAD and
# HAKMEM_* settings).  Builds an in-memory table of ROWS rows (an integer
# key, a text of 82-87 characters, a blob of 0-699 bytes), indexes the text,
# scans it with LIKE and sorts by the blob.  sqlite3's page cache allocates
# 4104-, 4368- and 5024-byte blocks, sizes just above a power of two.
# Prints the RESULT line: rows per CPU second of sqlite3 (user + system).
set -euo pipefail
rows=${1:-200000}
sql="CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c BLOB);
WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < $rows)
  INSERT INTO t SELECT i, printf('%d-%s', i, hex(randomblob(40))), randomblob(i % 700) FROM r;
CREATE INDEX tb ON t(b);
SELECT count(*), sum(length(c)) FROM t WHERE b LIKE '1%';
SELECT b FROM t ORDER BY c LIMIT 5;"
TIMEFORMAT='%U %S'
exec 3>&2                  # sqlite3's own stderr (and a heap profile's report) stays out of the times
t=$({ time sqlite3 :memory: "$sql" >/dev/null 2>&3; } 2>&1)
awk -v rows="$rows" '{ secs = $1 + $2; if (secs <= 0) exit 1
  printf "RESULT ops=%d secs=%.6f ops_per_sec=%.0f\n", rows, secs, rows / secs }' <<<"$t"
