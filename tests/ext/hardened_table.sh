#!/usr/bin/env bash
# The table of docs/hardening.md: GrapheneOS hardened_malloc's test cases
# (tests/ext/hardened_malloc.c) and the probes of issue 34's items 1-9
# (tests/ext/hardening_probes.c), each run once under glibc's malloc, LLVM's
# Scudo (libclang_rt.scudo_standalone, LD_PRELOAD) and hakmem (LD_PRELOAD:
# default, HAKMEM_SECURE=1, HAKMEM_SECURE=2).  Prints markdown on stdout.
#   make build/ext/hardened_malloc build/ext/hardening_probes && tests/ext/hardened_table.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
lib=$(cd "$BUILD" && pwd)/libhakmem.so
scudo=${SCUDO:-$(ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.scudo_standalone-x86_64.so 2>/dev/null | sort -V | tail -1)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names=(glibc scudo hakmem secure1 secure2)
run() {  # config program
  case $1 in
    glibc) env EXT_ALLOCATOR=glibc "$2" --outcomes ;;
    scudo) [ -n "$scudo" ] && env EXT_ALLOCATOR=scudo LD_PRELOAD="$scudo" "$2" --outcomes ;;
    hakmem) env EXT_ALLOCATOR=hakmem LD_PRELOAD="$lib" "$2" --outcomes ;;
    secure1) env EXT_ALLOCATOR=hakmem-secure LD_PRELOAD="$lib" HAKMEM_SECURE=1 "$2" --outcomes ;;
    secure2) env EXT_ALLOCATOR=hakmem-secure LD_PRELOAD="$lib" HAKMEM_SECURE=2 "$2" --outcomes ;;
  esac
}
for n in "${names[@]}"; do
  run "$n" "$BUILD/ext/hardened_malloc" >"$tmp/cases.$n" 2>/dev/null
  run "$n" "$BUILD/ext/hardening_probes" >"$tmp/probes.$n" 2>/dev/null
done

# A cell: "pass"/"FAIL" and what happened, shortened.
cell() {  # verdict what
  local what=$2
  case $what in
    SIGABRT:*|Aborted*) what=abort ;;
    "not caught (exit status 0)") what="not caught" ;;
    "not followed, not reported") what="not followed" ;;
    *" pairs of processes had the same address") what="${what%% of *} equal pairs" ;;
    "SIGSEGV at the access"|"Segmentation fault") what=SIGSEGV ;;
    "SIGBUS at the access"|"Bus error") what=SIGBUS ;;
    "exit status 0") what=runs ;;
  esac
  case $1 in
    pass) echo "$what" ;;
    FAIL) echo "**$what**" ;;
    *) echo "n/a" ;;
  esac
}
# The rows of table (cases, probes): the first columns from glibc's run,
# then one cell per configuration.
rows() {  # table
  local fields=4
  [ "$1" = probes ] && fields=5
  while IFS= read -r first; do
    local name label expect row
    IFS=$'\t' read -r name label expect _ <<<"$first"
    if [ "$1" = cases ]; then expect=$label label="\`$name\`"; else label="item ${label%%:*}: ${label#*: }"; fi
    row="| $label | $expect"
    for n in "${names[@]}"; do
      local line verdict what
      line=$(grep -P "^$name\t" "$tmp/$1.$n")
      if [ -z "$line" ]; then row+=" | (not run)"; continue; fi
      verdict=$(cut -f$((fields - 1)) <<<"$line")
      what=$(cut -f$fields <<<"$line")
      if [ "$verdict" = skip ]; then row+=" | skip"; else row+=" | $(cell "$verdict" "$what")"; fi
    done
    echo "$row |"
  done <"$tmp/$1.glibc"
}
echo "| case | passes if | glibc $(ldd --version | head -1 | grep -oE '[0-9.]+$') | Scudo (LLVM $(echo "$scudo" | grep -oE 'llvm-[0-9]+' | cut -d- -f2)) | hakmem | hakmem \`SECURE=1\` | hakmem \`SECURE=2\` |"
echo "|---|---|---|---|---|---|---|"
rows cases
rows probes
