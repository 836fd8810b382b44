/* alloc.c — the public allocation API (the hakmem_* names; override.c gives
 * them their standard names).  free's slow path is free.c's. */
#include "hot.h"
#include "options.h"
#include "stats.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- malloc's class tables (internal.h, class_of) ---------------------------- */

/* size_class of every multiple of 16 up to SMALL_MAX and of 512 up to
 * MEDIUM_MAX, worked out by the compiler (the same formula as size_class). */
#define SC(n)    ((n) <= 128 ? ((n) <= 16 ? 0 : ((n) - 1) >> 4) \
                  : 8 + (63 - __builtin_clzl((n) - 1) - 7) * 4 + ((((n) - 1) >> (63 - __builtin_clzl((n) - 1) - 2)) & 3) \
                    + ((n) > SIZE_4K5))
#define C1(i)    (uint8_t)SC((size_t)(i) * 16)   /* (the cast: clang checks both arms of ?: against uint8_t) */
#define C4(i)    C1(i), C1((i) + 1), C1((i) + 2), C1((i) + 3)
#define C16(i)   C4(i), C4((i) + 4), C4((i) + 8), C4((i) + 12)
#define C128(i)  C16(i), C16((i) + 16), C16((i) + 32), C16((i) + 48), C16((i) + 64), C16((i) + 80), C16((i) + 96), C16((i) + 112)
const uint8_t hm_class_small[SMALL_MAX / 16 + 1] = { C128(0), C16(128), C16(144), C16(160), C16(176), C16(192), C16(208), C1(224) };
_Static_assert(SMALL_MAX / 16 + 1 == 225, "the initializer covers 225 sizes");
#define B1(i)    (uint8_t)SC((size_t)(i) * 512)
#define B4(i)    B1(i), B1((i) + 1), B1((i) + 2), B1((i) + 3)
#define B16(i)   B4(i), B4((i) + 4), B4((i) + 8), B4((i) + 12)
#define B128(i)  B16(i), B16((i) + 16), B16((i) + 32), B16((i) + 48), B16((i) + 64), B16((i) + 80), B16((i) + 96), B16((i) + 112)
const uint8_t hm_class_big[MEDIUM_MAX / 512 + 1] = { B128(0), B128(128), B128(256), B128(384), B1(512) };
_Static_assert(MEDIUM_MAX / 512 + 1 == 513, "the initializer covers 513 sizes");
#undef SC
#undef C1
#undef C4
#undef C16
#undef C128
#undef B1
#undef B4
#undef B16
#undef B128

/* ---- pointer validation (slow paths only) --------------------------------- */

/* Has block p of pg been freed?  The owner confirms on its free lists and its
 * thread cache (locked: the purger may be emptying them); any other thread
 * goes by the block's look (block_looks_free), and for a large block by its
 * page's flag. */
static bool already_freed(page_t *pg, const void *p) {
  if (pg->cls == CLASS_LARGE) return atomic_load_explicit(&pg->freed, memory_order_relaxed);
  if (hm_secure) return secure_is_free(pg, p);
  if (!block_looks_free(pg, p)) return false;
  heap_t *h = hm_tls_heap;
  if (atomic_load_explicit(&pg->heap, memory_order_relaxed) != h) return true;
  heap_enter(h);
  bool freed = heap_block_free(h, pg, p);
  heap_leave(h);
  hm_assert(!heap_held(h));
  return freed;
}

/* ---- the API -------------------------------------------------------------- */

void *hm_malloc(size_t n) { return hm_malloc_fast(n); }

void hm_free(void *p) { hm_free_fast(p); }

void hm_free_sized(void *p, size_t size) { hm_free_sized_fast(p, size); }

void hm_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  hm_free_sized_fast(p, size);
}

/* The page of p if p is a block start in one of hakmem's segments of the
 * map's window (free's first checks, reporting nothing), else NULL: what the
 * calls made on every malloc or free of some programs need before hm_lookup(),
 * which reports and finds the far segments' blocks too. */
