#!/usr/bin/env bash
# redis.sh REQUESTS: a real application under the allocator.  Starts
# redis-server on a free loopback port, without persistence, with the
# caller's LD_PRELOAD and HAKMEM_* settings; drives it with redis-benchmark
# (SET, GET, LPUSH, LPOP; 256-byte values, 100,000 random keys, 50 clients,
# pipelines of 16) run without the preload, so only the server is measured;
# and prints the RESULT line: requests per second over the four tests, the
# server's peak RSS (VmHWM, read before it stops) and each test's rate.
# redis.sh field: mimalloc-bench's redis row instead (SUITE=mimalloc-bench):
# bench.sh's redis-benchmark command, and its time, 2,000,000 / the rate.
# SERVER_WRAP, when set, is a command put in front of the server (strace).
# The server is always stopped, also when something fails.
set -euo pipefail
n=${1:-100000}
preload=${LD_PRELOAD:-}
unset LD_PRELOAD
dir=$(mktemp -d)
server=""
cleanup() {
  [ -n "$server" ] && kill -9 "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

port=$((6399 + $$ % 500))
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }

LD_PRELOAD=$preload ${SERVER_WRAP:-} redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
  --dir "$dir" --logfile "$dir/log" &
server=$!
for _ in $(seq 100); do cli ping >/dev/null 2>&1 && break; sleep 0.05; done
pid=$(cli info server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')
[ -n "$pid" ] || { echo "redis-server did not start on port $port" >&2; cat "$dir/log" >&2; exit 1; }

if [ "$n" = field ]; then
  out=$(redis-benchmark -h 127.0.0.1 -p "$port" -r 1000000 -n 100000 -q -P 16 lpush a 1 2 3 4 5 lrange a 1 5)
else
  csv=$(redis-benchmark -h 127.0.0.1 -p "$port" -n "$n" -r 100000 -d 256 -c 50 -P 16 -t set,get,lpush,lpop --csv)
fi
hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$pid/status")
cli shutdown nosave >/dev/null 2>&1 || true
wait "$server" || true
server=""

if [ "$n" = field ]; then   # "...: 123456.79 requests per second, p50=...", after progress lines ending in \r
  tr '\r' '\n' <<<"$out" | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1 |
    awk -v hwm="$hwm" '$1 > 0 { printf "RESULT ops=1 secs=%.6f ops_per_sec=%.6g peak_rss_kib=%d\n", 2e6 / $1, $1 / 2e6, hwm; ok = 1 }
                       END { exit !ok }'
  exit
fi
# CSV lines: "SET","512820.50",...  Total time is the sum of n/rate per test.
awk -F'"' -v n="$n" -v hwm="$hwm" '
  $2 ~ /^[A-Z]+$/ && $4 > 0 { ops += n; secs += n / $4; extra = extra sprintf(" %s=%.0f", tolower($2), $4) }
  END { if (ops == 0) exit 1
        printf "RESULT ops=%d secs=%.6f ops_per_sec=%.0f peak_rss_kib=%d%s\n", ops, secs, ops / secs, hwm, extra }' <<<"$csv"
