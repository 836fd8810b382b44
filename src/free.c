/* free.c — free's slow path: a pointer checked (what is wrong with it is
 * reported), the hardened mode's quarantine, and the release of a block to
 * its owner: this thread's heap (heap.c), another's thread_free list (page.c),
 * or an exited thread's segment, adopted (segment.c).  alloc.c's API,
 * remote.c's buffers and the fast path's misses (hot.h) come here. */
#include "hot.h"
#include "options.h"
#include "stats.h"

#include <stdio.h>

/* Find the segment and page of block p, or report what is wrong and abort.
 * 'op' names the call for the message ("free", "realloc", ...). */
page_t *hm_lookup(const void *p, segment_t **sp, const char *op) {
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

/* Profiling alone (the buffers are on in no other slow mode): p, a block of
 * a size class another thread's heap owns, on a page marked for its samples
 * and seen by the profiler, goes into this thread's buffer for that heap,
 * as free's fast path puts the blocks of unmarked pages.  One by one onto
 * the page's remote list instead, each block's line would pass between the
 * cores twice. */
static bool free_buffered(page_t *pg, void *p) {
  if (!hm_remote_on || pg->cls >= CLASSES) return false;
  heap_t *h = hm_tls_heap, *owner = atomic_load_explicit(&pg->heap, memory_order_relaxed);
  if (owner == NULL || owner == h) return false;
  hm_free_remote(h, pg, (block_t *)p, owner);
  return true;
}

/* free, or a sized free of size (else 0), past its fast path; seen: a block
 * another thread handed over (remote.c), which slow mode saw at its free. */
static void free_slow(void *p, size_t size, bool to_cache, bool seen) {
  if (!p) return;
  segment_t *s;
  page_t *pg = hm_lookup(p, &s, size ? "sized free" : "free");
  if (unlikely(hm_slow_mode) && !seen) {
    if (profile_free_local(p, pg, to_cache)) return;    /* the owner's, on a page marked for its samples */
    slow_mode_free(p, pg);
    if (free_buffered(pg, p)) return;
  }
  if (pg->cls == CLASS_HUGE) { huge_free(s); return; }
  if (pg->cls == CLASS_LARGE && atomic_exchange_explicit(&pg->freed, 1, memory_order_relaxed))
    hm_fatal("double free", p, pg);
  if (unlikely(hm_secure)) {                  /* quarantined: another block leaves instead */
    if (!(p = secure_free(pg, p, size))) return;
    s = segment_of(p);
    pg = page_of(s, p);
  }
  hm_free_release(s, pg, p, to_cache);
}
HM_COLD void hm_free_slow_sized(void *p, size_t size, bool to_cache) { free_slow(p, size, to_cache, false); }
HM_COLD void hm_free_slow(void *p, bool to_cache) { free_slow(p, 0, to_cache, false); }
HM_COLD void hm_free_handed(void *p) { free_slow(p, 0, true, true); }

/* Release block p of page pg as another thread's free, onto pg's remote
 * list; owner, if not NULL, woken if the purger left it idle. */
static void release_remote(page_t *pg, void *p, heap_t *owner) {
  /* (the owner's fast path checks its own frees; a remote one is checked here) */
  if (pg->cls < CLASSES && block_looks_free(pg, p)) hm_fatal("double free (the block is already free)", p, pg);
  if (unlikely(hm_counting)) stat_os(STAT_REMOTE_SENT);
  page_free_remote(pg, (block_t *)p);
  if (owner && unlikely(heap_idle(owner))) heap_wake_idle(owner);
}

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
  release_remote(pg, p, owner);
}

/* A sized free whose size is more than the blocks of the page free's fast
 * path found: the exact lookup decides (a huge block's header is elsewhere). */
HM_COLD void hm_free_sized_slow(void *p, size_t size) {
  segment_t *s;
  page_t *pg = hm_lookup(p, &s, "sized free");
  if (size > pg->block_size) hm_fatal("sized free or delete with a size larger than the block", p, pg);
  hm_free_slow_sized(p, size, true);
}

/* The blocks of h's quarantine, released: by its owner (thread exit,
 * malloc_trim), taking h's lock for each block it takes out, since another
 * thread's malloc_trim may be emptying the same quarantine. */
static void release_quarantined(void *p) {
  page_t *pg = page_of(segment_of(p), p);
  hm_free_release(segment_of(p), pg, secure_unquarantine(p), false);
}
void hm_free_quarantine(heap_t *h) {
  for (;;) {
    heap_enter(h);
    void *p = secure_quarantine_take(h);
    heap_leave(h);
    if (!p) return;
    release_quarantined(p);
  }
}

/* The same for another thread's malloc_trim, which holds h's lock. */
void hm_free_quarantine_held(heap_t *h) {
  for (void *p; (p = secure_quarantine_take(h));) release_quarantined(p);
}

/* The same by the purger, holding quiet h's lock (heap_trim_idle): each block
 * goes back as another thread's free, which a quiet or exited owner's trim
 * takes back (the purger adopts no segment).  Without it the quarantine of a
 * thread that waits would pin its blocks' pages, its own and other
 * threads', for as long as it waits. */
void hm_free_quarantine_quiet(heap_t *h) {
  for (void *p; (p = secure_quarantine_take(h));) {
    p = secure_unquarantine(p);
    page_t *pg = page_of(segment_of(p), p);
    heap_t *owner = atomic_load_explicit(&pg->heap, memory_order_acquire);
    release_remote(pg, p, owner != h ? owner : NULL);   /* (h, being trimmed, takes its own) */
  }
}
