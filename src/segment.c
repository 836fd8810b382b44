/* segment.c — a heap's segments: runs of slices handed out as pages and
 * large blocks, given back, resized, and the decay of the free ones.
 *
 * A normal segment (SEG_SIZE, aligned) belongs to one heap and hands out runs
 * of 64 KiB slices as pages.  Freed slices stay mapped but are purged
 * (MADV_DONTNEED) once they have been free for their decay's delay (decay.c);
 * an empty segment goes to the shared cache (segcache.c).  A heap finds its
 * runs through the index of its segments by their free runs (slices.c); with
 * none, it reclaims an abandoned segment (abandon.c) before it takes a new
 * one. */
#include "internal.h"
#include "options.h"
#include "stats.h"

#include <string.h>

/* The segment of h whose longest run (k: resident run) is the shortest that
 * holds n slices, or NULL. */
static segment_t *fit_find(heap_t *h, int k, size_t n) {
  uint64_t bins = h->fit_map[k] & (~0ull << n);
  hm_assert(n > 0 && n < SLICES && (!bins || h->fit[k][__builtin_ctzll(bins)]->fit_run[k] >= n));
  return bins ? h->fit[k][__builtin_ctzll(bins)] : NULL;
}

static void schedule_purge(heap_t *h, segment_t *s, uint64_t now);
static segment_t *segment_reclaim_any(heap_t *h);

/* Transparent huge pages for segments, decided for each 2 MiB half when it
 * is first touched: a fresh segment's lower half as its header is written,
 * the upper one when a page or a large block first takes a slice of it
 * (segment_touch).  At HAKMEM_HUGEPAGES=1 a half asks for them when its heap
 * already has SEG_HUGE_MIN resident in 4 KiB pages and fills at least half
 * of what its blocks take there: a fault then brings 2 MiB at once, far
 * cheaper per byte than 4 KiB faults.  A small heap keeps 4 KiB pages (a
 * thread that allocates a few blocks would hold 2 MiB), and so does a heap
 * that touches little of its blocks (a whole 2 MiB page for a line written).
 * The measure: mincore over the pages in use in the halves outside huge
 * pages of up to SEG_HUGE_PROBES of the heap's segments, a large block's
 * whole run and a size class's page as far as it is carved (page_extend
 * carves a page as it is used: the rest comes in with its blocks); a heap
 * with halves in huge pages was dense and big enough when it took them, and
 * is taken to stay so while what it has in 4 KiB pages is dense. */
#define SEG_HUGE_PROBES 4
static bool heap_wants_huge(heap_t *h) {
  if (hm_options.hugepages != 1) return hm_options.hugepages >= 2;
  size_t pages = 0, resident = 0;
  bool advised = false;
  int probes = 0;
  for (segment_t *s = h->segments; s && probes < SEG_HUGE_PROBES; s = s->next) {
    uint64_t small = (s->small_halves & 1 ? half_slices(0) : 0) | (s->small_halves & 2 ? half_slices(1) : 0);
    advised |= small != ~0ull;
    if (!(s->used_slices & small & ~1ull)) continue;   /* (not the header's slice) */
    probes++;
    page_t *pg;
    for_each_page(s, pg) {
      if (!(slice_run(pg->slice, pg->slices) & small)) continue;
      size_t bytes = pg->cls < CLASSES ? (size_t)(pg->start - page_run(pg)) + page_area(pg)
                                       : (size_t)pg->slices * SLICE_SIZE, in;
      bytes = (bytes + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1);
      if (!bytes || !os_resident(page_run(pg), bytes, &in)) continue;
      pages += bytes / OS_PAGE;
      resident += in;
    }
  }
  return resident * 2 >= pages && (advised || resident >= SEG_HUGE_MIN / OS_PAGE);
}

/* Slices mask of s are handed out: the first in its untouched upper half
 * decides whether that half asks for huge pages. */