HM_INLINE page_t *block_page(const void *p) {
  if (!segment_near(p)) return NULL;
  page_t *pg = page_of(segment_of(p), p);
  return hm_block_start(pg, (uintptr_t)p - (uintptr_t)pg->start) ? pg : NULL;
}

/* The usable size of p, a block of pg (hm_lookup); one that was freed is
 * reported ("op of a freed block"). */
size_t hm_block_usable(page_t *pg, const void *p, const char *op) {
  if (pg->cls != CLASS_HUGE && already_freed(pg, p)) {
    char what[160];
    snprintf(what, sizeof what, "%s of a freed block", op);
    hm_fatal(what, p, pg);
  }
  return hm_secure ? secure_usable(pg, p) : pg->block_size;
}

static HM_NOINLINE size_t usable_slow(const void *p) {
  if (!p) return 0;
  segment_t *s;
  return hm_block_usable(hm_lookup(p, &s, "malloc_usable_size"), p, "malloc_usable_size");
}

/* redis and sqlite3 call this on every malloc and free (their memory
 * accounting): a live block of a size class is a page lookup and a look at
 * its first word; anything else (a freed block, a large one, the hardened
 * mode) takes the checked path. */
size_t hm_malloc_usable_size(const void *p) {
  const page_t *pg = block_page(p);
  if (likely(pg != NULL) && likely(pg->cls < CLASSES) && likely(!hm_secure) && likely(!block_looks_free(pg, p)))
    return pg->block_size;
  return usable_slow(p);
}

void *hm_calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) { errno = ENOMEM; return NULL; }
  void *p = hm_malloc_fast(total);
  if (!p) return NULL;
  if (total > MEDIUM_MAX) {
    /* Fresh or purged memory is already zero: skip touching it all. */
    segment_t *s = segment_of(p);
    page_t *pg = page_of(s, p);
    bool z = pg->is_zero;
    pg->is_zero = 0;
    if (z) return p;
  }
  memset(p, 0, total);
  return p;
}

/* Pages start on slice boundaries, so the blocks of a class whose size is a
 * multiple of align are aligned.  A size rounded up to a power of two align
 * up to TABLE_MAX has such a class (class sizes are 5-8 times a power of
 * two; test_sizeclass.c checks every case), so aligned requests there take
 * malloc's fast path: alignas(64) objects in C++, SIMD types in Rust.  NULL:
 * take aligned_slow (errno untouched). */
HM_INLINE void *aligned_try(size_t align, size_t n) {
  heap_t *h = hm_tls_heap;
  size_t c;
  if (align <= 16) return hm_malloc_try(h, n, &c);
  size_t m = (n + align - 1) & ~(align - 1);
  /* (not 0, whose class is 16 bytes; no overflow; stats mode counts the size asked) */
  if (m - 1 >= TABLE_MAX || m < n || hm_slow_mode) return NULL;
  return hm_malloc_try(h, m, &c);
}

static HM_NOINLINE void *aligned_slow(size_t align, size_t n) {
  if (align <= 16) return hm_malloc_fast(n);
  if (n > ALLOC_MAX) { errno = ENOMEM; return NULL; }
  return heap_malloc_aligned(hm_tls_heap, n, align);
}

HM_INLINE void *aligned_alloc_impl(size_t align, size_t n) {
  void *p = aligned_try(align, n);
  return likely(p != NULL) ? p : aligned_slow(align, n);
}

static bool pow2(size_t a) { return a && !(a & (a - 1)); }

