#!/usr/bin/env bash
# The shared library exports the whole allocation API and needs only libc.
set -u
BUILD=${BUILD:-build}
so=$BUILD/libhakmem.so
syms=$(nm -D --defined-only "$so" | awk '{print $3}')
missing=()
for s in malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc pvalloc \
         malloc_usable_size cfree malloc_trim free_sized free_aligned_sized \
         __libc_malloc __libc_free __libc_calloc __libc_realloc __libc_memalign \
         _Znwm _Znam _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t \
         _ZnwmSt11align_val_t _ZnamSt11align_val_t _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t \
         _ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t _ZnwmSt11align_val_tRKSt9nothrow_t \
         _ZnamSt11align_val_tRKSt9nothrow_t _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t \
         _ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t \
         hakmem_malloc hakmem_free hakmem_calloc hakmem_realloc hakmem_reallocarray hakmem_posix_memalign \
         hakmem_aligned_alloc hakmem_memalign hakmem_valloc hakmem_pvalloc hakmem_malloc_usable_size \
         hakmem_free_sized hakmem_free_aligned_sized hakmem_malloc_trim; do
  grep -qx "$s" <<<"$syms" || missing+=("$s")
done
if [ ${#missing[@]} -eq 0 ]; then echo "ok - linkage:exports"; else echo "not ok - linkage:exports: missing ${missing[*]}"; fi
needed=$(readelf -d "$so" | awk '/NEEDED/ {gsub(/[\[\]]/, "", $5); print $5}' | grep -vE '^(libc\.so\.6|libpthread\.so\.0|ld-linux.*)$')
if [ -z "$needed" ]; then echo "ok - linkage:needs_only_libc"; else echo "not ok - linkage:needs_only_libc: also needs $needed"; fi
internal=$(grep -vE '^(hakmem_|_Z|__libc_|malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|cfree|_init|_fini|free_sized|free_aligned_sized)' <<<"$syms" | head -5)
if [ -z "$internal" ]; then echo "ok - linkage:no_internal_exports"; else echo "not ok - linkage:no_internal_exports: $internal"; fi