static void segment_touch(heap_t *h, segment_t *s, uint64_t mask) {
  if (!s->upper_untouched || !(mask & half_slices(1))) return;
  hm_assert(s->small_halves & 2);
  s->upper_untouched = false;
  if (!heap_wants_huge(h)) return;
  os_hugepage((uint8_t *)s + SEG_SIZE / 2, SEG_SIZE / 2, true);
  s->advice = ADVICE_ALL;
  s->small_halves &= 1;
}

/* A segment from the cache (segcache.c) joins h. */
static segment_t *segment_new(heap_t *h) {
  hm_assert(heap_held(h));
  bool fresh = false;
  segment_t *s = segcache_take(&fresh);
  if (!s) return NULL;
  uint64_t dirty = 0, guards = 0;
  if (fresh) {
    bool huge = heap_wants_huge(h);
    if (huge) os_hugepage(s, SEG_SIZE / 2, true);   /* (before the header's first write faults in its page) */
    s->advice = huge ? ADVICE_ALL : ADVICE_NONE;
    s->small_halves = huge ? 2 : 3;
    s->upper_untouched = true;
    stat_inc(STAT_SEGMENTS);
  } else {
    dirty = s->dirty_slices;          /* resident: not zero, and to be purged if unused */
    guards = s->guard_slices;
  }
  slices_init(s, SEG_SIZE, fresh);
  if (fresh) registry_add(s);
  s->heap = h;
  seglist_push(&h->segments, s);
  segmap_set(s, SEGMAP_NORMAL);
  s->guard_slices = guards;
  if (dirty) {
    s->dirty_slices = dirty;
    schedule_purge(h, s, os_now_ms());
  }
  slices_index(s);
  hm_assert(s->heap == h && s->used_slices == 1 && s->pages_map == 0 && s->pages_used == 0);
  return s;
}

void segment_unlink(heap_t *h, segment_t *s) {
  hm_assert(heap_held(h) && s->heap == h);
  slices_unindex(h, s);
  seglist_remove(&h->segments, s);
}

/* An empty segment leaves its heap. */
void segment_release_empty(heap_t *h, segment_t *s) {
  hm_assert(s->used_slices == 1);
  segment_unlink(h, s);
  segcache_put(s);
}

/* ---- runs of slices for pages and large blocks --------------------------- */

/* The runs of n free slices in a segment: bit j is set when slices
 * j..j+n-1 are all free. */
static uint64_t runs_of(uint64_t used, size_t n) {
  uint64_t free = ~used, r = free;
  for (size_t i = 1; i < n && r; i++) r &= free >> i;
  if (n > 1) r &= (n >= 64) ? 0 : ~0ull >> (n - 1);   /* the run must fit below slice 64 */
  return r;
}

/* The run of n free slices a page gets: the first at or above its
 * segment's origin, else the first from slice 1; with vacated, the first
 * such run holding none of its slices if there is one.  A heap's first
 * segment has a random origin, a multiple of the length of the page it was
 * taken for (from slice 1): where a heap's first blocks lie within it is
 * random too (6 bits for pages of one slice), and pages of one length pack
 * it as tightly as from slice 1 on.  Its later segments start at slice 1
 * (an origin in each would split the runs that buffers grown by realloc
 * move into), as does a segment taken for a buffer realloc moves to grow
 * (first-fit from slice 1: the slices after it stay free for it to grow
 * into). */
static int find_run_from(uint64_t used, uint64_t vacated, size_t n, unsigned origin) {
  hm_assert(n > 0 && origin >= 1 && origin < SLICES);
  uint64_t r = vacated ? runs_of(used | vacated, n) : 0;
  if (!r) r = runs_of(used, n);
  uint64_t above = r & ~slice_run(0, origin);
  return above ? __builtin_ctzll(above) : r ? __builtin_ctzll(r) : -1;
}

