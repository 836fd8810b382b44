#!/usr/bin/env bash
# redis-server under LD_PRELOAD=libhakmem.so (on a Unix socket in a temporary
# directory: no port to collide with).  A data check — load strings of 1 B to
# 500 KiB, lists, hashes, sets, sorted sets and appended strings, overwrite and
# delete some, read everything back, DEBUG RELOAD (the whole dataset rebuilt
# from an RDB dump) and the dataset digest before and after, then FLUSHALL
# ASYNC (freed on a background thread) — must print exactly what it prints
# under glibc's malloc, with every value as generated; then a short
# redis-benchmark run must complete every test; the server must shut down with
# status 0 and hakmem must report no error.  Every step has a time limit.
set -u
BUILD=${BUILD:-build}
LIB=$(cd "$BUILD" && pwd)/libhakmem.so
N=${REDIS_KEYS:-20000}
for tool in redis-server redis-cli redis-benchmark; do
  if ! command -v $tool >/dev/null; then echo "ok - redis # SKIP $tool not installed (Debian: redis-server, redis-tools)"; exit 0; fi
done
if [ ! -f "$LIB" ]; then echo "not ok - redis:library: $LIB missing"; exit 1; fi
tmp=$(mktemp -d)
server=""
stop_server() { [ -z "$server" ] || { kill -9 "$server" 2>/dev/null; wait "$server" 2>/dev/null; server=""; }; }
trap 'stop_server; rm -rf "$tmp"' EXIT
trap 'exit 143' TERM INT  # (so that the EXIT trap stops the server)
sock=$tmp/redis.sock
cli() { timeout 60 redis-cli -s "$sock" "$@"; }

# ---- the data: commands in Redis's protocol (values up to 500 KiB) -----------
awk -v n="$N" '
function cmd(argc, a, b, c, d,   s) {
  s = "*" argc "\r\n$" length(a) "\r\n" a "\r\n$" length(b) "\r\n" b "\r\n"
  if (argc > 2) s = s "$" length(c) "\r\n" c "\r\n"
  if (argc > 3) s = s "$" length(d) "\r\n" d "\r\n"
  printf "%s", s
}
function value(i,   len) {   # deterministic text of a deterministic length
  len = (i % 1000 == 7) ? 100000 + (i * 7919) % 400000 : 1 + (i * 7919) % 2000
  return substr(base, i % 97 + 1, len)
}
BEGIN {
  base = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
  while (length(base) < 600000) base = base base
  for (i = 0; i < n; i++) cmd(3, "SET", "key:" i, value(i))
  for (i = 0; i < n; i++) {
    cmd(3, "RPUSH", "list:" i % 100, "item:" i)
    cmd(4, "HSET", "hash:" i % 50, "field:" i, i * 3)
    cmd(3, "SADD", "set:" i % 10, "m:" i)
    cmd(4, "ZADD", "zset", (i * 7) % 1000, "m:" i)
    cmd(3, "APPEND", "grow:" i % 20, substr(base, i % 50 + 1, 1 + i % 300))
  }
  for (i = 0; i < n; i++) {
    if (i % 3 == 0) cmd(2, "DEL", "key:" i)
    else if (i % 3 == 1) cmd(3, "SET", "key:" i, value(i + 1))
  }
  for (i = 0; i < n; i += 2) cmd(2, "LPOP", "list:" i % 100)
}' >"$tmp/load.resp"
# What reading every key:i back must print, given the commands above.
awk -v n="$N" '
BEGIN {
  base = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
  while (length(base) < 600000) base = base base
  for (i = 0; i < n; i++) {
    k = (i % 3 == 1) ? i + 1 : i
    len = (k % 1000 == 7) ? 100000 + (k * 7919) % 400000 : 1 + (k * 7919) % 2000
    print (i % 3 == 0) ? "" : substr(base, k % 97 + 1, len)
  }
}' | md5sum >"$tmp/expected.md5"
{
  for ((i = 0; i < N; i++)); do echo "GET key:$i"; done
  echo "DBSIZE"
  for ((j = 0; j < 100; j++)); do echo "LRANGE list:$j 0 -1"; done
  for ((j = 0; j < 50; j++)); do echo "HLEN hash:$j"; echo "HMGET hash:$j field:$j field:$((j + 50)) field:$((N - 50 + j))"; done
  for ((j = 0; j < 10; j++)); do echo "SCARD set:$j"; echo "SORT set:$j ALPHA LIMIT 0 100"; done
  echo "ZRANGE zset 0 200 WITHSCORES"
  for ((j = 0; j < 20; j++)); do echo "GET grow:$j"; done
  echo "OBJECT ENCODING list:0"; echo "OBJECT ENCODING hash:0"; echo "OBJECT ENCODING zset"
  echo "DEBUG DIGEST"; echo "DEBUG RELOAD"; echo "DEBUG DIGEST"; echo "DBSIZE"
} >"$tmp/read.txt"

