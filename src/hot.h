/* hot.h — the fast paths of malloc and free, everything else is a call away.
 *
 * malloc(n):               page = heap->current[class of n: a table lookup up
 *                          to 32 KiB]; pop page->free.
 * free(p):                 segment = p & ~SEG_MASK (checked against the segment
 *                          map), page = segment->slice_page[slice of p]; if p
 *                          is a block start that does not look already freed,
 *                          push it on page->free if this thread owns the page,
 *                          else onto the page's thread_free with one CAS.
 * No locks, no atomics, no per-block header.  Anything unusual (first use by a
 * thread, empty page, bigger sizes, another thread's block, a page parked as
 * full, a suspicious pointer) goes to the slow paths in heap.c and alloc.c. */
#ifndef HAKMEM_HOT_H
#define HAKMEM_HOT_H
#include "internal.h"
#include "options.h"

HM_INLINE void *hm_page_pop(page_t *pg) {
  block_t *b = (block_t *)pg->free;
  pg->free = b->next ^ pg->pop_key;
  b->next = 0;              /* leave no free-list link in a live block */
  page_set_used(pg, page_used(pg) + 1);
  return b;
}

HM_INLINE void *hm_malloc_fast(size_t n) {
  heap_t *h = hm_tls_heap;
  size_t c;
  if (likely(n <= TABLE_MAX)) {
    c = hm_class_table[(n + 15) >> 4];
  } else {
    if (unlikely(n > MEDIUM_MAX)) return heap_malloc_slow(h, n, CLASS_LARGE);
    c = size_class(n);
  }
  page_t *pg = h->current[c];
  if (likely(pg->free != 0)) return hm_page_pop(pg);
  return heap_malloc_slow(h, n, c);
}

/* May b, at offset off of its page, be freed here: is it a block start, and
 * does it not look free already (block_looks_free, with the page's fields
 * read once)? */
HM_INLINE bool hm_freeable(const page_t *pg, const block_t *b, uintptr_t start, uintptr_t area, uintptr_t off) {
  if (off >= area || off * pg->magic >= pg->magic) return false;
  uintptr_t cand = dec(pg, b->next);
  return cand != 0 && cand - start >= area;
}

/* Another thread's block b (not looking free): push it onto its page's
 * thread_free with one CAS.  False, b untouched, when the page is parked or
 * being handed over (TF state set): the slow path deals with those. */
HM_INLINE bool hm_free_remote_fast(page_t *pg, block_t *b, heap_t *owner) {
  uintptr_t data = b->next, tf = atomic_load_explicit(&pg->thread_free, memory_order_relaxed);
  do {
    if (unlikely(tf & TF_MASK)) { b->next = data; return false; }
    b->next = enc(pg, TF_PTR(tf));
  } while (!atomic_compare_exchange_weak_explicit(&pg->thread_free, &tf, TF_PUSH(tf, b),
                                                  memory_order_release, memory_order_relaxed));
  if (unlikely(atomic_load_explicit(&owner->idle, memory_order_relaxed))) heap_wake_idle(owner);
  return true;
}

HM_INLINE void hm_free_fast(void *p) {
  if (likely(segment_known(p))) {                    /* not NULL nor a foreign pointer */
    page_t *pg = page_of(segment_of(p), p);
    block_t *b = (block_t *)p;
    uintptr_t start = (uintptr_t)pg->start, area = page_area(pg), off = (uintptr_t)p - start;
    heap_t *owner;
    if (likely(atomic_load_explicit(&pg->local, memory_order_relaxed) == hm_tls_heap)) {          /* ours, and neither parked nor slow */
      if (likely(hm_freeable(pg, b, start, area, off))) {
        b->next = enc(pg, pg->free);
        pg->free = (uintptr_t)b;
        /* release: once the purger reads the new count, these stores are done */
        uint32_t used = page_used(pg) - 1;
        atomic_store_explicit(&pg->used, used, memory_order_release);
        if (unlikely(used == 0)) heap_page_retire(hm_tls_heap, pg);
        return;
      }
    } else if ((owner = atomic_load_explicit(&pg->heap, memory_order_relaxed)) != NULL && owner != hm_tls_heap &&
               !hm_slow_mode && hm_freeable(pg, b, start, area, off) && hm_free_remote_fast(pg, b, owner)) {
      return;
    }
  }
  hm_free_slow(p);
}

#endif
