#!/usr/bin/env bash
# The shared library exports the whole C and C++ allocation API and the
# hakmem_* names, nothing internal, and needs only libc; the static library
# defines no global symbol outside those names (an application linking
# build/libhakmem.a may have its own page_init or os_map).
set -u
BUILD=${BUILD:-build}
so=$BUILD/libhakmem.so
ar=$BUILD/libhakmem.a
for tool in nm readelf; do
  if ! command -v $tool >/dev/null; then echo "ok - linkage:tools # SKIP $tool (binutils) not installed"; exit 0; fi
done
if [ ! -f "$so" ]; then echo "not ok - linkage:exports: $so missing"; exit 1; fi

public_c="malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc pvalloc
  malloc_usable_size cfree malloc_trim free_sized free_aligned_sized mallinfo mallinfo2 malloc_stats malloc_info mallopt"
public_cxx="_Znwm _Znam _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t
  _ZnwmSt11align_val_t _ZnamSt11align_val_t _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t
  _ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t _ZnwmSt11align_val_tRKSt9nothrow_t
  _ZnamSt11align_val_tRKSt9nothrow_t _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t
  _ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t"
public_hakmem="hakmem_malloc hakmem_free hakmem_calloc hakmem_realloc hakmem_reallocarray hakmem_posix_memalign
  hakmem_aligned_alloc hakmem_memalign hakmem_valloc hakmem_pvalloc hakmem_malloc_usable_size
  hakmem_free_sized hakmem_free_aligned_sized hakmem_malloc_trim hakmem_stats_get hakmem_stats_class hakmem_stats_print"
public_libc_aliases="__libc_malloc __libc_free __libc_calloc __libc_realloc __libc_memalign __libc_valloc __libc_pvalloc
  __libc_mallinfo __libc_mallinfo2 __libc_mallopt __posix_memalign"