page_t *segment_page_alloc(heap_t *h, size_t n, uint8_t cls, bool tight) {
  segment_t *s = NULL;
  hm_assert(heap_held(h) && n > 0 && n < SLICES && (cls < CLASSES || cls == CLASS_LARGE));
  int i = -1;
  /* Reuse still-resident slices first (k = 1): no page faults, nothing to
   * purge.  A tight request goes to the segment with the least room that
   * holds it (best fit: long runs stay whole for later, and lightly used
   * segments empty and go back, without being emptied and refaulted over
   * and over).  The others, pages of the size
   * classes and buffers that realloc moves to grow, to the heap's newest
   * segment with room, as the heap's last runs went: a growing buffer then
   * finds free slices after it more often (best fit for its moves scatters
   * them). */
  bool grows = cls == CLASS_LARGE && !tight;
  int k = 1;
  segment_t *fit = fit_find(h, k, n);
  if (!fit) fit = fit_find(h, k = 0, n);
  if (fit) {
    if (tight) s = fit;
    else for (s = h->segments; s->fit_run[k] < n; s = s->next) {}   /* (one is there: the bins hold h's) */
    /* A page of a size class leaves out the slices where freed large
     * blocks started while other resident ones fit (vacated_slices): such a
     * pointer, freed again, then still points at no block and is reported,
     * rather than freeing the first block of a page made there since.  (A
     * large block may start there: skipping the slice would split the free
     * run; another allocator would hand out the same address too.) */
    i = find_run_from(k ? s->used_slices | ~s->dirty_slices : s->used_slices,
                      k && cls != CLASS_LARGE ? s->vacated_slices : 0, n, grows ? 1 : s->origin);
  }
  if (!s) {
    /* Reclaim a dead thread's segment before mapping a new one. */
    while ((s = segment_reclaim_any(h)) != NULL)
      if ((i = find_run_from(s->used_slices, 0, n, grows ? 1 : s->origin)) >= 0) break;
  }
  if (!s) {
    bool first = !h->segments;
    if (!(s = segment_new(h))) return NULL;
    s->origin = grows || !first ? 1 : (uint8_t)(1 + n * (heap_rand(h) % ((SLICES - 1) / n)));
    i = s->origin;
  }
  uint64_t mask = slice_run(i, n);
  hm_assert(s->heap == h && i > 0 && (size_t)i + n <= SLICES && !(s->used_slices & mask));
  segment_touch(h, s, mask);
  int d = __builtin_ctzll(~s->pages_map);     /* (at most 63 pages: one is free) */
  page_t *pg = &s->pages[d];
  memset(pg, 0, sizeof *pg);
  s->pages_map |= 1ull << d;
  pg->slice = (uint8_t)i;
  pg->slices = (uint8_t)n;
  pg->cls = cls;
  pg->is_zero = !(s->dirty_slices & mask);
  for (size_t k = 0; k < n; k++) s->slice_page[i + k] = pg;
  if (s->purged_slices & mask) {
    decay_reused(&h->decay, s->purged_ms, os_now_ms());
    s->purged_slices &= ~mask;
  }
  s->used_slices |= mask;
  s->dirty_slices &= ~mask;
  s->aged_slices &= ~mask;
  s->vacated_slices &= ~mask;
  s->pages_used++;
  hm_assert(s->pages_used == (uint32_t)__builtin_popcountll(s->pages_map));
  slices_index(s);
  return pg;
}

/* After slices were freed: schedule their purge.  An empty segment stays with
 * its heap until the decay has purged it (it may be reused before that), then
 * leaves unless it is the heap's only segment (segment_purge_due). */
static void schedule_purge(heap_t *h, segment_t *s, uint64_t now) {
  hm_assert(s->heap == h && (s->purge_ms || now));
  if (!s->purge_ms) {
    s->purge_ms = decay_due(&h->decay, now);
    purge_arm(s->purge_ms);          /* in case this thread goes quiet before then */
  }
  if (!h->next_purge_ms || s->purge_ms < h->next_purge_ms) h->next_purge_ms = s->purge_ms;
}

/* A segment that became empty leaves at once (to the shared cache) unless it
 * is its heap's only one. */
