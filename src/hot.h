/* hot.h — the fast paths of malloc and free, everything else is a call away.
 *
 * A thread's heap keeps, for every class up to 256 KiB, one list malloc pops:
 * up to 3.5 KiB the class's current page, from 4 KiB the heap's thread cache
 * of the class (tcache.c), laid out as a page's pop line so that both pop
 * alike: no branch on the kind of class (a random mix of small and big sizes
 * mispredicts it).
 *
 * malloc(n):               list = heap->direct[n / 16] (up to 32 KiB; by
 *                          512 bytes above), pop list->free.
 * free(p):                 segment = p & ~SEG_MASK (checked against the
 *                          segment map's window), page =
 *                          segment->slice_page[slice of p]; if p is a
 *                          carved block's start that does not look
 *                          already freed, and page->local says this thread
 *                          owns the page: push it on segment->slice_push[slice
 *                          of p], the page itself or the thread cache of its
 *                          class; if
 *                          another thread owns the page, append it to this
 *                          thread's buffer of that heap's blocks (remote.c).
 * Both keep the list's count: a page's blocks in use, a cache's room; a push
 * that takes it to 0 (an emptied page, a full cache) calls out.
 * No locks, no atomic read-modify-write, no per-block header.
 * Anything unusual (first use by a thread, empty list, bigger sizes, another
 * thread's block, a page parked as full, a suspicious pointer) goes to the
 * slow paths in heap.c and free.c. */
#ifndef HAKMEM_HOT_H
#define HAKMEM_HOT_H
#include "internal.h"
#include "options.h"
#include "profile.h"

/* The buffers of remote frees (remote.c, hm_free_remote).  The owner marks
 * itself busy for the few instructions of an append; the purger, to take the
 * buffers of a quiet thread, sets tc_stop and then sees the owner busy or is
 * sure the owner sees tc_stop.  The signal fence keeps the compiler from
 * moving the store below the load; the purger's membarrier() stands in for
 * the processor fence. */
HM_INLINE bool tc_enter(heap_t *h) {
  atomic_store_explicit(&h->tc_busy, 1, memory_order_relaxed);
  atomic_signal_fence(memory_order_seq_cst);
  return likely(!atomic_load_explicit(&h->tc_stop, memory_order_acquire));
}
HM_INLINE void tc_leave(heap_t *h) { atomic_store_explicit(&h->tc_busy, 0, memory_order_release); }

/* A list's head (a page's free, a cache's word): only the owner writes it,
 * with release stores (the block's link is written first), and the purger
 * may read it (tcache_take) while the owner pops or pushes; the owner's own
 * reads are plain. */
HM_INLINE uintptr_t list_head(list_t *l) { return l->free; }
HM_INLINE void list_set_head(list_t *l, uintptr_t b) { __atomic_store_n(&l->free, b, __ATOMIC_RELEASE); }
HM_INLINE uint32_t list_count(list_t *l) { return count_load(&l->used); }

/* Take b, the head of list l, off it, its link decoded to next ^ b: t.
 * (The count after the head: whoever reads the new count sees the new head,
 * tcache_take.) */
HM_INLINE block_t *hm_list_took(list_t *l, block_t *b, uintptr_t t) {
  list_set_head(l, t ^ (uintptr_t)b);
  b[0].word = 0;            /* no longer looks free (the link word stays, as glibc's does) */
  count_inc(&l->used);
  return b;
}
/* The same, the link checked first: it must have none of the list's check
 * bits set (the same slice for a page of one slice, the same region of
 * hakmem's segments for a thread cache, and the blocks' alignment), else
 * hm_list_take_checked looks closer (the end of the list, a block farther
 * away) and reports a link that does not lead to a free block of the list's
 * kind before b is handed out. */
__attribute__((returns_nonnull)) block_t *hm_list_take_checked(list_t *l, block_t *b, uintptr_t t);
HM_INLINE block_t *hm_list_take(list_t *l, block_t *b) {
  uintptr_t t = b[1].word ^ l->key;          /* next ^ b */
  if (unlikely((t & l->check) != 0)) return hm_list_take_checked(l, b, t);
  return hm_list_took(l, b, t);
}
/* The head of list l, which is not empty. */
HM_INLINE void *hm_list_pop(list_t *l) { return hm_list_take(l, (block_t *)list_head(l)); }
HM_INLINE void *hm_page_pop(page_t *pg) { return hm_list_pop(&pg->list); }

/* Push b, a block of pg not looking free, on list o: the mark is the page's
 * key, the link is encoded with the list's (link_enc).  True if it takes the
 * count to 0.  (The count last: once the purger reads it, these stores are
 * done.) */
HM_INLINE bool hm_list_push(list_t *o, page_t *pg, block_t *b) {
  block_mark_free(pg, b);                    /* a second free is caught */
  b[1].word = link_enc(o->key, b, list_head(o));
  list_set_head(o, (uintptr_t)b);
  return count_dec_to_zero(&o->used);
}

/* The owner h frees b, a block of pg not looking free, onto list o (pg, or
 * the thread cache of its class).  The count reaching 0 is an emptied page
 * or a full cache (a tail call: free's fast path then saves no registers). */
