#!/usr/bin/env bash
# make install into a temporary prefix installs exactly the expected files;
# a C and a C++ program build against the installed tree with pkg-config and
# with CMake (find_package(hakmem): the shared and the static target) and run
# on hakmem; the installed launcher finds the installed library.  The same
# with DESTDIR and a custom LIBDIR, built from the staged tree after it has
# been moved (the CMake package is relocatable).  make uninstall removes
# every file.  Tools that are not installed skip their checks.
set -u
BUILD=${BUILD:-build}
if [ ! -f "$BUILD/libhakmem.so" ]; then echo "not ok - install:library: $BUILD/libhakmem.so missing"; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$PWD/tests/install
# this script may run under make: its jobserver is not ours
unset MAKEFLAGS MFLAGS MAKELEVEL
result() {  # name, condition status, why
  if [ "$2" -eq 0 ]; then echo "ok - install:$1"; else echo "not ok - install:$1: $3"; fi
}
have() { command -v "$1" >/dev/null; }

# Runs a built program: it must say it is on hakmem; a shared build must load
# the installed library ($1), a static one no libhakmem at all.
check_app() {  # name, installed libhakmem.so or "static", program
  local out rc loaded
  out=$("$3" 2>&1); rc=$?
  loaded=$(ldd "$3" | awk '/libhakmem/ { print $3 }')
  if [ $rc -ne 0 ] || [ "$out" != "on hakmem" ]; then result "$1" 1 "exit $rc, printed: $out"
  elif [ "$2" = static ]; then [ -z "$loaded" ]; result "$1" $? "static build loads $loaded"
  else [ "$loaded" = "$2" ]; result "$1" $? "loads '$loaded', expected $2"
  fi
}

expected_files() {  # prefix, libdir
  printf '%s\n' "$1/bin/hakmem" "$1/include/hakmem.h" "$2/libhakmem.so" "$2/libhakmem.a" \
    "$2/pkgconfig/hakmem.pc" "$2/cmake/hakmem/hakmemConfig.cmake" "$2/cmake/hakmem/hakmemConfigVersion.cmake" | sort
}

# pkg-config builds: the C and the C++ program, linked dynamically.
pkgconfig_builds() {  # name, libhakmem.so expected, pkg-config options...
  local name=$1 so=$2; shift 2
  if ! have pkg-config; then echo "ok - install:${name}_pkgconfig # SKIP pkg-config not installed"; return; fi
  local flags libdir
  flags=$(pkg-config "$@" --cflags --libs hakmem) && libdir=$(pkg-config "$@" --variable=libdir hakmem)
  result "${name}_pkgconfig_flags" $? "pkg-config $* failed"
  # shellcheck disable=SC2086  # the flags are words
  if ${CC:-cc} -O1 "$src/app.c" -o "$tmp/pc_c" $flags -Wl,-rpath,"$libdir" 2>"$tmp/log"; then
    check_app "${name}_pkgconfig_c" "$so" "$tmp/pc_c"
  else result "${name}_pkgconfig_c" 1 "build failed: $(head -c 300 "$tmp/log")"; fi
  if ! have g++; then echo "ok - install:${name}_pkgconfig_cxx # SKIP g++ not installed"; return; fi
  # shellcheck disable=SC2086
  if g++ -O1 "$src/app.cc" -o "$tmp/pc_cxx" $flags -Wl,-rpath,"$libdir" 2>"$tmp/log"; then
    check_app "${name}_pkgconfig_cxx" "$so" "$tmp/pc_cxx"
  else result "${name}_pkgconfig_cxx" 1 "build failed: $(head -c 300 "$tmp/log")"; fi
}

# CMake builds: tests/install/CMakeLists.txt, four programs.
cmake_builds() {  # name, prefix to find hakmem in, libhakmem.so expected
  local name=$1 prefix=$2 so=$3 b=$tmp/cmake-$1
  if ! have cmake || ! have g++; then echo "ok - install:${name}_cmake # SKIP cmake or g++ not installed"; return; fi
  local start=$SECONDS
  if ! cmake -S "$src" -B "$b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$tmp/log" 2>&1 ||
     ! cmake --build "$b" -j2 >>"$tmp/log" 2>&1; then
    result "${name}_cmake_build" 1 "$(grep -m3 -iE 'error|could not' "$tmp/log" | tr '\n' '|' | head -c 400)"; return
  fi
  result "${name}_cmake_build" 0
  check_app "${name}_cmake_c_shared" "$so" "$b/app_c_shared"
  check_app "${name}_cmake_c_static" static "$b/app_c_static"
  check_app "${name}_cmake_cxx_shared" "$so" "$b/app_cxx_shared"
  check_app "${name}_cmake_cxx_static" static "$b/app_cxx_static"
  echo "# install:${name}_cmake: $((SECONDS - start))s"
}