static bool segment_after_free(heap_t *h, segment_t *s) {
  hm_assert(heap_held(h) && s->heap == h);
  if (s->used_slices == 1 && (h->segments != s || s->next)) {
    segment_release_empty(h, s);
    return true;
  }
  uint64_t now = s->purge_ms ? 0 : os_now_ms();   /* (only a new deadline needs the time) */
  schedule_purge(h, s, now);
  segcache_tick(now);
  if ((now ? now : os_coarse_ms()) >= h->next_purge_ms) return segment_purge_due(h, PURGE_BUSY, s);
  return false;
}

void segment_page_free(page_t *pg) {
  segment_t *s = segment_of(pg);
  hm_assert(s->heap && atomic_load_explicit(&pg->heap, memory_order_relaxed) == s->heap);
  slices_free(s, pg);
  segment_after_free(s->heap, s);
}

/* Resize a large block's run of slices in place: shrink always works, growth
 * when the slices after the run are free.  Owner thread only. */
bool segment_large_resize(page_t *pg, size_t slices) {
  if (hm_secure) return false;                /* (its guard page would have to move) */
  segment_t *s = segment_of(pg);
  size_t i = pg->slice, n = pg->slices;
  hm_assert(pg->cls == CLASS_LARGE && slices > 0 && s->heap && heap_held(s->heap));
  if (slices == n) return true;
  if (slices < n) {
    uint64_t tail = slice_run(i + slices, n - slices);
    for (size_t k = slices; k < n; k++) s->slice_page[i + k] = &hm_page_invalid;
    s->used_slices &= ~tail;
    s->dirty_slices |= tail;
    slices_index(s);
    segment_after_free(s->heap, s);
  } else {
    if (i + slices > SLICES) return false;
    uint64_t more = slice_run(i + n, slices - n);
    if (s->used_slices & more) return false;
    segment_touch(s->heap, s, more);
    for (size_t k = n; k < slices; k++) s->slice_page[i + k] = pg;
    s->purged_slices &= ~more;
    s->used_slices |= more;
    s->dirty_slices &= ~more;
    s->aged_slices &= ~more;
    s->vacated_slices &= ~more;
    slices_index(s);
  }
  pg->slices = (uint8_t)slices;
  hm_assert(s->slice_page[i + slices - 1] == pg && (i + slices == SLICES || s->slice_page[i + slices] != pg));
  pg->block_size = (size_t)((uint8_t *)s + (i + slices) * SLICE_SIZE - pg->start);
  page_set_magic(pg, true);
  page_set_area(pg, pg->block_size);
  return true;
}

/* ---- the decay of free slices -------------------------------------------- */

/* The decay of a segment in huge pages works on its 2 MiB halves: while its
 * advice stands, a half is one page, resident whole once touched, clean free
 * slices too.  A purge inside it splits it, and khugepaged would fault the
 * rest back in to make it whole again, so a half either goes whole or leaves
 * huge pages first (half_to_small, the bit in small_halves):
 *  - a half with no page in use goes whole, once every free slice of it that
 *    was used has aged (malloc_trim: at once);
 *  - a half with pages in use stays whole while its owner is busy and no more
 *    than half of it is aged free; past that, or once its heap is quiet or
 *    trimmed and any of it is free, it asks for 4 KiB pages and decays as any
 *    segment.
 * Returns the slices to keep resident whatever their age. */
static void half_to_small(segment_t *s, unsigned half);
static uint64_t huge_halves(segment_t *s, enum purge_mode mode) {
  if (s->advice != ADVICE_ALL) return 0;
  uint64_t kept = 0, dirty_before = s->dirty_slices;
  for (unsigned half = 0; half < 2; half++) {
    uint64_t m = half_slices(half);
    if (s->small_halves & (1u << half)) continue;
    if (!(s->used_slices & m)) {
      uint64_t dirty = s->dirty_slices & m;
      if ((dirty & ~s->aged_slices) && mode != PURGE_FORCE) kept |= m;
      else if (dirty) { s->dirty_slices |= m; s->aged_slices |= m; }
      continue;
    }
    uint64_t free = (mode == PURGE_BUSY ? s->aged_slices & s->dirty_slices : ~s->used_slices) & m;
    if (!free || (mode == PURGE_BUSY && __builtin_popcountll(free) <= SLICES / 4)) kept |= m;
    else half_to_small(s, half);
  }
  if (s->dirty_slices != dirty_before) slices_index(s);   /* (its runs of resident slices grew) */
  return kept;
}

