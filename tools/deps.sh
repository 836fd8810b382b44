#!/usr/bin/env bash
# Install, from the distribution's packages, what a make target needs, on
# Debian 12 or 13 and Ubuntu 22.04 or 24.04: package names that carry a
# version (the clang runtime, Python's test suite, the t64-renamed
# libraries) are looked up in the apt index, not written here.
#
#   tools/deps.sh test        make test (the compilers, the programs run under
#                             hakmem, valgrind, stress-ng, Python's tests)
#   tools/deps.sh sanitize    make test-sanitize and make fuzz (clang and its
#                             sanitizer runtime)
#   tools/deps.sh bench       make bench (the peers' packages, the applications)
#   tools/deps.sh field       SUITE=mimalloc-bench (ruby, for its scripts' inputs)
#   tools/deps.sh heaps       bench/heaps.sh (mimalloc's headers, for mi_heap_*)
#   tools/deps.sh callgrind   bench/run.sh callgrind (valgrind); syscalls: strace
#   tools/deps.sh -n ...      print the resolved names, install nothing
#
# Services that packages would start on installation (redis-server) are kept
# from starting and left disabled: the tests and benchmarks start their own,
# on private ports.
set -euo pipefail

dry=0
if [ "${1:-}" = -n ]; then dry=1; shift; fi
[ $# -gt 0 ] || { echo "usage: tools/deps.sh [-n] test|sanitize|bench ..." >&2; exit 2; }

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# The index is needed to resolve names: fetched once if it is empty.
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ]; then
  $SUDO apt-get update -qq
fi

# The first of the names that the index knows.
pick() {
  local n
  for n in "$@"; do
    if apt-cache show "$n" >/dev/null 2>&1; then echo "$n"; return 0; fi
  done
  echo "tools/deps.sh: none of $* is in the package index" >&2
  return 1
}
# The versioned package a metapackage depends on (clang -> clang-14).
versioned() { apt-cache depends "$1" 2>/dev/null | grep -o -m1 -E "$2" || true; }

pkgs=()
for target in "$@"; do
  case $target in
    test)
      py=$(versioned python3 'python3\.[0-9]+')
      pkgs+=(make gcc g++ binutils procps coreutils python3 sqlite3 git pkgconf cmake
             redis-server redis-tools time valgrind stress-ng
             "$(pick "lib${py}-testsuite" libpython3-testsuite)") ;;
    sanitize)
      llvm=$(versioned clang 'clang-[0-9]+'); llvm=${llvm#clang-}
      pkgs+=(make clang "$(pick "libclang-rt-$llvm-dev" "libclang-common-$llvm-dev")") ;;
    bench)
      pkgs+=(make gcc time python3 sqlite3 redis-server redis-tools lua5.4 z3 perl
             "$(pick libmimalloc2.0 libmimalloc3)" "$(pick libjemalloc2)"
             "$(pick libtcmalloc-minimal4t64 libtcmalloc-minimal4)") ;;
    field) pkgs+=(ruby) ;;
    heaps) pkgs+=(make gcc libmimalloc-dev) ;;
    callgrind) pkgs+=(valgrind) ;;
    syscalls) pkgs+=(strace) ;;
    *) echo "tools/deps.sh: unknown target $target" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ $dry -eq 1 ]; then printf '%s\n' "${pkgs[@]}" | sort -u | tr '\n' ' '; echo; exit 0; fi
[ ${#missing[@]} -gt 0 ] || exit 0
echo "tools/deps.sh: installing ${missing[*]}" >&2
# policy-rc.d answering 101 keeps invoke-rc.d from starting services.
policy=/usr/sbin/policy-rc.d
had_policy=0; [ -e "$policy" ] && had_policy=1
if [ $had_policy -eq 0 ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod +x "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
if [[ " ${missing[*]} " == *" redis-server "* ]]; then
  { $SUDO systemctl disable redis-server || $SUDO update-rc.d redis-server disable; } >/dev/null 2>&1 || true
fi
