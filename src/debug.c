/* debug.c — the debug build's validation walk (make debug, -DHM_DEBUG).
 *
 * heap_validate(h) checks a whole heap against what the rest of the code
 * takes for granted: its segments and their slice bookkeeping, the segment
 * map and the fit index, each page on the list its state names and each
 * page's local free list, the thread caches, malloc's direct[] entries and
 * the purge deadlines.  A broken rule is reported by hm_assert.  It runs with h
 * locked by the thread acting as its owner, at safe points: a thread's exit
 * (heap_park, heap_done), malloc_trim and every heap tick (HEAP_TICKS
 * slow-path events).  It reads only what that lock keeps still: not the
 * pages' thread_free lists, the delayed list or the inbox, which other
 * threads push onto meanwhile. */
#include "hot.h"
#include "profile.h"

#if HM_DEBUG_ON

#define PAGE_BLOCKS_MAX (SLICE_SIZE / 16)   /* a page's blocks at most (page_init) */
#define WALK_MAX ((size_t)1 << 24)          /* longer than any list: a cycle */

/* The longest run of set bits of m. */
static unsigned run_max(uint64_t m) {
  unsigned best = 0, n = 0;
  for (unsigned i = 0; i < 64; i++) {
    n = m >> i & 1 ? n + 1 : 0;
    if (n > best) best = n;
  }
  return best;
}

/* Is s in h's fit bin k, the one for its run? */
static bool in_bin(const heap_t *h, const segment_t *s, int k) {
  size_t n = 0;
  for (const segment_t *t = h->fit[k][s->fit_run[k]]; t; t = t->fit_next[k]) {
    hm_assert(++n < WALK_MAX && (t->fit_prev[k] ? t->fit_prev[k]->fit_next[k] == t : h->fit[k][s->fit_run[k]] == t));
    if (t == s) return true;
  }
  return false;
}

/* One of h's segments: its pages' runs, slice table and bitmaps, the map,
 * the fit index, the decay.  Returns its pages. */
