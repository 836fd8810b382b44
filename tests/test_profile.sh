#!/usr/bin/env bash
# The heap profiler (HAKMEM_PROFILE, src/profile.c) on a program with known
# call sites (tests/profile/sites.c), at the default rate: each site's share
# of the bytes allocated within 5 points of the truth (70/20/10), the total
# within 10 %, the leak report naming the leaking function and nothing else,
# the folded files well formed, the SVG flame graphs well-formed XML, the
# top-N table on stderr; a dump on HAKMEM_PROFILE_SIGNAL, by
# hakmem_profile_dump, and fork while threads are sampled, each within time;
# forked children sampling on their own; the launcher's file:line.
set -u
BUILD=${BUILD:-build}
LIB=$(cd "$BUILD" && pwd)/libhakmem.so
SITES=$(cd "$BUILD" && pwd)/tests/profile_sites
result() {  # name, condition status, why
  if [ "$2" -eq 0 ]; then echo "ok - profile:$1"; else echo "not ok - profile:$1: $3"; fi
}
if [ "${SANITIZED:-0}" = 1 ]; then echo "ok - profile # SKIP script tests do not run in sanitizer builds"; exit 0; fi
for f in "$LIB" "$SITES"; do
  [ -f "$f" ] || { echo "not ok - profile:build: $f missing"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
profiled() { timeout 120 env HAKMEM_PROFILE="$tmp/$1" LD_PRELOAD="$LIB" "${@:2}"; }

# ---- shares, total, leaks, formats ------------------------------------------
profiled s "$SITES" shares >"$tmp/out" 2>"$tmp/err"
rc=$?
alloc=$(ls "$tmp"/s.*.alloc.folded 2>/dev/null | head -1)
[ $rc -eq 0 ] && [ -n "$alloc" ]
result runs $? "exit $rc, files: $(ls "$tmp" | head -5 | tr '\n' ' ') stderr: $(head -c 300 "$tmp/err")"
[ -n "$alloc" ] || exit 1
base=${alloc%.alloc.folded}

# Folded: "frame;frame;... bytes", no empty frame.
bad=$(cat "$base".{leaks,peak,alloc}.folded | grep -Evc '^[^; ][^;]*(;[^;]+)* [0-9]+$')
[ "$bad" -eq 0 ] && [ -s "$alloc" ]; result folded_format $? "$bad malformed lines"

# Each site's bytes: the lines whose stack holds it.
share() { awk -v site="$1" '{ n = split($0, f, " "); v = f[n]; all += v; if ($0 ~ ("(^|;)" site "(;| )")) s += v }
                           END { printf "%.1f", all ? 100 * s / all : 0 }' "$2"; }
within() { awk -v a="$1" -v b="$2" -v d="$3" 'BEGIN { exit !(a - b <= d && b - a <= d) }'; }
big=$(share site_big "$alloc"); mid=$(share site_mid "$alloc"); leak=$(share site_leak "$alloc")
echo "# shares of the bytes allocated: site_big $big % (70), site_mid $mid % (20), site_leak $leak % (10)"
within "$big" 70 5; result share_big $? "site_big $big %, expected 70 +- 5"
within "$mid" 20 5; result share_mid $? "site_mid $mid %, expected 20 +- 5"
within "$leak" 10 5; result share_leak $? "site_leak $leak %, expected 10 +- 5"

asked=$(sed -n 's/^requested //p' "$tmp/out")
estimate=$(awk '{ n = split($0, f, " "); s += f[n] } END { printf "%.0f", s }' "$alloc")
echo "# bytes allocated: $asked, estimated $estimate"
[ -n "$asked" ] && awk -v e="$estimate" -v a="$asked" 'BEGIN { exit !(e > 0.9 * a && e < 1.1 * a) }'
result total_estimate $? "estimated $estimate of $asked bytes"

leaks=$base.leaks.folded
others=$(awk '{ n = split($0, f, " "); if (f[n] > 0 && $0 !~ /(^|;)site_leak(;| )/) print }' "$leaks" | head -3)
[ -s "$leaks" ] && [ -z "$others" ]; result leaks_name_only_the_leak $? "other stacks: $others"
leaked=$(share site_leak "$leaks")
[ "$leaked" = 100.0 ]; result leaks_all_from_the_leak $? "site_leak has $leaked % of the leaks"
peak=$(awk '{ n = split($0, f, " "); s += f[n] } END { print s + 0 }' "$base.peak.folded")
live=$(awk '{ n = split($0, f, " "); s += f[n] } END { print s + 0 }' "$leaks")
awk -v p="$peak" -v l="$live" 'BEGIN { exit !(p >= 0.98 * l && l > 0) }'
result peak_at_least_exit $? "peak $peak, live at exit $live"

grep -A3 'live at exit (leaks)' "$tmp/err" | grep -q ' site_leak$'
result top_table_on_stderr $? "stderr: $(head -c 400 "$tmp/err")"

if command -v python3 >/dev/null; then
  python3 - "$base".{leaks,peak,alloc}.svg >"$tmp/xml" 2>&1 <<'PY'
import sys, xml.etree.ElementTree as ET
for f in sys.argv[1:]:
    root = ET.parse(f).getroot()
    assert root.tag.endswith('svg'), f
    titles = [t.text for t in root.iter('{http://www.w3.org/2000/svg}title')]
    assert any(t and t.startswith('site_') for t in titles), f + ': no site frame'
PY
  result svg_well_formed $? "$(tail -2 "$tmp/xml")"
else
  echo "ok - profile:svg_well_formed # SKIP no python3 to parse the XML"
fi

# ---- dumps on demand, signal, fork ------------------------------------------
profiled d "$SITES" dump "$tmp/now" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q site_big "$tmp/now.alloc.folded" && [ -s "$tmp/now.alloc.svg" ]
result dump_call $? "exit $rc; $(ls "$tmp" | grep now | tr '\n' ' ') $(head -c 200 "$tmp/err")"

HAKMEM_PROFILE_SIGNAL=10 profiled g "$SITES" signal "$tmp/g" >"$tmp/out" 2>&1
rc=$?
n=$(ls "$tmp"/g.*.*.live.folded 2>/dev/null | wc -l)
[ $rc -eq 0 ] && [ "$n" -eq 3 ]; result signal_dumps $? "exit $rc, $n dumps; $(head -c 200 "$tmp/out")"

profiled f "$SITES" fork >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ]; result fork_while_sampling $? "exit $rc; $(head -c 200 "$tmp/out")"

# Forked children draw their own sample points: of 60 that allocate 100 KB
# each, about 11 sample (not 0, not all).
mkdir "$tmp/c"
profiled c/c "$SITES" children >"$tmp/out" 2>&1
rc=$?
n=$(ls "$tmp"/c | sed -n 's/^c\.\([0-9]*\)\..*/\1/p' | sort -u | wc -l)
echo "# $n of 60 forked children sampled"
[ $rc -eq 0 ] && [ "$n" -ge 1 ] && [ "$n" -le 40 ]; result children_draw_their_own $? "exit $rc, $n children sampled"

# The statistics report shows the profiler's tables.
HAKMEM_STATS=1 profiled t "$SITES" dump "$tmp/t" >/dev/null 2>"$tmp/err"
grep -qE '^  profile +[0-9]+ sampled blocks live .* tables [0-9.]+ MiB mapped, [0-9]+ KiB of it in use$' "$tmp/err"
result stats_line $? "$(grep -A2 'os calls' "$tmp/err" | head -3)"

# No system call per sample: signals stay unblocked while the tables are
# locked (about 1,600 samples here; two rt_sigprocmask calls each would be
# thousands more than the run makes unprofiled).
if command -v strace >/dev/null; then
  masks() { timeout 120 env "$@" LD_PRELOAD="$LIB" strace -f -qq -c -e trace=rt_sigprocmask -o "$tmp/st" "$SITES" shares >/dev/null 2>&1
            awk '$NF == "rt_sigprocmask" { print $4 }' "$tmp/st"; }
  off=$(masks HAKMEM_PROFILE=) on=$(masks HAKMEM_PROFILE="$tmp/m")
  [ -n "$off" ] && [ -n "$on" ] && [ "$on" -le $((off + 50)) ]
  result no_syscall_per_sample $? "rt_sigprocmask calls: ${on:-?} profiled, ${off:-?} not"
else
  echo "ok - profile:no_syscall_per_sample # SKIP no strace"
fi

# Off: no files, and the function says so.
timeout 60 env HAKMEM_PROFILE= LD_PRELOAD="$LIB" "$SITES" dump "$tmp/off" >/dev/null 2>&1
rc=$?
[ $rc -ne 0 ] && ! ls "$tmp"/off.* >/dev/null 2>&1; result off_writes_nothing $? "exit $rc"

# The launcher: run --profile sets the prefix and names the program's own
# functions (no dynamic symbol) with file:line.
if command -v addr2line >/dev/null; then
  (cd "$tmp" && timeout 120 "$OLDPWD/tools/hakmem" run --lib "$LIB" --profile="$tmp/l" -- "$SITES" shares >/dev/null 2>&1)
  rc=$?
  f=$(ls "$tmp"/l.*.alloc.folded 2>/dev/null | head -1)
  [ $rc -eq 0 ] && [ -n "$f" ] && grep -q 'shares_worker (sites\.c:[0-9]*);site_big [0-9]*$' "$f" &&
    ! grep -q 'sites+0x' "$f" && grep -q 'shares_worker (sites\.c:[0-9]*)' "${f%.folded}.svg" && python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "${f%.folded}.svg" 2>/dev/null
  result launcher_file_line $? "exit $rc; $(head -c 300 "$f" 2>/dev/null)"
else
  echo "ok - profile:launcher_file_line # SKIP no addr2line"
fi
