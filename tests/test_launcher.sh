#!/usr/bin/env bash
# The launcher tools/hakmem, from the source tree: run preloads the library
# (the statistics report proves it is active), sets the options, keeps the
# arguments and the exit status; --help documents every command and option the
# script accepts; compare prints one row per allocator and flags a program
# whose output or exit status depends on the allocator.  (The installed
# launcher is checked by test_install.sh.)
set -u
BUILD=${BUILD:-build}
LIB=$(cd "$BUILD" && pwd)/libhakmem.so
H=tools/hakmem
if [ ! -f "$LIB" ]; then echo "not ok - launcher:library: $LIB missing"; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
result() {  # name, condition status, why
  if [ "$2" -eq 0 ]; then echo "ok - launcher:$1"; else echo "not ok - launcher:$1: $3"; fi
}

# Found from the source tree (the build directory next to tools/) unless told.
found=$($H lib 2>&1)
if [ "$BUILD" = build ]; then
  [ "$found" = "$LIB" ]; result lib_found_in_tree $? "hakmem lib printed '$found', expected $LIB"
fi
found=$($H lib --lib "$BUILD/libhakmem.so" 2>&1)
[ "$found" = "$LIB" ]; result lib_option $? "hakmem lib --lib printed '$found'"

# run: the library is preloaded and active (the report only exists under hakmem).
$H run --lib "$LIB" --stats -- ls / >"$tmp/out" 2>"$tmp/err"
rc=$?
grep -q '^hakmem: statistics' "$tmp/err" && [ $rc -eq 0 ] && ls / | cmp -s - "$tmp/out"
result run_stats_report $? "exit $rc, stderr: $(head -c 200 "$tmp/err")"
$H run --lib "$LIB" -- ls / 2>"$tmp/err" >/dev/null
[ ! -s "$tmp/err" ]; result run_quiet_without_stats $? "stderr: $(head -c 200 "$tmp/err")"
# A program that never allocates (true) gets its report too.
$H run --lib "$LIB" --stats -- true 2>"$tmp/err"
grep -q '^hakmem: statistics' "$tmp/err"; result run_stats_without_allocating $? "stderr: $(head -c 200 "$tmp/err")"
out=$(LD_PRELOAD=/nonexistent-lib.so $H run --lib "$LIB" -- printenv LD_PRELOAD 2>/dev/null)
[ "$out" = "$LIB:/nonexistent-lib.so" ]; result run_keeps_ld_preload $? "LD_PRELOAD was '$out'"
out=$($H run --lib "$LIB" --secure -- printenv HAKMEM_SECURE)
[ "$out" = 1 ]; result run_secure_sets_option $? "HAKMEM_SECURE was '$out'"
out=$($H run --lib "$LIB" -- printf '%s|' 'a b' '' '--stats' 'c*')
[ "$out" = 'a b||--stats|c*|' ]; result run_passes_arguments $? "got '$out'"
out=$($H run --lib "$LIB" printf x)
[ "$out" = x ]; result run_without_double_dash $? "got '$out'"
$H run --lib "$LIB" -- sh -c 'exit 7'
rc=$?
[ $rc -eq 7 ]; result run_exit_status $? "exit status $rc, expected 7"

# Errors: usage errors exit 2 with one message, never run anything.
for args in "bogus" "run --bogus -- true" "run" "compare -n 0 -- true" "run --lib /nonexistent.so -- true"; do
  # shellcheck disable=SC2086
  $H $args >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q '^hakmem: ' "$tmp/err"
  result "usage_error($args)" $? "exit $rc, stderr: $(head -c 200 "$tmp/err")"
done

# --help names every command and option the script's case statements accept.
$H --help >"$tmp/help"
rc=$?
accepted=$(sed -n 's/^ *\(-[-a-z|]*\|[a-z|]*\)) .*/\1/p' "$H" | tr '|' '\n' | grep -vxE 'help|-\*|\*|--' | sort -u)
missing=""
for o in $accepted; do grep -qE -- "(^| )$o( |,|$)" "$tmp/help" || missing="$missing $o"; done
[ $rc -eq 0 ] && [ -n "$accepted" ] && [ -z "$missing" ]
result help_documents_everything $? "exit $rc; not in --help:${missing:- (no options parsed from $H)}"

# compare: a table with a row per allocator, medians that are numbers.
if [ -x /usr/bin/time ]; then
  start=$SECONDS
  seq 1 200000 | awk '{ printf "%08x %d\n", ($1 * 2654435761) % 4294967296, $1 }' >"$tmp/nums"
  $H compare --lib "$LIB" -n 3 -- sort -k1,1 "$tmp/nums" >"$tmp/out" 2>&1
  rc=$?
  rows=$(grep -cE '^(glibc|hakmem|mimalloc) +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9] +([0-9.]+x|-) +[0-9.]+x +ok$' "$tmp/out")
  want=2; grep -q '^mimalloc ' "$tmp/out" && want=3
  [ $rc -eq 0 ] && [ "$rows" -eq "$want" ] && grep -q '^glibc ' "$tmp/out" && grep -q '^hakmem ' "$tmp/out"
  result compare_table $? "exit $rc, $rows good rows of $want: $(tr '\n' '|' <"$tmp/out" | head -c 400)"
  echo "# launcher:compare_table: $((SECONDS - start))s"
  # A program whose output depends on the allocator is flagged, exit status 1.
  $H compare --lib "$LIB" -n 1 -- sh -c 'echo "$LD_PRELOAD"' >"$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -qE "^hakmem .*output differs from glibc's$" "$tmp/out"
  result compare_flags_output $? "exit $rc: $(tr '\n' '|' <"$tmp/out" | head -c 400)"
  $H compare --lib "$LIB" -n 1 -- sh -c '[ -z "$LD_PRELOAD" ] || kill -ABRT $$' >"$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -qE '^hakmem .*exit signal-6 \(glibc: 0\)$' "$tmp/out"
  result compare_flags_crash $? "exit $rc: $(tr '\n' '|' <"$tmp/out" | head -c 400)"
else
  echo "ok - launcher:compare # SKIP /usr/bin/time (Debian package time) not installed"
fi
