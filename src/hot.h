/* hot.h — the fast paths of malloc and free, everything else is a call away.
 *
 * malloc(n):               up to 3.5 KiB, page = heap->direct[n / 16], pop
 *                          page->free; above, class of n (a table lookup up
 *                          to 256 KiB), pop the heap's thread cache of the
 *                          class if it has a block, else page =
 *                          heap->current[class], pop page->free.
 * free(p):                 segment = p & ~SEG_MASK (checked against the segment
 *                          map), page = segment->slice_page[slice of p]; if p
 *                          is a block start that does not look already freed,
 *                          and page->local says this thread owns the page:
 *                          push it on page->free, or, for classes from 4 KiB
 *                          (local = owner + 1), on the thread cache of its
 *                          class if that has room; if
 *                          another thread owns the page, append it to this
 *                          thread's buffer of that heap's blocks (remote.c).
 * No locks, no atomic read-modify-write, no per-block header.
 * Anything unusual (first use by a thread, empty page, bigger sizes, another
 * thread's block, a page parked as full, a suspicious pointer) goes to the
 * slow paths in heap.c and alloc.c. */
#ifndef HAKMEM_HOT_H
#define HAKMEM_HOT_H
#include "internal.h"
#include "options.h"

/* prefetch: the next block is often one another thread freed, its line in
 * that thread's cache or evicted since, and the next malloc reads and writes
 * it: fetch it now.  (For the small classes: a bigger class's next block is a
 * page or more away, and 64 blocks of 40-103 KB allocated and freed in turn
 * ran 13 % slower with it.) */
HM_INLINE void *hm_page_pop(page_t *pg, bool prefetch) {
  block_t *b = (block_t *)pg->free;
  uintptr_t next = b[1].word ^ pg->pop_key;
  pg->free = next;
  if (prefetch) __builtin_prefetch((void *)next, 1);
  b[0].word = 0;            /* no longer looks free (the link word stays, as glibc's does) */
  page_set_used(pg, page_used(pg) + 1);
  return b;
}

/* The thread cache (tcache.c).  The owner marks itself busy for the few
 * instructions of a push or pop; the purger, to empty the cache, sets tc_stop
 * and then sees the owner busy or is sure the owner sees tc_stop.  The
 * signal fence keeps the compiler from moving the store below the load; the
 * purger's membarrier() stands in for the processor fence. */
HM_INLINE bool tc_enter(heap_t *h) {
  atomic_store_explicit(&h->tc_busy, 1, memory_order_relaxed);
  atomic_signal_fence(memory_order_seq_cst);
  return likely(!atomic_load_explicit(&h->tc_stop, memory_order_acquire));
}
HM_INLINE void tc_leave(heap_t *h) { atomic_store_explicit(&h->tc_busy, 0, memory_order_release); }

HM_INLINE uintptr_t tc_get(_Atomic uintptr_t *t) { return atomic_load_explicit(t, memory_order_relaxed); }
HM_INLINE void tc_set(_Atomic uintptr_t *t, uintptr_t w) { atomic_store_explicit(t, w, memory_order_relaxed); }

/* Pop and push on cache t of h: between tc_enter and tc_leave, or under the
 * heap lock (stats mode, where the fast paths stay out).  A popped block's
 * first word is cleared (else it would still look free to free()), its second
 * keeps the encoded link, as glibc's tcache leaves its mangled one: clearing
 * it too cost 14 % on fixed-4k (docs/performance.md). */
HM_INLINE block_t *tc_pop(heap_t *h, _Atomic uintptr_t *t) {
  block_t *b = (block_t *)(tc_get(t) & ~TC_ROOM);
  if (b) {
    tc_set(t, b[1].word ^ h->tc_key);
    b[0].word = 0;
  }
  return b;
}
/* b: a block of pg, owned by h and not looking free; false if t is full. */
HM_INLINE bool tc_push(heap_t *h, _Atomic uintptr_t *t, page_t *pg, block_t *b) {
  uintptr_t w = tc_get(t);
  if (!(w & TC_ROOM)) return false;
  block_mark_free(pg, b);              /* a second free is caught */
  b[1].word = w ^ h->tc_key;
  tc_set(t, (uintptr_t)b + (w & TC_ROOM) - 1);
  return true;
}

/* A block of class c (one with a cache) from h's cache, or NULL.  The cache
 * is in use: the decay leaves it (tcache.c). */
HM_INLINE void *hm_tcache_pop(heap_t *h, size_t c) {
  block_t *b = NULL;
  if (likely(tc_enter(h)) && (b = tc_pop(h, &h->tc[c - TC_MIN])) != NULL) h->tc_popped[c] = 1;
  tc_leave(h);
  return b;
}

/* A block of n's class from h's thread cache or current page, or NULL with
 * *c the class for heap_malloc_slow (CLASS_LARGE above the classes); *c is
 * set only then. */
