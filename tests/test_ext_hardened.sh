#!/usr/bin/env bash
# GrapheneOS hardened_malloc's test cases, in our own versions
# (tests/ext/hardened_malloc.c), under hakmem with HAKMEM_SECURE=1 and 2: each
# case must be caught, or run clean, as hardened_malloc's suite expects of
# it (hardened_malloc's own API is skipped, with the reason).  What the
# default mode does with each is printed as notes ("# ... [hakmem]"), not
# asserted; tests/ext/hardened_table.sh puts them beside glibc and Scudo.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/ext/modes.sh
bin=$BUILD/ext/hardened_malloc
if [ ! -x "$bin" ]; then echo "not ok - hardened_malloc: $bin not built"; exit 0; fi

for level in 1 2; do
  tag="[hakmem-secure=$level]"
  out=$EXT_TMP/secure$level.out err=$EXT_TMP/secure$level.err
  ext_run hakmem-secure 600 "$out" "$err" env HAKMEM_SECURE=$level "$bin"
  lines=$(grep -cE '^(ok|not ok) - ' "$out")
  sed -E "s/^(ok - [^ ]+)( # SKIP .*)?$/\1 $tag\2/; s/^(not ok - [^:]+:[^:]+):/\1 $tag:/" "$out" | grep -E '^(ok|not ok) - '
  if [ "$EXT_RC" -gt 1 ] || [ "$lines" -eq 0 ]; then
    echo "not ok - hardened_malloc $tag: exit status $EXT_RC, $lines result lines"
    tail -n 5 "$err" | sed 's/^/    # /'
  fi
done

out=$EXT_TMP/default.out err=$EXT_TMP/default.err
ext_run hakmem 600 "$out" "$err" "$bin" --outcomes
while IFS=$'\t' read -r name _ verdict what; do
  echo "# hardened_malloc.c:$name [hakmem]: $verdict ($what)"
done <"$out"
