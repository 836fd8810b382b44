/* alloc.c — the public allocation API (the hakmem_* names; override.c gives
 * them their standard names) and the slow path of free. */
#include "hot.h"
#include "options.h"
#include "stats.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- pointer validation (slow paths only) --------------------------------- */

/* Find the segment and page of block p, or report what is wrong and abort.
 * 'op' names the call for the message ("free", "realloc", ...). */
static page_t *lookup(const void *p, segment_t **sp, const char *op) {
  char what[160];
  segment_t *s = segment_checked(p);
  if (!s) {
    /* A huge block aligned to SEG_SIZE or more has its header one chunk below. */
    if (((uintptr_t)p & SEG_MASK) == 0 && (uintptr_t)p >= SEG_SIZE) {
      segment_t *h = segment_checked((const uint8_t *)p - SEG_SIZE);
      if (h && h->huge_offset && h->pages[1].start == p) { *sp = h; return &h->pages[1]; }
    }
    snprintf(what, sizeof what, "%s of a pointer hakmem did not allocate (or already released)", op);
    hm_fatal(what, p, NULL);
  }
  page_t *pg = page_of(s, p);
  uintptr_t off = (uintptr_t)p - (uintptr_t)pg->start;
  if (pg->slices == 0 || off >= page_area(pg)) {
    snprintf(what, sizeof what, "%s of a pointer that is not an allocated block (already freed, or never allocated)", op);
    hm_fatal(what, p, pg->slices ? pg : NULL);
  }
  if (off * pg->magic >= pg->magic) {
    snprintf(what, sizeof what, "%s of a pointer into the middle of a block", op);
    hm_fatal(what, p, pg);
  }
  /* a block start: of a carved block, on the page's grid */
  hm_assert(pg->cls <= CLASS_HUGE && off % pg->block_size == 0 && s->slice_page[pg->slice] == pg);
  hm_assert(pg->cls == CLASS_HUGE ? pg == &s->pages[1] : pg >= s->pages && pg < &s->pages[SLICES]);
  *sp = s;
  return pg;
}

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
  bool freed = page_block_free(h, pg, p);
  heap_leave(h);
  hm_assert(!heap_held(h));
  return freed;
}

/* free, or a sized free of size (else 0), past its fast path. */
HM_COLD void hm_free_slow_sized(void *p, size_t size, bool to_cache) {
  if (!p) return;
  segment_t *s;
  page_t *pg = lookup(p, &s, size ? "sized free" : "free");
  if (unlikely(hm_slow_mode)) slow_mode_free(p, pg);
  if (pg->cls == CLASS_HUGE) { segment_huge_free(s); return; }
  if (pg->cls == CLASS_LARGE && atomic_exchange_explicit(&pg->freed, 1, memory_order_relaxed))
    hm_fatal("double free", p, pg);
  if (unlikely(hm_secure)) {                  /* quarantined: another block leaves instead */
    if (!(p = secure_free(pg, p, size))) return;
    s = segment_of(p);
    pg = page_of(s, p);
  }
  hm_free_release(s, pg, p, to_cache);
}
HM_COLD void hm_free_slow(void *p, bool to_cache) { hm_free_slow_sized(p, 0, to_cache); }

/* Release block p of page pg: to the owner's free list if that is this
 * thread, else to the page's remote list (adopting the segment if its owner
 * exited). */
void hm_free_release(segment_t *s, page_t *pg, void *p, bool to_cache) {
  heap_t *h = hm_tls_heap;
  hm_assert(segment_of(p) == s && page_of(s, p) == pg && pg->cls != CLASS_HUGE && !heap_held(h));
  heap_t *owner = atomic_load_explicit(&pg->heap, memory_order_acquire);
  if (owner == h) {
    heap_enter(h);
    /* (stats and secure modes: what free's fast path would have cached) */
    bool cached = hm_counting && to_cache && class_cached(pg->cls) && !block_looks_free(pg, p) &&
                  tcache_put(h, pg, (block_t *)p);
    if (!cached) heap_free_local(h, pg, (block_t *)p);
    hm_assert(!cached || class_cached(pg->cls));
    heap_leave(h);
    return;
  }
  if (owner == NULL) {
    /* The owner thread exited.  Adopt its segment so the block (and the rest
     * of the segment) is reused or returned instead of stranded. */
    if (h == &hm_heap_empty) h = heap_get();
    if (h) {
      heap_enter(h);
      bool adopted = segment_try_reclaim(h, s);
      hm_assert(!adopted || (s->heap == h && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h));
      if (adopted) heap_free_local(h, pg, (block_t *)p);
      heap_leave(h);
      if (adopted) return;
    }
  }
  /* (the owner's fast path checks its own frees; a remote one is checked here) */
  if (pg->cls < CLASSES && block_looks_free(pg, p)) hm_fatal("double free (the block is already free)", p, pg);
  if (unlikely(hm_counting)) stat_os(STAT_REMOTE_SENT);
  page_free_remote(pg, (block_t *)p);
  if (owner && unlikely(heap_idle(owner))) heap_wake_idle(owner);
}

/* ---- the API -------------------------------------------------------------- */

void *hm_malloc(size_t n) { return hm_malloc_fast(n); }

void hm_free(void *p) { hm_free_fast(p); }

void hm_free_sized(void *p, size_t size) { hm_free_sized_fast(p, size); }

void hm_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  hm_free_sized_fast(p, size);
}

/* A sized free whose size is more than the blocks of the page free's fast
 * path found: the exact lookup decides (a huge block's header is elsewhere). */
HM_COLD void hm_free_sized_slow(void *p, size_t size) {
  segment_t *s;
  page_t *pg = lookup(p, &s, "sized free");
  if (size > pg->block_size) hm_fatal("sized free or delete with a size larger than the block", p, pg);
  hm_free_slow_sized(p, size, true);
}

/* The page of p if p is a block start in one of hakmem's segments of the
 * map's window (free's first checks, reporting nothing), else NULL: what the
 * calls made on every malloc or free of some programs need before lookup(),
 * which reports and finds the far segments' blocks too. */
HM_INLINE page_t *block_page(const void *p) {
  if (!segment_near(p)) return NULL;
  page_t *pg = page_of(segment_of(p), p);
  return hm_block_start(pg, (uintptr_t)p - (uintptr_t)pg->start) ? pg : NULL;
}

static HM_NOINLINE size_t usable_slow(const void *p) {
  if (!p) return 0;
  segment_t *s;
  page_t *pg = lookup(p, &s, "malloc_usable_size");
  if (pg->cls != CLASS_HUGE && already_freed(pg, p)) hm_fatal("malloc_usable_size of a freed block", p, pg);
  return hm_secure ? secure_usable(pg, p) : pg->block_size;
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
 * its block: free's checks, inline, and no lookup() (a large share of such a
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
  if (!pg) pg = lookup(p, &s, "realloc");
  hm_assert(pg == page_of(s, p) || pg->cls == CLASS_HUGE);
  if (pg->cls != CLASS_HUGE && already_freed(pg, p)) hm_fatal("realloc of a freed block", p, pg);
  size_t usable = hm_secure ? secure_usable(pg, p) : pg->block_size;
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
    void *q = segment_huge_resize(s, pg, n);
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
    q = room > MEDIUM_MAX ? heap_malloc_grow(hm_tls_heap, room) : hm_malloc_fast(room);
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
  if (hm_secure) secure_flush(h);
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
  bool unmapped = segment_cache_trim();
  unmapped |= segment_huge_cache_purge(true, NULL);
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