static size_t validate_segment(heap_t *h, segment_t *s) {
  hm_assert(((uintptr_t)s & SEG_MASK) == 0 && s->size == SEG_SIZE && s->heap == h);
  _Atomic(uint8_t) *kind = segmap_entry((uintptr_t)s >> SEG_SHIFT);
  hm_assert(kind && atomic_load_explicit(kind, memory_order_relaxed) == SEGMAP_NORMAL);
  hm_assert(!atomic_load_explicit(&s->abandoned, memory_order_relaxed));
  hm_assert(s->pages_used == (uint32_t)__builtin_popcountll(s->pages_map));
  uint64_t runs = 1;                                     /* slice 0: the header */
  page_t *pg;
  for_each_page(s, pg) {
    uint64_t run = slice_run(pg->slice, pg->slices);
    hm_assert(pg->slices > 0 && pg->slice > 0 && pg->slice + pg->slices <= SLICES && !(runs & run));
    runs |= run;
    for (size_t k = pg->slice; k < (size_t)pg->slice + pg->slices; k++) hm_assert(s->slice_page[k] == pg);
    hm_assert(atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  }
  hm_assert(runs == s->used_slices);                     /* the bitmap is the pages' runs */
  for (size_t k = 0; k < SLICES; k++)                    /* (the header's and the free ones) */
    if (k == 0 || !(s->used_slices >> k & 1)) hm_assert(s->slice_page[k] == &hm_page_invalid);
  hm_assert(!(s->dirty_slices & s->used_slices) && !(s->purged_slices & s->used_slices));
  hm_assert(!(s->aged_slices & ~s->dirty_slices));       /* aged: dirty at the last check */
  uint64_t free = ~s->used_slices;
  hm_assert(s->fit_run[0] == run_max(free) && s->fit_run[1] == run_max(free & s->dirty_slices));
  for (int k = 0; k < 2; k++) hm_assert(!s->fit_run[k] || in_bin(h, s, k));
  hm_assert(!s->dirty_slices || s->purge_ms);            /* dirty slices: a purge is scheduled */
  hm_assert(!s->purge_ms || (h->next_purge_ms && h->next_purge_ms <= s->purge_ms));
  return s->pages_used;
}

/* pg's local free list: carved blocks of pg, each once, that look free; and
 * every carved block is on it or counted in use. */
static void validate_free_list(const page_t *pg) {
  uint64_t seen[PAGE_BLOCKS_MAX / 64] = { 0 };
  uint32_t n = 0;
  for (uintptr_t b = pg->free; b; b = block_next(pg, b)) {
    uintptr_t off = b - (uintptr_t)pg->start;
    hm_assert(off < page_area(pg) && off % pg->block_size == 0 && block_looks_free(pg, (void *)b));
    size_t i = off / pg->block_size;
    hm_assert(!(seen[i / 64] >> (i % 64) & 1));         /* no block twice (no cycle) */
    seen[i / 64] |= 1ull << (i % 64);
    n++;
  }
  hm_assert(n == pg->capacity - page_used(pg));
}

/* A page of h on one of its lists (full: h->full). */
static void validate_page(heap_t *h, page_t *pg, bool full) {
  segment_t *s = segment_of(pg);
  hm_assert(s->heap == h && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h && pg->slices > 0);
  hm_assert(pg >= s->pages && pg < s->pages + SLICES && (s->pages_map >> (pg - s->pages) & 1));
  hm_assert(atomic_load_explicit(&pg->rb_slot, memory_order_relaxed) == page_rb_slot(pg, h));
  hm_assert(!(pg->flags & PAGE_FULL) == !full);
  hm_assert(atomic_load_explicit(&pg->local, memory_order_relaxed) == (pg->flags || h->user ? 0 : (uintptr_t)h));
  hm_assert(page_used(pg) <= pg->capacity && pg->capacity <= pg->reserved);
  if (pg->cls == CLASS_LARGE) {                          /* one block, in use, parked */
    hm_assert(pg->flags == page_start_flags(h, CLASS_LARGE) && pg->capacity == 1 && pg->reserved == 1 && page_used(pg) == 1 && !pg->free);
    hm_assert(pg->start >= page_run(pg) && pg->start + pg->block_size <= page_run(pg) + pg->slices * SLICE_SIZE);
    return;
  }
  size_t pad = secure_pad(pg->block_size);
  hm_assert(pg->cls < CLASSES && pg->block_size == class_size(pg->cls) && pg->start == page_run(pg) + pad);
  /* (the profiler marks the pages that hold sampled blocks slow) */
  hm_assert((pg->flags & ~(PAGE_FULL | (hm_profiling ? PAGE_SLOW : 0))) == (hm_page_flags & ~(hm_profiling ? PAGE_SLOW : 0)));
  hm_assert(pg->reserved == (pg->slices * SLICE_SIZE - pad - secure_guard()) / pg->block_size);
  hm_assert(page_area(pg) == (size_t)pg->capacity * pg->block_size);
  if (full) hm_assert(!pg->free && pg->capacity == pg->reserved);   /* parked: found full */
  if (!(hm_secure && pg->cls == 0)) validate_free_list(pg);   /* (malloc(0)'s pages have no list: secure.c) */
  if (tcache_fast(pg->cls)) {                            /* where the owner's frees push */
    list_t *push = pg->flags & ~PAGE_SLOW ? &pg->list : h->tc_parked ? &h->tc_sink : &h->tc[pg->cls - TC_MIN].l;
    for (size_t k = pg->slice; k < (size_t)pg->slice + pg->slices; k++) hm_assert(slice_push_of(s, k) == push);
  } else {
    hm_assert(slice_push_of(s, pg->slice) == &pg->list);
  }
}

/* Class c's queue: linked both ways, its pages of class c, the spares right
 * behind the first; malloc's entry for c points at the first (or the
 * class's cache).  Returns its pages; adds its spares' slices to *spare. */
static size_t validate_queue(heap_t *h, size_t c, uint32_t *spare) {
  pageq_t *q = &h->queue[c];
  size_t n = 0;
  bool spares = true;
  hm_assert(!q->first == !q->last && (!q->first || !q->first->prev));
  for (page_t *pg = q->first; pg; pg = pg->next) {
    hm_assert(++n < WALK_MAX && pg->cls == c && (pg->next ? pg->next->prev == pg : q->last == pg));
    validate_page(h, pg, false);
    spares &= pg == q->first || pg->spare;
    hm_assert(!pg->spare || (spares && pg != q->first && page_used(pg) == 0));
    if (pg->spare) *spare += pg->slices;
  }
  size_t size = class_size(c), i = size <= DIRECT_16_MAX ? (size + 15) >> 4 : DIRECT_BIG(size);
  list_t *direct = atomic_load_explicit(&h->direct[i], memory_order_relaxed);
  list_t *pops = tcache_fast(c) ? (h->tc_parked ? &hm_page_empty.list : &h->tc[c - TC_MIN].l)
                                : q->first ? &q->first->list : &hm_page_empty.list;
  if (!hm_slow_mode) hm_assert(direct == pops);
  else hm_assert(direct == &hm_page_empty.list);
  if (atomic_load_explicit(&hm_malloc_profiled, memory_order_relaxed))   /* (the profiler pops there) */
    hm_assert(atomic_load_explicit(&h->current[c], memory_order_relaxed) == pops);
  return n;
}

/* The thread caches: each list's blocks look free, belong to pages of h
 * of its class, are on no page's free list, and are as many as the cap less
 * the room (but while the purger holds them cut: tcache_take). */
static void validate_caches(heap_t *h) {
  uint32_t kb = 0;
  for (size_t i = 0; i < TC_CLASSES; i++) {
    tcl_t *t = &h->tc[i];
    uint32_t cap = atomic_load_explicit(&h->tc_cap[i], memory_order_relaxed), n = 0;
    hm_assert(cap <= TC_MAX && t->l.key == h->tc_key && list_count(&t->l) <= cap);
    kb += cap * (uint32_t)((class_size(TC_MIN + i) + 1023) >> 10);
    for (uintptr_t b = list_head(&t->l); b; b = link_dec(h->tc_key, (void *)b, ((block_t *)b)[1].word)) {
      hm_assert(++n <= cap && segment_known((void *)b));
      page_t *pg = page_of(segment_of((void *)b), (void *)b);
      uintptr_t off = b - (uintptr_t)pg->start;
      hm_assert(pg->cls == TC_MIN + i && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
      hm_assert(off < page_area(pg) && off % pg->block_size == 0 && block_looks_free(pg, (void *)b));
      for (uintptr_t f = pg->free; f; f = block_next(pg, f)) hm_assert(f != b);
    }
    if (!h->tc_parked) hm_assert(n == cap - list_count(&t->l));
  }
  hm_assert(kb == h->tc_kb);
  if (!h->tc_parked) hm_assert(!list_head(&h->tc_sink) && list_count(&h->tc_sink) == 1);
}

void heap_validate(heap_t *h) {
  hm_assert(heap_held(h) && h != &hm_heap_empty && h->live);
  size_t pages = 0, listed = 0, n = 0;
  for (segment_t *s = h->segments; s; s = s->next) {
    hm_assert(++n < WALK_MAX && (s->prev ? s->prev->next == s : h->segments == s));
    pages += validate_segment(h, s);
  }
  for (int k = 0; k < 2; k++)
    for (unsigned r = 1; r < SLICES; r++) hm_assert(!h->fit[k][r] == !(h->fit_map[k] >> r & 1));
  uint32_t spare = 0;
  for (size_t c = 0; c < CLASSES; c++) listed += validate_queue(h, c, &spare);
  hm_assert(spare == h->spare_slices && spare <= SPARE_SLICES);
  hm_assert(!h->full.first == !h->full.last && (!h->full.first || !h->full.first->prev));
  for (page_t *pg = h->full.first; pg; pg = pg->next) {
    hm_assert(++listed < WALK_MAX && (pg->next ? pg->next->prev == pg : h->full.last == pg));
    validate_page(h, pg, true);
  }
  hm_assert(listed == pages);                            /* every page on one list */
  if (hm_tcache_on) validate_caches(h);
  /* the buffer of no heap takes no block: free's fast path finds no room in it */
  hm_assert(atomic_load_explicit(&h->out[RB_SLOTS], memory_order_relaxed) == RB_NONE &&
            !hm_rb_none.to && hm_rb_none.n == RB_BLOCKS && !hm_rb_none.next);
}

#endif
