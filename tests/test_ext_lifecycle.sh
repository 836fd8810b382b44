#!/usr/bin/env bash
# A process's life with threads allocating (exit, _exit, abort, pthread_exit
# from main, exec, vfork, posix_spawn, signals, dlopen/dlclose:
# tests/ext/lifecycle.c), under glibc's malloc and under hakmem, default and
# HAKMEM_SECURE=1.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/ext/modes.sh
if [ ! -x "$BUILD/ext/lifecycle" ]; then echo "not ok - lifecycle: $BUILD/ext/lifecycle not built"; exit 1; fi
ext_tap lifecycle 200 "$BUILD/ext/lifecycle"