launcher_finds() {  # name, installed bin/hakmem, libhakmem.so expected
  local found err
  found=$("$2" lib 2>&1)
  [ "$found" = "$3" ]; result "${1}_launcher_lib" $? "hakmem lib printed '$found', expected $3"
  err=$("$2" run --stats -- ls / 2>&1 >/dev/null)
  grep -q '^hakmem: statistics' <<<"$err"; result "${1}_launcher_run" $? "no report: $(head -c 200 <<<"$err")"
}

# ---- make install PREFIX=... ------------------------------------------------
p=$tmp/prefix
make -s install BUILD="$BUILD" PREFIX="$p" >"$tmp/log" 2>&1
result prefix_make_install $? "$(tail -3 "$tmp/log" | tr '\n' '|')"
diff <(expected_files "$p" "$p/lib") <(find "$p" -type f | sort) >"$tmp/diff"
result prefix_files $? "unexpected file list: $(tr '\n' '|' <"$tmp/diff")"
cmp -s "$BUILD/libhakmem.so" "$p/lib/libhakmem.so" && cmp -s include/hakmem.h "$p/include/hakmem.h"
result prefix_same_library $? "installed library or header differs from the built one"
[ "$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --modversion hakmem 2>&1)" = "$(sed -n 's/^HAKMEM_VERSION = //p' Makefile)" ] ||
  ! have pkg-config
result prefix_pkgconfig_version $? "pkg-config --modversion does not give the Makefile's HAKMEM_VERSION"
PKG_CONFIG_PATH=$p/lib/pkgconfig pkgconfig_builds prefix "$p/lib/libhakmem.so"
cmake_builds prefix "$p" "$p/lib/libhakmem.so"
if have cmake; then
  cmake -S "$src" -B "$tmp/v99" -DVERSION_ONLY=99.0 -DCMAKE_PREFIX_PATH="$p" >"$tmp/log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && grep -q 'version: 0\.1\.0' "$tmp/log"
  result cmake_rejects_newer_version $? "find_package(hakmem 99.0) exit $rc: $(tr '\n' ' ' <"$tmp/log" | head -c 300)"
fi
launcher_finds prefix "$p/bin/hakmem" "$p/lib/libhakmem.so"
make -s uninstall BUILD="$BUILD" PREFIX="$p" >"$tmp/log" 2>&1
left=$(find "$p" -type f -o -type l -o -type d -path "*/cmake/hakmem")
[ -z "$left" ]; result prefix_uninstall_removes_all $? "left behind: $(tr "\n" " " <<<"$left")"

# ---- make install DESTDIR=... with a custom LIBDIR, then moved ---------------
stage=$tmp/stage P=/opt/hakmem-test L=/opt/hakmem-test/lib/x86_64-linux-gnu
make -s install BUILD="$BUILD" DESTDIR="$stage" PREFIX="$P" LIBDIR="$L" >"$tmp/log" 2>&1
result destdir_make_install $? "$(tail -3 "$tmp/log" | tr '\n' '|')"
diff <(expected_files "$stage$P" "$stage$L") <(find "$stage" -type f | sort) >"$tmp/diff"
result destdir_files $? "unexpected file list: $(tr '\n' '|' <"$tmp/diff")"
grep -qx "prefix=$P" "$stage$L/pkgconfig/hakmem.pc" && grep -qx 'libdir=${prefix}/lib/x86_64-linux-gnu' "$stage$L/pkgconfig/hakmem.pc"
result destdir_pkgconfig_names_prefix $? "$(head -3 "$stage$L/pkgconfig/hakmem.pc" | tr '\n' '|')"
moved=$tmp/moved
mv "$stage$P" "$moved"
ML=$moved/lib/x86_64-linux-gnu
PKG_CONFIG_PATH=$ML/pkgconfig pkgconfig_builds moved "$ML/libhakmem.so" --define-variable=prefix="$moved"
cmake_builds moved "$moved" "$ML/libhakmem.so"
launcher_finds moved "$moved/bin/hakmem" "$ML/libhakmem.so"
mv "$moved" "$stage$P"
make -s uninstall BUILD="$BUILD" DESTDIR="$stage" PREFIX="$P" LIBDIR="$L" >"$tmp/log" 2>&1
left=$(find "$stage" -type f -o -type l -o -type d -path "*/cmake/hakmem")
[ -z "$left" ]; result destdir_uninstall_removes_all $? "left behind: $(tr "\n" " " <<<"$left")"
