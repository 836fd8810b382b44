/* override.c — the standard names: the C allocation API, the glibc-internal
 * aliases some programs call directly, and the C++ operators new and delete.
 * Built unless HAKMEM_NO_OVERRIDE (sanitizer builds keep the libc malloc). */
#ifndef HAKMEM_NO_OVERRIDE
#include "hot.h"
#include "stats.h"

#include <errno.h>
#include <malloc.h>

/* Each standard name is its own small function: malloc and free inline the
 * fast paths, the rest jump straight to the (hidden) implementation. */
#define API HM_EXPORT
API void *malloc(size_t n) { return hm_malloc_fast(n); }
API void free(void *p) { hm_free_fast(p); }
API void cfree(void *p) { hm_free_fast(p); }
API void *calloc(size_t n, size_t size) { return hm_calloc(n, size); }
API void *realloc(void *p, size_t n) { return hm_realloc(p, n); }
API void *reallocarray(void *p, size_t n, size_t size) { return hm_reallocarray(p, n, size); }
API int posix_memalign(void **out, size_t align, size_t n) { return hm_posix_memalign(out, align, n); }
API void *aligned_alloc(size_t align, size_t n) { return hm_aligned_alloc(align, n); }
API void *memalign(size_t align, size_t n) { return hm_memalign(align, n); }
API void *valloc(size_t n) { return hm_valloc(n); }
API void *pvalloc(size_t n) { return hm_pvalloc(n); }
API size_t malloc_usable_size(void *p) { return hm_malloc_usable_size(p); }
API int malloc_trim(size_t pad) { return hm_malloc_trim(pad); }
API void free_sized(void *p, size_t size) { hm_free_sized_fast(p, size); }
API void free_aligned_sized(void *p, size_t align, size_t size) { hm_free_aligned_sized(p, align, size); }
API struct mallinfo2 mallinfo2(void) { return hm_mallinfo2(); }
API struct mallinfo mallinfo(void) { return hm_mallinfo(); }
API void malloc_stats(void) { hm_malloc_stats(); }
API int malloc_info(int options, FILE *fp) { return hm_malloc_info(options, fp); }
API int mallopt(int param, int value) { return hm_mallopt(param, value); }

/* glibc's own entry points, for code that calls them by name.  With these, a
 * static link finds every name of libc.a's malloc.o here, and never pulls
 * that object in beside hakmem (two definitions of malloc). */
API void *__libc_malloc(size_t n) { return hm_malloc_fast(n); }
API void __libc_free(void *p) { hm_free_fast(p); }
API void *__libc_calloc(size_t n, size_t size) { return hm_calloc(n, size); }
API void *__libc_realloc(void *p, size_t n) { return hm_realloc(p, n); }
API void *__libc_memalign(size_t align, size_t n) { return hm_memalign(align, n); }
API void *__libc_valloc(size_t n) { return hm_valloc(n); }
API void *__libc_pvalloc(size_t n) { return hm_pvalloc(n); }
API struct mallinfo2 __libc_mallinfo2(void) { return hm_mallinfo2(); }
API struct mallinfo __libc_mallinfo(void) { return hm_mallinfo(); }
API int __libc_mallopt(int param, int value) { return hm_mallopt(param, value); }
API int __posix_memalign(void **out, size_t align, size_t n) { return hm_posix_memalign(out, align, n); }

/* ---- C++ -----------------------------------------------------------------
 * operator new must call the installed new_handler and, without one, throw
 * std::bad_alloc.  hakmem does not link the C++ runtime: these weak references
 * resolve when the program itself is C++ (the only case where new is called). */
typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void *__cxa_allocate_exception(size_t) __attribute__((weak));
extern void __cxa_throw(void *, void *, void (*)(void *)) __attribute__((weak, noreturn));
extern char _ZTISt9bad_alloc[] __attribute__((weak));       /* typeinfo for std::bad_alloc */
extern void *_ZTVSt9bad_alloc[] __attribute__((weak));      /* its vtable */
extern void _ZNSt9bad_allocD1Ev(void *) __attribute__((weak));

__attribute__((noreturn, cold)) static void throw_bad_alloc(void) {
  if (__cxa_allocate_exception && __cxa_throw && _ZTISt9bad_alloc && _ZTVSt9bad_alloc) {
    void **e = __cxa_allocate_exception(sizeof(void *));
    *e = &_ZTVSt9bad_alloc[2];              /* a bad_alloc object is its vtable pointer */
    __cxa_throw(e, _ZTISt9bad_alloc, _ZNSt9bad_allocD1Ev);
  }
  hm_fatal("out of memory in operator new (no C++ runtime to throw std::bad_alloc)", NULL, NULL);
}

/* After a failed allocation: run the new_handler and report whether to retry. */
static bool new_handler_retry(bool nothrow) {
  new_handler_t h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
  if (h) { h(); return true; }
  if (nothrow) return false;
  throw_bad_alloc();
}

HM_COLD static void *new_slow(size_t n, size_t align, bool nothrow) {
  for (;;) {
    void *p = align <= 16 ? hm_malloc(n) : hm_aligned_alloc(align, n);
    if (p) return p;
    if (!new_handler_retry(nothrow)) return NULL;
  }
}

static inline void *new_impl(size_t n, bool nothrow) {
  void *p = hm_malloc_fast(n);
  return likely(p != NULL) ? p : new_slow(n, 0, nothrow);
}
static inline void *new_aligned(size_t n, size_t align, bool nothrow) {
  void *p = hm_aligned_alloc(align, n);
  return likely(p != NULL) ? p : new_slow(n, align, nothrow);
}

#define CXX HM_EXPORT
typedef struct nothrow_s nothrow_t;
CXX void *_Znwm(size_t n) { return new_impl(n, false); }
CXX void *_Znam(size_t n) { return new_impl(n, false); }
CXX void *_ZnwmRKSt9nothrow_t(size_t n, const nothrow_t *t) { (void)t; return new_impl(n, true); }
CXX void *_ZnamRKSt9nothrow_t(size_t n, const nothrow_t *t) { (void)t; return new_impl(n, true); }
CXX void *_ZnwmSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, false); }
CXX void *_ZnamSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, false); }
CXX void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) { (void)t; return new_aligned(n, a, true); }
CXX void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) { (void)t; return new_aligned(n, a, true); }

CXX void _ZdlPv(void *p) { hm_free_fast(p); }
CXX void _ZdaPv(void *p) { hm_free_fast(p); }
CXX void _ZdlPvm(void *p, size_t n) { hm_free_sized_fast(p, n); }
CXX void _ZdaPvm(void *p, size_t n) { hm_free_sized_fast(p, n); }
CXX void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *t) { (void)t; hm_free_fast(p); }
CXX void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *t) { (void)t; hm_free_fast(p); }
CXX void _ZdlPvSt11align_val_t(void *p, size_t a) { (void)a; hm_free_fast(p); }
CXX void _ZdaPvSt11align_val_t(void *p, size_t a) { (void)a; hm_free_fast(p); }
CXX void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)a; hm_free_sized_fast(p, n); }
CXX void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)a; hm_free_sized_fast(p, n); }
CXX void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) { (void)a; (void)t; hm_free_fast(p); }
CXX void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) { (void)a; (void)t; hm_free_fast(p); }
#endif