/* posix_memalign returns ENOMEM, and leaves errno set to it as glibc's does. */
static HM_NOINLINE int posix_memalign_slow(void **out, size_t align, size_t n) {
  void *p = aligned_slow(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

int hm_posix_memalign(void **out, size_t align, size_t n) {
  if (!pow2(align) || align % sizeof(void *)) return EINVAL;
  void *p = aligned_try(align, n);
  if (unlikely(!p)) return posix_memalign_slow(out, align, n);
  *out = p;
  return 0;
}

void *hm_aligned_alloc(size_t align, size_t n) {
  if (!pow2(align)) { errno = EINVAL; return NULL; }
  return aligned_alloc_impl(align, n);
}

/* glibc's memalign rounds a non-power-of-two alignment up to one. */
void *hm_memalign(size_t align, size_t n) {
  if (align > SIZE_MAX / 2 + 1) { errno = EINVAL; return NULL; }
  if (!pow2(align)) {
    size_t a = 16;
    while (a < align) a <<= 1;
    align = a;
  }
  return aligned_alloc_impl(align, n);
}

void *hm_valloc(size_t n) { return aligned_alloc_impl(OS_PAGE, n); }

void *hm_pvalloc(size_t n) {
  if (n > ALLOC_MAX) { errno = ENOMEM; return NULL; }
  n = n ? (n + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1) : OS_PAGE;
  return aligned_alloc_impl(OS_PAGE, n);
}

/* realloc's most common call, a buffer grown in small steps that still fits
 * its block: free's checks, inline, and no hm_lookup() (a large share of such a
 * program's time).  pg is block_page(p): a block that looks free, a huge one
 * and the hardened mode (no pg) take the full path. */
HM_INLINE bool realloc_fits(const page_t *pg, void *p, size_t n) {
  size_t usable = pg->block_size;     /* (at least 16 on a real page: n is not 0) */
  if (n > usable || n < usable / 2) return false;
  if (pg->cls < CLASSES) return !block_looks_free(pg, p);
  return pg->cls == CLASS_LARGE && !atomic_load_explicit(&pg->freed, memory_order_relaxed);
}

/* pg: block_page(p), or NULL to look p up (and report what is wrong). */
static HM_NOINLINE void *realloc_slow(void *p, size_t n, page_t *pg) {
  hm_assert(p != NULL);
  if (n == 0) { hm_free_fast(p); return NULL; }   /* glibc frees and returns NULL */
  segment_t *s = segment_of(p);
  if (!pg) pg = hm_lookup(p, &s, "realloc");
  hm_assert(pg == page_of(s, p) || pg->cls == CLASS_HUGE);
  size_t usable = hm_block_usable(pg, p, "realloc");
  if (n > ALLOC_MAX) { errno = ENOMEM; return NULL; }
  if (hm_secure && pg->cls != CLASS_HUGE) {               /* (its canaries move with the size) */
    size_t bs = pg->block_size;
    if (n <= bs - SECURE_TAIL && n >= bs / 2) return secure_arm(p, n);
  } else if (n <= usable && n >= usable / 2) {
    return p;                                             /* fits, and not wastefully */
  }
  if (pg->cls == CLASS_LARGE && n > MEDIUM_MAX && n <= LARGE_MAX &&
      atomic_load_explicit(&pg->heap, memory_order_relaxed) == hm_tls_heap) {
    /* an aligned block may start several slices into its run */
    size_t lead = (size_t)(pg->start - page_run(pg));
    heap_enter(hm_tls_heap);
    bool resized = segment_large_resize(pg, (lead + n + SLICE_SIZE - 1) / SLICE_SIZE);
    heap_leave(hm_tls_heap);
    hm_assert(!resized || (pg->block_size >= n && pg->start == p));
    if (resized) return p;
  }
  if (pg->cls == CLASS_HUGE && n > GROW_HUGE && s->huge_offset == 0) {
    void *q = huge_resize(s, pg, n);
    hm_assert(!q || page_of(segment_of(q), q)->block_size >= n);
    if (q && q != p && unlikely(hm_profiling)) profile_free(p, NULL);   /* moved: the sample ends (pg is unmapped) */
    if (q) return q;
  }
  /* A block above 32 KiB (the classes with thread caches) that must move to
   * grow by less than half gets 50 % headroom: a buffer grown in small steps
   * is copied O(log n) times, not at every size class (four per doubling),
   * and realloc does not touch the headroom. */
  void *q = NULL;
  if (n > usable && n > TABLE_MAX && n - usable < usable / 2 && usable / 2 <= ALLOC_MAX - usable) {
    size_t room = usable + usable / 2;
    q = room > MEDIUM_MAX ? large_malloc_grow(hm_tls_heap, room) : hm_malloc_fast(room);
  }
  if (!q && !(q = hm_malloc_fast(n))) return NULL;
  hm_assert(q != p);
  if (unlikely(hm_secure)) secure_arm(q, n);             /* (the size asked, not the headroom's) */
  memcpy(q, p, n < usable ? n : usable);
  /* The old block goes to its page (a buffer's old size is not worth a
   * thread cache's room); a cached class's page only under the heap lock,
   * as the purger may be giving those pages back (tcache.c). */
  if (pg->cls < CLASSES && tcache_fast(pg->cls)) hm_free_slow(p, false);
  else hm_free_block(p, false, 0);
  return q;
}

void *hm_realloc(void *p, size_t n) {
  if (!p) return hm_malloc_fast(n);           /* (how some programs, Lua's for one, allocate) */
  page_t *pg = hm_secure ? NULL : block_page(p);
  if (likely(pg != NULL) && likely(realloc_fits(pg, p, n))) return p;
  return realloc_slow(p, n, pg);
}

void *hm_reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) { errno = ENOMEM; return NULL; }
  return hm_realloc(p, total);
}

