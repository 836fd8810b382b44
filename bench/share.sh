#!/usr/bin/env bash
# share.sh [-i INPUT] LIB PROGRAM ARGS...: the share of a program's
# instructions that its allocator executes.  Runs PROGRAM under callgrind
# (valgrind; user space only, every thread and child) with LIB preloaded
# ("glibc": none), and prints the instructions each object executed itself,
# then the total and LIB's share of it.  An allocator whose share is s cannot
# make the program faster than 1 - s of its time by executing fewer
# instructions (docs/performance.md, "How far the targets are").
set -euo pipefail
input=/dev/null
if [ "${1:-}" = -i ]; then input=$2; shift 2; fi
[ $# -ge 2 ] || { echo "usage: bench/share.sh [-i INPUT] LIB|glibc PROGRAM ARGS..." >&2; exit 2; }
lib=$1
shift
preload=$lib
if [ "$lib" = glibc ]; then preload=""; lib=libc.so; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
valgrind --tool=callgrind --trace-children=yes \
  --callgrind-out-file="$dir/cg.%p" env LD_PRELOAD="$preload" "$@" <"$input" >"$dir/out" 2>"$dir/err" ||
  { tail -5 "$dir/err" >&2; exit 1; }
python3 - "$(basename "$lib")" "$dir"/cg.* <<'EOF'
import collections, re, sys
# Each cost line belongs to the object named by the last "ob=" line; names
# are compressed ("(3) /path" the first time, "(3)" after), and a cost line
# that follows "calls=" is the callee's inclusive cost, not the caller's own.
lib, files = sys.argv[1], sys.argv[2:]
own = collections.Counter()
for path in files:
    names, ob, skip = {}, None, False
    for line in open(path, errors="replace"):
        if skip:
            skip = False
            continue
        m = re.match(r"(c?ob)=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
        if m:
            if m.group(3):
                names[m.group(2)] = m.group(3)
            if m.group(1) == "ob":
                ob = m.group(2)
        elif line.startswith("calls="):
            skip = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if ob is not None and len(parts) >= 2 and parts[1].isdigit():
                own[names.get(ob, ob)] += int(parts[1])
total = sum(own.values())
for name, n in own.most_common(8):
    print(f"{n:>16,} {name}")
stem = "/" + lib.split(".so")[0] + ".so"
mine = sum(n for name, n in own.items() if stem in name)
print(f"{total:>16,} in all; {lib}: {mine / total:.4f}")
EOF