/* Half `half` of s (with pages in use) leaves its huge page for 4 KiB pages.
 * Its clean free slices came in with it: they go at once, and on each page of
 * a size class so does the part past the blocks carved so far (the owner
 * carves under its lock, which the caller holds). */
static void half_to_small(segment_t *s, unsigned half) {
  uint8_t *lo = (uint8_t *)s + half * (SEG_SIZE / 2), *hi = lo + SEG_SIZE / 2;
  uint64_t m = half_slices(half), clean = m & ~s->used_slices & ~s->dirty_slices;
  hm_assert(heap_held(s->heap) && s->advice == ADVICE_ALL && (s->used_slices & m));
  slices_half_small(s, half);
  s->dirty_slices |= clean;
  s->aged_slices |= clean;
  page_t *pg;
  for_each_page(s, pg) {
    if (pg->cls >= CLASSES) continue;
    uint8_t *from = (uint8_t *)(((uintptr_t)pg->start + page_area(pg) + OS_PAGE - 1) & ~(uintptr_t)(OS_PAGE - 1));
    uint8_t *to = page_run(pg) + (size_t)pg->slices * SLICE_SIZE;
    if (from < lo) from = lo;
    if (to > hi) to = hi;
    if (from < to) os_purge(from, (size_t)(to - from));
  }
}

/* A heap whose thread is busy (the check runs on its own slow path) keeps
 * aged slices resident, whole runs, up to half the slices it uses, at most
 * BUSY_KEEP_MAX (1 MiB): a program cycling through a few pages' worth of
 * memory would otherwise purge and refault them over and over (one madvise
 * each time; with an eighth, a heap of 2-4 MiB whose pages other threads'
 * frees empty purged a page's run 5-12 times a run of remote50-t2).
 * They go at the next idle check (the purger's, or the thread's exit) or on
 * malloc_trim. */
#define BUSY_KEEP_MAX 16
static unsigned busy_keep(heap_t *h) {
  unsigned used = 0;
  for (segment_t *s = h->segments; s; s = s->next) used += (unsigned)__builtin_popcountll(s->used_slices) - 1;
  return used / 2 < BUSY_KEEP_MAX ? used / 2 : BUSY_KEEP_MAX;
}

/* Decay in two epochs: at each check, purge the slices that were already free
 * at the previous check (free for at least one delay), and age the rest.
 * A busy heap also waits, one more check, before purging the aged slices of
 * a segment that has fewer slices in use than at the last check (or taking
 * its halves out of huge pages, huge_halves): a program
 * freeing a big structure empties pages in random order, and the free runs
 * between live ones would go one madvise each, just before the whole
 * segment empties and goes in one (python3 freeing a dict of 100k records:
 * 70 madvise calls, or ~350 when the checks fell inside the frees). */