/* What this thread's heap can return now: its quarantine, what other
 * threads freed into its pages, its caches, its empty pages, and the free
 * slices of its segments, purged whatever their delay. */
static void trim_own(heap_t *h) {
  hm_assert(!heap_held(h));
  if (hm_secure) hm_free_quarantine(h);
  remote_collect(h);
  remote_flush(h);
  heap_enter(h);
  tcache_flush(h);
  heap_collect_all(h);
  segment_purge_due(h, PURGE_FORCE, NULL);
  hm_validate(h);
  heap_leave(h);
}

/* Everything that can be returned now: this thread's heap, the unreachable
 * pages of every other heap not busy in a slow path, every free slice, the
 * caches. */
int hm_malloc_trim(size_t pad) {
  (void)pad;
  heap_t *h = hm_tls_heap;
  int64_t before = atomic_load_explicit(&hm_stat[STAT_PURGED], memory_order_relaxed);
  if (h != &hm_heap_empty) trim_own(h);
  purge_idle_heaps(h);
  bool unmapped = segcache_trim();
  unmapped |= huge_cache_purge(true, NULL);
  return unmapped || atomic_load_explicit(&hm_stat[STAT_PURGED], memory_order_relaxed) != before;
}

/* hakmem_collect: this thread's heap only (cheap: no other heap is looked
 * at), or with force all of malloc_trim. */
void hm_collect(int force) {
  if (force) hm_malloc_trim(0);
  else if (hm_tls_heap != &hm_heap_empty) trim_own(hm_tls_heap);
}

/* The hakmem_* names, for programs that want hakmem beside another malloc. */
HM_EXPORT_HAKMEM(malloc) HM_EXPORT_HAKMEM(free) HM_EXPORT_HAKMEM(calloc) HM_EXPORT_HAKMEM(realloc)
HM_EXPORT_HAKMEM(reallocarray) HM_EXPORT_HAKMEM(posix_memalign) HM_EXPORT_HAKMEM(aligned_alloc)
HM_EXPORT_HAKMEM(memalign) HM_EXPORT_HAKMEM(valloc) HM_EXPORT_HAKMEM(pvalloc) HM_EXPORT_HAKMEM(malloc_usable_size)
HM_EXPORT_HAKMEM(free_sized) HM_EXPORT_HAKMEM(free_aligned_sized) HM_EXPORT_HAKMEM(malloc_trim)
HM_EXPORT_HAKMEM(collect)