start_server() {  # LD_PRELOAD value ("" for glibc)
  rm -f "$sock" "$tmp/dump.rdb"
  # (env execs redis-server: $! is the server, for kill and /proc/$!/maps)
  env ${1:+LD_PRELOAD="$1"} redis-server --port 0 --unixsocket "$sock" --dir "$tmp" \
    --save "" --appendonly no --enable-debug-command local --lazyfree-lazy-user-flush yes \
    --logfile "$tmp/server.log" >"$tmp/server.out" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    [ "$(cli ping 2>/dev/null)" = PONG ] && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  return 1
}
shutdown_server() {  # sets server_rc to the server's exit status
  cli shutdown nosave >/dev/null 2>&1
  for _ in $(seq 1 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$server" 2>/dev/null && kill -9 "$server"
  wait "$server"; server_rc=$?
  server=""
}

# The data check under one allocator: its output in $tmp/data.$2.
data_check() {  # LD_PRELOAD value, label
  local t0=$SECONDS
  if ! start_server "$1"; then echo "not ok - redis:$2_start: server did not answer PING within 10 s"; tail -5 "$tmp/server.log" "$tmp/server.out" | sed 's/^/    # /'; stop_server; return 1; fi
  if [ -n "$1" ]; then
    if grep -q "$1" "/proc/$server/maps"; then echo "ok - redis:server_on_hakmem"
    else echo "not ok - redis:server_on_hakmem: $1 is not mapped in the server"; fi
  fi
  cli --pipe <"$tmp/load.resp" >"$tmp/pipe.$2" 2>&1
  grep -q 'errors: 0, replies: ' "$tmp/pipe.$2"
  local loaded=$?
  cli <"$tmp/read.txt" >"$tmp/data.$2" 2>&1
  echo "FLUSHALL ASYNC" | cli >>"$tmp/data.$2" 2>&1
  sleep 0.2
  echo DBSIZE | cli >>"$tmp/data.$2" 2>&1
  shutdown_server
  echo "# redis:$2 data check: $((SECONDS - t0))s"
  if [ $loaded -ne 0 ]; then echo "not ok - redis:$2_load: $(tail -2 "$tmp/pipe.$2" | tr '\n' ' ')"; return 1; fi
  if [ "$server_rc" -ne 0 ]; then echo "not ok - redis:$2_exit: server exit status $server_rc"; tail -5 "$tmp/server.out" | sed 's/^/    # /'; return 1; fi
  return 0
}

data_check "" glibc || exit 1
if ! data_check "$LIB" hakmem; then
  grep '^hakmem:' "$tmp/server.out" | head -3 | sed 's/^/    # /'
  exit 1
fi
if grep -q '^hakmem:' "$tmp/server.out"; then
  echo "not ok - redis:hakmem_no_error: $(grep -m1 '^hakmem:' "$tmp/server.out")"
elif ! cmp -s "$tmp/data.glibc" "$tmp/data.hakmem"; then
  echo "not ok - redis:data_same_as_glibc: output differs"
  diff "$tmp/data.glibc" "$tmp/data.hakmem" | head -5 | cut -c1-200 | sed 's/^/    # /'
else
  echo "ok - redis:data_same_as_glibc ($(wc -l <"$tmp/data.hakmem") lines)"
fi
# The values themselves, not only the agreement of two runs.
head -n "$N" "$tmp/data.hakmem" | md5sum | cmp -s - "$tmp/expected.md5"
r1=$?
digests=$(grep -xE '[0-9a-f]{40}' "$tmp/data.hakmem" | sort -u | wc -l)
last=$(tail -n 1 "$tmp/data.hakmem")
if [ $r1 -ne 0 ]; then echo "not ok - redis:values: GET key:0..$((N - 1)) do not print the values written"
elif [ "$digests" -ne 1 ]; then echo "not ok - redis:values: the dataset digest changed across DEBUG RELOAD ($digests digests)"
elif [ "$last" != 0 ]; then echo "not ok - redis:values: DBSIZE after FLUSHALL ASYNC is '$last'"
else echo "ok - redis:values (every value, digest unchanged by DEBUG RELOAD, flushed)"
fi

# A short benchmark against the server on hakmem (the client runs on hakmem too).
t0=$SECONDS
if ! start_server "$LIB"; then echo "not ok - redis:benchmark_start: server did not answer PING within 10 s"; exit 1; fi
tests=set,get,incr,lpush,rpop,sadd,hset,zadd,lrange_100,mset
LD_PRELOAD=$LIB timeout 120 redis-benchmark -s "$sock" -q -n 20000 -c 20 -d 200 -t "$tests" >"$tmp/bench" 2>"$tmp/bench.err"
brc=$?
shutdown_server
tr '\r' '\n' <"$tmp/bench" | grep ' requests per second' >"$tmp/rps"
done_tests=0
for t in ${tests//,/ }; do grep -qi "^ *${t}[: ]" "$tmp/rps" && done_tests=$((done_tests + 1)); done
if [ $brc -ne 0 ] || [ "$done_tests" -ne 10 ] || [ "$server_rc" -ne 0 ] || grep -q '^hakmem:' "$tmp/server.out" "$tmp/bench.err"; then
  echo "not ok - redis:benchmark: exit $brc, $done_tests of 10 tests done, server exit $server_rc"
  cat "$tmp/bench.err" "$tmp/server.out" | head -5 | sed 's/^/    # /'
else
  echo "ok - redis:benchmark (10 tests of 20000 requests)"
  sed 's/^ */# redis-benchmark on hakmem: /; s/, p50=.*//' "$tmp/rps"
fi
echo "# redis:benchmark: $((SECONDS - t0))s"