syms=$(nm -D --defined-only "$so" | awk 'NF >= 3 && $2 ~ /^[TWiVD]$/ {print $3}')
check_exports() {  # name, symbols...
  local name=$1; shift
  local missing=()
  for s in "$@"; do grep -qx "$s" <<<"$syms" || missing+=("$s"); done
  if [ ${#missing[@]} -eq 0 ]; then echo "ok - linkage:exports_$name ($# symbols)"
  else echo "not ok - linkage:exports_$name: missing ${missing[*]}"; fi
}
# shellcheck disable=SC2086
check_exports c $public_c
# shellcheck disable=SC2086
check_exports cxx $public_cxx
# shellcheck disable=SC2086
check_exports hakmem $public_hakmem
# shellcheck disable=SC2086
check_exports libc_aliases $public_libc_aliases

allowed='^(hakmem_[a-z_]+|__libc_[a-z_0-9]+|__posix_memalign|_Zn[wa]m.*|_Zd[la]Pv.*|malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|cfree|malloc_trim|free_sized|free_aligned_sized|mallinfo2?|malloc_stats|malloc_info|mallopt|_init|_fini)$'
internal=$(nm -D --defined-only "$so" | awk 'NF >= 3 {print $3}' | grep -vE "$allowed")
if [ -z "$internal" ]; then echo "ok - linkage:no_internal_exports"
else echo "not ok - linkage:no_internal_exports: $(echo $internal | cut -c1-300)"; fi

needed=$(readelf -d "$so" | awk '/\(NEEDED\)/ {gsub(/[\[\]]/, "", $5); print $5}')
other=$(grep -vE '^(libc\.so\.6|libpthread\.so\.0|ld-linux.*\.so\.[0-9]+)$' <<<"$needed")
if [ -n "$needed" ] && [ -z "$other" ]; then echo "ok - linkage:needs_only_libc ($(echo $needed))"
else echo "not ok - linkage:needs_only_libc: NEEDED is: $(echo $needed)"; fi

if [ -f "$ar" ]; then
  # Internal names of the static library must be prefixed (hm_/hakmem_/_hm):
  # a global "page_init" or "os_map" clashes with an application's own.
  clash=$(nm -g --defined-only "$ar" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u |
          grep -vE "$allowed" | grep -vE '^(hm_|_hm|hakmem_|__hakmem)')
  if [ -z "$clash" ]; then echo "ok - linkage:static_lib_namespace"
  else echo "not ok - linkage:static_lib_namespace: $(wc -w <<<"$clash") unprefixed global symbols in $ar, e.g. $(echo $clash | cut -d' ' -f1-8)"; fi
fi

# A static program that uses every name of glibc's malloc interface (mallopt
# among them), and fork and threads: libc.a's malloc.o must not be pulled in
# beside hakmem ("multiple definition of malloc"), and hakmem must serve it.
if [ -f "$ar" ] && command -v cc >/dev/null && [ -f "$(cc -print-file-name=libc.a)" ]; then
  tmp=$(mktemp -d)
  cat >"$tmp/static.c" <<'EOF'
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "hakmem.h"
extern void *__libc_malloc(size_t), *__libc_calloc(size_t, size_t), *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t), *__libc_valloc(size_t), *__libc_pvalloc(size_t);
extern void __libc_free(void *);
extern int __libc_mallopt(int, int), __posix_memalign(void **, size_t, size_t);
extern struct mallinfo2 __libc_mallinfo2(void);
static void *worker(void *a) { free(malloc(100)); return a; }
int main(void) {
  if (mallopt(M_ARENA_MAX, 4) != 1 || __libc_mallopt(M_MMAP_THRESHOLD, 1 << 20) != 1 || mallopt(12345, 1) != 0) return 2;
  void *p = malloc(100), *q = NULL;
  if (hakmem_malloc_usable_size(p) != malloc_usable_size(p)) return 3;   /* hakmem's block */
  if (posix_memalign(&q, 64, 10)) return 4;
  free(q);
  if (__posix_memalign(&q, 64, 10)) return 4;
  free(q);
  free(memalign(64, 10)); free(valloc(10)); free(pvalloc(10)); free(aligned_alloc(64, 64));
  free(calloc(3, 4)); free(realloc(NULL, 10)); free(reallocarray(NULL, 2, 8));
  __libc_free(__libc_malloc(8)); __libc_free(__libc_calloc(2, 8)); __libc_free(__libc_realloc(NULL, 8));
  __libc_free(__libc_memalign(32, 8)); __libc_free(__libc_valloc(8)); __libc_free(__libc_pvalloc(8));
  struct mallinfo2 a = mallinfo2(), b = __libc_mallinfo2();
  struct mallinfo c = mallinfo();
  (void)a; (void)b; (void)c;
  FILE *devnull = fopen("/dev/null", "w");
  if (!devnull || malloc_info(0, devnull) != 0) return 5;
  fclose(devnull);
  malloc_trim(0);
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  pthread_join(t, NULL);
  pid_t pid = fork();
  if (pid == 0) { free(malloc(10)); _exit(0); }
  int status;
  if (waitpid(pid, &status, 0) != pid || status != 0) return 6;
  free(p);
  puts("static ok");
  return 0;
}
EOF
  if ! out=$(cc -static -Iinclude "$tmp/static.c" "$ar" -pthread -o "$tmp/static" 2>&1); then
    echo "not ok - linkage:static_program_links: $(grep -m2 -E 'error|multiple' <<<"$out" | tr '\n' ' ' | cut -c1-300)"
  elif ! res=$("$tmp/static" 2>&1) || [ "$res" != "static ok" ]; then
    echo "not ok - linkage:static_program_links: the program failed: $(echo "$res" | cut -c1-200)"
  else
    echo "ok - linkage:static_program_links (every name of glibc's malloc.o a program may call is hakmem's)"
  fi
  rm -rf "$tmp"
else
  echo "ok - linkage:static_program_links # SKIP no static libc (libc.a) or no compiler"
fi
