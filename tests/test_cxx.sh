#!/usr/bin/env bash
# Build tests/cxx_ops.cc against libhakmem.so and run it.
set -u
BUILD=${BUILD:-build}
if ! command -v g++ >/dev/null; then echo "ok - cxx:build # SKIP g++ not installed"; exit 0; fi
out=$BUILD/tests/cxx_ops
if ! g++ -std=c++17 -O1 -fsized-deallocation -Iinclude tests/cxx_ops.cc -o "$out" -L"$BUILD" -lhakmem -Wl,-rpath,"$(cd "$BUILD" && pwd)" 2>"$out.log"; then
  echo "not ok - cxx:build"; sed 's/^/    # /' "$out.log" | head; exit 1
fi
"$out"