void tcache_full(heap_t *h, page_t *pg);
HM_INLINE void hm_owner_push_ended(heap_t *h, list_t *o, page_t *pg) {
  if (o == &pg->list) heap_page_retire(h, pg);
  else tcache_full(h, pg);
}
HM_INLINE void hm_owner_push(heap_t *h, list_t *o, page_t *pg, block_t *b) {
  if (unlikely(hm_list_push(o, pg, b))) hm_owner_push_ended(h, o, pg);
}

/* A block of n's class from h's list for it, or NULL with *c the class for
 * heap_malloc_slow (CLASS_LARGE above the classes); *c is set only then.
 * The list's entry is read with acquire: the purger, having cut a cache,
 * puts its entry back (tcache_take).  No prefetch of the next block: pages
 * gain little by it, a thread cache's next block is hot, and for blocks at
 * 4 KiB strides, all in one L1 set, the fetch evicts what is in use. */
HM_INLINE void *hm_malloc_try(heap_t *h, size_t n, size_t *c) {
  size_t i;
  if (likely(n <= DIRECT_16_MAX)) {
    i = (n + 15) >> 4;
  } else if (likely(n <= MEDIUM_MAX)) {
    i = DIRECT_BIG(n);
  } else {
    *c = CLASS_LARGE;
    return NULL;
  }
  list_t *l = atomic_load_explicit(HM_ELEM(h, direct, i), memory_order_acquire);
  block_t *b = (block_t *)list_head(l);
  if (likely(b != NULL)) return hm_list_take(l, b);
  *c = class_of(n);
  return NULL;
}

/* Where malloc's fast path goes when it misses: heap_malloc_slow, or when
 * profiling, profile_malloc (hm_malloc_profiled, set once at start-up,
 * options_init).  A flag, not a function pointer: a pointer that every
 * malloc calls through is what a heap overflow would aim at (glibc removed
 * its malloc hooks for that reason).  Atomic: a thread's first malloc reads
 * it before the start-up it waits for (a plain load on x86).  (hidden: read
 * without the GOT) */
extern _Atomic bool hm_malloc_profiled __attribute__((visibility("hidden")));

HM_INLINE void *hm_malloc_fast(size_t n) {
  heap_t *h = hm_tls_heap;
  size_t c;
  void *p = hm_malloc_try(h, n, &c);
  if (likely(p != NULL)) return p;
  return unlikely(atomic_load_explicit(&hm_malloc_profiled, memory_order_relaxed)) ? profile_malloc(h, n, c)
                                                                                  : heap_malloc_slow(h, n, c);
}

/* May b, at offset off of its page, be freed here: is it a block start, and
 * does it not look free already (block_looks_free)? */
HM_INLINE bool hm_freeable(const page_t *pg, const block_t *b, uintptr_t off) {
  return hm_block_start(pg, off) && !block_looks_free(pg, b);
}

/* Another heap's block b (owner: to): into h's buffer for to, without
 * touching b (the owner tests each block for a double free as it collects
 * the buffer, remote.c); remote_free when the buffer is for another heap,
 * none (hm_rb_none) or full, which is also how a block above 32 KiB goes
 * there (page_rb_slot: remote_free counts those blocks' bytes). */
HM_INLINE void hm_free_remote(heap_t *h, page_t *pg, block_t *b, heap_t *to) {
  if (likely(tc_enter(h))) {
    rbuf_t *o = atomic_load_explicit(HM_ELEM(h, out, atomic_load_explicit(&pg->rb_slot, memory_order_relaxed)), memory_order_relaxed);
    if (likely(o->to == to) && likely(o->n < RB_BLOCKS)) {
      o->block[o->n++] = b;
      tc_leave(h);
      return;
    }
  }
  tc_leave(h);
  remote_free(h, pg, b, to);
}

/* to_cache: a block of a class with a thread cache may go there (else to
 * its page).  size: what the program says the block holds (free_sized, C++
 * sized delete), else 0; more than its page's blocks go to
 * hm_free_sized_slow, which reports a size larger than the block; the
 * slow path gets the size too (the hardened mode checks it). */
HM_INLINE void hm_free_block(void *p, bool to_cache, size_t size) {
  if (likely(segment_near(p))) {                     /* not NULL, a foreign pointer nor a far segment's */
    segment_t *s = segment_of(p);
    size_t k = slice_index(p);
    page_t *pg = s->slice_page[k];
    if (unlikely(size > pg->block_size)) { hm_free_sized_slow(p, size); return; }
    block_t *b = (block_t *)p;
    uintptr_t off = (uintptr_t)p - (uintptr_t)pg->start;
    heap_t *owner, *h = hm_tls_heap;
    uintptr_t local = racy_word(&pg->local);
    list_t *o = to_cache ? slice_push_of(s, k) : &pg->list;
    if (likely(local == (uintptr_t)h)) {             /* ours, and neither parked nor slow */
      if (likely(hm_freeable(pg, b, off))) {
        hm_owner_push(h, o, pg, b);
        return;
      }
    } else if ((owner = atomic_load_explicit(&pg->heap, memory_order_relaxed)) != NULL && owner != h &&
               !(atomic_load_explicit(&pg->flags, memory_order_relaxed) & PAGE_SLOW) && hm_block_start(pg, off)) {
      hm_free_remote(h, pg, b, owner);
      return;
    }
  }
  hm_free_slow_sized(p, size, to_cache);
}

HM_INLINE void hm_free_fast(void *p) { hm_free_block(p, true, 0); }
HM_INLINE void hm_free_sized_fast(void *p, size_t size) { hm_free_block(p, true, size); }

#endif
