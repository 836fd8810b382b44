#!/usr/bin/env bash
# Build tests/cxx_ops.cc against libhakmem.so (-lhakmem, rpath) with sized
# deallocation and run it: every operator new/delete form must be hakmem's.
set -u
BUILD=${BUILD:-build}
if ! command -v g++ >/dev/null; then echo "ok - cxx:build # SKIP g++ not installed"; exit 0; fi
if [ ! -f "$BUILD/libhakmem.so" ]; then echo "not ok - cxx:build: $BUILD/libhakmem.so missing"; exit 1; fi
mkdir -p "$BUILD/tests"
out=$BUILD/tests/cxx_ops
if ! g++ -std=c++17 -O1 -g -Wall -fsized-deallocation -faligned-new -pthread -Iinclude tests/cxx_ops.cc -o "$out" \
     -L"$BUILD" -lhakmem -Wl,-rpath,"$(cd "$BUILD" && pwd)" 2>"$out.log"; then
  echo "not ok - cxx:build: g++ failed"; sed 's/^/    # /' "$out.log" | head -20; exit 1
fi
echo "ok - cxx:build"
# The operators must come from libhakmem.so, not libstdc++.
if ! command -v ldd >/dev/null; then echo "ok - cxx:linked_to_hakmem # SKIP ldd not installed"
elif ldd "$out" | grep -q "libhakmem.so => $(cd "$BUILD" && pwd)/libhakmem.so"; then
  echo "ok - cxx:linked_to_hakmem"
else
  echo "not ok - cxx:linked_to_hakmem: $(ldd "$out" | grep hakmem)"
fi
"$out"
