#!/usr/bin/env bash
# glibc's malloc tests of the public API, in our own versions (tests/ext/
# glibc_*.c; tests/ext/README.md lists what is left out and why), each run
# under glibc's malloc and under hakmem, default and HAKMEM_SECURE=1; and,
# after glibc's tst-interpose-static and tst-malloc-usable-static, the API
# and interposition programs linked statically with libhakmem.a.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/ext/modes.sh
for src in tests/ext/glibc_*.c; do
  name=$(basename "$src" .c)
  if [ ! -x "$BUILD/ext/$name" ]; then echo "not ok - $name: $BUILD/ext/$name not built"; continue; fi
  ext_tap "$name" 120 "$BUILD/ext/$name"
done

if ! ${CC:-cc} -static -x c - -o "$EXT_TMP/static-probe" <<<'int main(void) { return 0; }' 2>/dev/null; then
  echo "ok - glibc_static # SKIP the C library cannot be linked statically here (Debian: libc6-dev)"
  exit 0
fi
EXT_MODES=(hakmem-static)
for name in glibc_api glibc_interpose; do
  bin=$EXT_TMP/$name-static
  # shellcheck disable=SC2046  # the Makefile's flags, one word each
  if ! ${CC:-cc} $(make -s --no-print-directory print-ext-cflags) -static "tests/ext/$name.c" "$BUILD/libhakmem.a" \
       -o "$bin" 2>"$EXT_TMP/link.err"; then
    echo "not ok - $name [hakmem-static]: static link with libhakmem.a failed: $(grep -m1 -oE "(multiple definition of|undefined reference to) [^;]*" "$EXT_TMP/link.err" || head -1 "$EXT_TMP/link.err")"
    continue
  fi
  ext_tap "$name" 120 "$bin"
done
