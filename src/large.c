/* large.c — blocks above the size classes: a run of slices of one of the
 * heap's segments (a large block, one to a page, which lives parked on the
 * heap's full list), or a mapping of its own (huge.c). */
#include "hot.h"
#include "stats.h"

#include <errno.h>

static void *enomem(void) { errno = ENOMEM; return NULL; }

/* Under an address-space limit (ulimit -v), a big block takes a mapping of
 * its own when that costs less address space than its share of a segment
 * filled with blocks of its size (16 slices: 17 against 21 1/3), as glibc's
 * big blocks have theirs; without a limit, address space costs nothing and
 * a run of slices is faster. */
static bool big_apart(size_t slices) {
  return (slices + 1) * ((SLICES - 1) / slices) < SLICES && os_space_limited();
}

/* (h locked) A block above the largest class: a run of slices in one of the
 * heap's segments (large) or a mapping of its own (huge).  align may exceed
 * SLICE_SIZE: the block then starts inside its run, at the aligned address.
 * grow: a buffer realloc moves to grow (placed where it may grow in place). */
void *large_malloc(heap_t *h, size_t n, size_t align, bool grow) {
  if (n > ALLOC_MAX || align > ALLOC_MAX / 2) return enomem();
  if (n == 0) n = 1;            /* a block of 0 bytes would start where its run ends */
  hm_assert(heap_held(h) && (align == 0 || (align & (align - 1)) == 0));
  /* big blocks other threads freed: their runs first (a thread that allocates
   * only big blocks would otherwise never take them back) */
  if (atomic_load_explicit(&h->delayed, memory_order_relaxed)) heap_collect_delayed(h);
  segcache_tick(0);
  size_t slack = align > SLICE_SIZE ? align - SLICE_SIZE : 0;
  if (n <= (grow ? GROW_HUGE : LARGE_MAX) && slack <= LARGE_MAX) {
    size_t tail = hm_secure ? SECURE_TAIL : 0;       /* (secure mode: canaries, and a guard page) */
    size_t slices = (n + tail + slack + secure_guard() + SLICE_SIZE - 1) / SLICE_SIZE;
    if (slices < SLICES && !big_apart(slices)) {
      page_t *pg = segment_page_alloc(h, slices, CLASS_LARGE, !grow);
      if (!pg) return enomem();
      segment_t *s = segment_of(pg);
      uint8_t *run = page_run(pg);
      uint8_t *blk = align > SLICE_SIZE ? (uint8_t *)(((uintptr_t)run + align - 1) & ~(uintptr_t)(align - 1)) : run;
      size_t bs = (size_t)(run + slices * SLICE_SIZE - blk) - secure_guard();
      hm_assert(pg->cls == CLASS_LARGE && pg->slices == slices && s->heap == h);
      hm_assert(bs >= n && blk + bs <= run + slices * SLICE_SIZE);
      hm_assert(align <= 1 || ((uintptr_t)blk & (align - 1)) == 0);
      secure_page_guard(s, pg->slice, slices);
      pg->start = blk;
      pg->block_size = bs;
      page_set_magic(pg, true);
      page_set_area(pg, bs);
      pg->reserved = pg->capacity = 1;
      page_set_used(pg, 1);
      heap_page_keys(h, pg);
      page_set_flags(pg, page_start_flags(h, CLASS_LARGE));
      atomic_store_explicit(&pg->thread_free, TF_NOTIFY, memory_order_relaxed);
      page_set_owner(pg, h);
      pageq_push(&h->full, pg);
      return blk;
    }
  }
  page_t *pg = huge_alloc(h, n, align);
  if (!pg) return enomem();
  hm_assert(pg->cls == CLASS_HUGE && pg->block_size >= n && pg == &segment_of(pg)->pages[1]);
  hm_assert(segment_of(pg)->huge_offset || segment_of(pg->start) == segment_of(pg));   /* free's lookup */
  if (h->user) huge_list_add(h, segment_of(pg));
  return pg->start;
}

/* realloc's new block for a buffer of n > MEDIUM_MAX bytes that it moves to
 * grow. */
void *large_malloc_grow(heap_t *h, size_t n) {
  if (unlikely(h == &hm_heap_empty) && !(h = heap_get())) return enomem();
  heap_enter(h);
  void *p = large_malloc(h, n, 0, true);
  heap_leave(h);
  if (unlikely(hm_secure) && p) secure_arm(p, n);
  if (unlikely(hm_slow_mode) && p) slow_mode_alloc(p, n);
  return p;
}
