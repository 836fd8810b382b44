#!/usr/bin/env bash
# tools/deps.sh, which the README's test command and .ci/run install with,
# resolves every package of each target to a name this release's package
# index knows (Python's test suite, the clang runtime and the t64-renamed
# libraries carry versions), and the ones make test needs are installed here.
set -u
if ! command -v apt-cache >/dev/null; then echo "ok - deps:resolve # SKIP not a Debian or Ubuntu system"; exit 0; fi
for target in test sanitize bench; do
  names=$(tools/deps.sh -n "$target" 2>&1) || { echo "not ok - deps:$target: tools/deps.sh failed: $names"; continue; }
  unknown=""
  for n in $names; do apt-cache show "$n" >/dev/null 2>&1 || unknown+=" $n"; done
  if [ -n "$unknown" ]; then echo "not ok - deps:$target: not in the package index:$unknown"
  else echo "ok - deps:$target ($(wc -w <<<"$names") packages: $(grep -o -E '(lib[a-z0-9.+-]*(testsuite|clang-rt[a-z0-9-]*|clang-common[a-z0-9-]*|tcmalloc[a-z0-9-]*|mimalloc[a-z0-9.-]*))' <<<"$names" | tr '\n' ' '))"
  fi
done
missing=""
for n in $(tools/deps.sh -n test); do dpkg -s "$n" >/dev/null 2>&1 || missing+=" $n"; done
if [ -z "$missing" ]; then echo "ok - deps:test_installed"
else echo "not ok - deps:test_installed: not installed:$missing (make deps installs them)"; fi