HM_INLINE void *hm_malloc_try(heap_t *h, size_t n, size_t *c) {
  if (likely(n <= SMALL_MAX)) {
    size_t i = (n + 15) >> 4;
    page_t *pg = h->direct[i];
    if (likely(pg->free != 0)) return hm_page_pop(pg, true);
    *c = hm_class_small[i];
    return NULL;
  } else if (likely(n <= MEDIUM_MAX)) {
    *c = hm_class_big[(n + 511) >> 9];
    void *b = hm_tcache_pop(h, *c);
    if (b) return b;
  } else {
    *c = CLASS_LARGE;
    return NULL;
  }
  page_t *pg = h->current[*c];
  if (likely(pg->free != 0)) return hm_page_pop(pg, false);
  return NULL;
}

HM_INLINE void *hm_malloc_fast(size_t n) {
  heap_t *h = hm_tls_heap;
  size_t c;
  void *p = hm_malloc_try(h, n, &c);
  return likely(p != NULL) ? p : heap_malloc_slow(h, n, c);
}

/* May b, at offset off of its page, be freed here: is it a block start, and
 * does it not look free already (block_looks_free)? */
HM_INLINE bool hm_freeable(const page_t *pg, const block_t *b, uintptr_t off) {
  return hm_block_start(pg, off) && !block_looks_free(pg, b);
}

/* Another heap's block b (owner: to): into h's buffer for to, without
 * touching b (the owner tests each block for a double free as it collects
 * the buffer, remote.c); remote_free when the buffer is for another heap or
 * full, or b is above 32 KiB (remote_free counts those blocks' bytes). */
HM_INLINE void hm_free_remote(heap_t *h, page_t *pg, block_t *b, heap_t *to) {
  if (likely(tc_enter(h))) {
    rbuf_t *o = atomic_load_explicit(&h->out[atomic_load_explicit(&pg->rb_slot, memory_order_relaxed)], memory_order_relaxed);
    if (likely(o != NULL) && likely(o->to == to) && likely(o->n < RB_BLOCKS) && likely(pg->cls < CLASS_OVER_32K)) {
      o->block[o->n++] = b;
      tc_leave(h);
      return;
    }
  }
  tc_leave(h);
  remote_free(h, pg, b, to);
}

/* The owner h frees b (not looking free) onto its page. */
HM_INLINE void hm_page_push(heap_t *h, page_t *pg, block_t *b) {
  block_set_free(pg, b, pg->free);
  pg->free = (uintptr_t)b;
  /* release: once the purger reads the new count, these stores are done */
  uint32_t used = page_used(pg) - 1;
  atomic_store_explicit(&pg->used, used, memory_order_release);
  if (unlikely(used == 0)) heap_page_retire(h, pg);
}

/* Cache b, a block of pg (a class with a cache), owned by h and not looking
 * free; a full cache is tcache_full's (a tail call: free's fast path then
 * saves no registers).  Every 256th push ticks (tcache.c). */
HM_INLINE void hm_tcache_push(heap_t *h, page_t *pg, block_t *b) {
  if (likely(tc_enter(h))) {
    bool done = tc_push(h, &h->tc[pg->cls - TC_MIN], pg, b);
    tc_leave(h);
    if (likely(done)) {
      if (unlikely(++h->tc_pushes == 0)) tcache_tick(h);
      return;
    }
    tcache_full(h, pg, b);
    return;
  }
  tc_leave(h);
  hm_page_push(h, pg, b);
}

/* to_cache: a block of a class with a thread cache may go there. */
HM_INLINE void hm_free_block(void *p, bool to_cache) {
  if (likely(segment_known(p))) {                    /* not NULL nor a foreign pointer */
    page_t *pg = page_of(segment_of(p), p);
    block_t *b = (block_t *)p;
    uintptr_t off = (uintptr_t)p - (uintptr_t)pg->start;
    heap_t *owner, *h = hm_tls_heap;
    uintptr_t local = atomic_load_explicit(&pg->local, memory_order_relaxed);
    if (likely(local == (uintptr_t)h)) {             /* ours, and neither parked nor slow */
      if (likely(hm_freeable(pg, b, off))) {
        hm_page_push(h, pg, b);
        return;
      }
    } else if (local == (uintptr_t)h + 1) {          /* the same, of a class with a thread cache */
      if (likely(hm_freeable(pg, b, off))) {
        if (to_cache) hm_tcache_push(h, pg, b);
        else hm_page_push(h, pg, b);
        return;
      }
    } else if ((owner = atomic_load_explicit(&pg->heap, memory_order_relaxed)) != NULL && owner != h &&
               !hm_slow_mode && hm_block_start(pg, off)) {
      hm_free_remote(h, pg, b, owner);
      return;
    }
  }
  hm_free_slow(p, to_cache);
}

HM_INLINE void hm_free_fast(void *p) { hm_free_block(p, true); }

#endif