bool segment_purge_due(heap_t *h, enum purge_mode mode, segment_t *watch) {
  uint64_t now = os_now_ms(), next = 0;
  bool watched_released = false;
  hm_assert(heap_held(h));
  unsigned keep = mode == PURGE_BUSY ? busy_keep(h) : 0;
  for (segment_t *s = h->segments, *snext; s; s = snext) {
    snext = s->next;
    hm_assert(s->heap == h);
    if (s->used_slices == 1 && (h->segments != s || s->next)) {
      watched_released |= s == watch;       /* empty: leave the heap */
      segment_release_empty(h, s);
      continue;
    }
    bool huge = s->advice == ADVICE_ALL && s->small_halves != 3;   /* a half still whole (a quiet heap's split now) */
    if (mode == PURGE_FORCE) {
      huge_halves(s, mode);
      slices_purge(s, ~0ull, true);
    } else if ((s->purge_ms && now >= s->purge_ms) || (mode == PURGE_IDLE && huge)) {
      unsigned used = (unsigned)__builtin_popcountll(s->used_slices);
      bool draining = mode == PURGE_BUSY && used < s->checked_used;
      s->checked_used = used;
      uint64_t purge = draining ? 0 : s->aged_slices & s->dirty_slices & ~huge_halves(s, mode);
      for (uint64_t runs = purge; runs && keep;) {   /* whole runs stay aged, while the budget lasts */
        unsigned i, n;
        uint64_t run = slice_first_run(runs, &i, &n);
        if (n <= keep) { keep -= n; purge &= ~run; }
        runs &= ~run;
      }
      if (purge) {
        decay_purged(&h->decay);
        slices_purge(s, purge, false);
      }
    }
    else { if (s->purge_ms && (!next || s->purge_ms < next)) next = s->purge_ms; continue; }
    s->aged_slices = s->dirty_slices;
    s->purge_ms = s->dirty_slices ? decay_due(&h->decay, now) : 0;
    if (s->purge_ms && (!next || s->purge_ms < next)) next = s->purge_ms;
  }
  hm_assert(!next || next >= now);   /* (the due ones were purged or rescheduled) */
  h->next_purge_ms = next;
  return watched_released;
}

/* h's thread left it (heap_park): the delay its reuse pattern grew goes with
 * it, and no segment waits longer than the base delay for its purge. */
void segment_purge_reset_delay(heap_t *h) {
  hm_assert(heap_held(h));
  decay_reset(&h->decay);
  uint64_t by = decay_due(&h->decay, os_now_ms());
  for (segment_t *s = h->segments; s; s = s->next)
    if (s->purge_ms > by) s->purge_ms = by;
  if (h->next_purge_ms > by) h->next_purge_ms = by;
}

/* ---- reclaiming abandoned segments --------------------------------------- */

/* Make s part of heap h: every page gets h as owner, collects its remote
 * frees, and goes to h's queues, or back to the segment when empty. */
/* Returns false when s turned out empty and was released. */
static bool segment_adopt(heap_t *h, segment_t *s) {
  hm_assert(heap_held(h) && !s->heap && !atomic_load_explicit(&s->abandoned, memory_order_relaxed));
  s->heap = h;
  seglist_push(&h->segments, s);
  slices_index(s);
  stat_inc(STAT_RECLAIMED);
  page_t *pg;
  for_each_page(s, pg) {
    page_set_flags(pg, page_start_flags(h, pg->cls) | (pg->flags & PAGE_SLOW));   /* (profile.c: a page holding samples) */
    page_set_owner(pg, h);
    page_collect(pg);
    if (page_used(pg) == 0 || !heap_adopt_page(h, pg)) slices_free(s, pg);
  }
  return !segment_after_free(h, s);
}

/* A first-class heap's segment goes to the thread's own heap (hakmem_heap_delete). */
void segment_give(heap_t *to, segment_t *s) { segment_adopt(to, s); }

/* A first-class heap destroyed: every page of s goes, in use or not, and s
 * with them (what other threads freed into them goes too). */
void segment_destroy(heap_t *h, segment_t *s) {
  page_t *pg;
  for_each_page(s, pg) slices_free(s, pg);
  segment_release_empty(h, s);
}

/* A first-class heap adopts none: its destroy frees every page it has, in
 * use or not, and an abandoned segment holds the program's live blocks. */
bool segment_try_reclaim(heap_t *h, segment_t *s) {
  hm_assert(heap_held(h));
  if (atomic_load_explicit(&h->user, memory_order_relaxed)) return false;
  bool got = abandon_take(s);
  if (got) segment_adopt(h, s);
  return got;
}

static segment_t *segment_reclaim_any(heap_t *h) {
  hm_assert(heap_held(h));
  if (atomic_load_explicit(&h->user, memory_order_relaxed)) return NULL;   /* (as segment_try_reclaim) */
  segment_t *s = abandon_take_any();
  if (!s) return NULL;
  return segment_adopt(h, s) ? s : segment_reclaim_any(h);
}
