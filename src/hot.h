/* hot.h — the fast paths of malloc and free, everything else is a call away.
 *
 * malloc(n), n <= 1 KiB:  page = heap->direct[(n+15)/16]; pop page->free
 *                          (bigger classes: heap->medium[class]).
 * free(p):                 segment = p & ~SEG_MASK (checked against the segment
 *                          map), page = segment->slice_page[slice of p]; if this
 *                          thread owns the page and p is a block start that
 *                          does not look already freed, push it on page->free.
 * No locks, no atomics, no per-block header.  Anything unusual (first use by a
 * thread, empty page, bigger sizes, another thread's block, a page parked as
 * full, a suspicious pointer) goes to the slow paths in heap.c and alloc.c. */
#ifndef HAKMEM_HOT_H
#define HAKMEM_HOT_H
#include "internal.h"

HM_INLINE void *hm_page_pop(page_t *pg) {
  block_t *b = (block_t *)pg->free;
  pg->free = dec(pg, b->next);
  b->next = 0;              /* leave no free-list link in a live block */
  page_set_used(pg, page_used(pg) + 1);
  return b;
}

HM_INLINE void *hm_malloc_fast(size_t n) {
  heap_t *h = hm_tls_heap;
  page_t *pg;
  if (likely(n <= SMALL_MAX)) {
    pg = h->direct[(n + 15) >> 4];
  } else {
    if (unlikely(n > MEDIUM_MAX)) return heap_malloc_slow(h, n);
    pg = h->medium[size_class(n)];
  }
  if (likely(pg->free != 0)) return hm_page_pop(pg);
  return heap_malloc_slow(h, n);
}

HM_INLINE void hm_free_fast(void *p) {
  segment_t *s = segment_checked(p);                 /* NULL for NULL and foreign pointers */
  if (likely(s != NULL)) {
    page_t *pg = page_of(s, p);
    uintptr_t off = (uintptr_t)p - (uintptr_t)pg->start;
    if (likely(atomic_load_explicit(&pg->heap, memory_order_relaxed) == hm_tls_heap &&
               pg->flags == 0 &&
               off < page_area(pg) && off * pg->magic < pg->magic)) {   /* one of our blocks' start */
      block_t *b = (block_t *)p;
      uintptr_t cand = dec(pg, b->next);             /* b's link, were b already free */
      if (likely(cand - (uintptr_t)pg->start >= page_area(pg) && cand != 0)) {
        b->next = enc(pg, pg->free);
        pg->free = (uintptr_t)b;
        /* release: once the purger reads the new count, these stores are done */
        uint32_t used = page_used(pg) - 1;
        atomic_store_explicit(&pg->used, used, memory_order_release);
        if (unlikely(used == 0)) heap_page_retire(hm_tls_heap, pg);
        return;
      }
    }
  }
  hm_free_slow(p);
}

#endif
