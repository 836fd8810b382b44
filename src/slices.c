/* slices.c — a segment's slices: its header, its runs of free slices and
 * their purge, and the index by which its heap finds a free run.
 *
 * A segment's bitmaps (segment.h) say which slices belong to a page
 * (used_slices), which free ones may still be resident (dirty_slices), and
 * which of those were already free at the last purge check (aged_slices).
 * Every change to a heap segment's used or dirty slices rebins it
 * (slices_index). */
#include "internal.h"

#include <string.h>

/* Slice entries of free slices point here: its owner never matches a heap and
 * its area is empty, so free() of a pointer into a free slice is reported. */
page_t hm_page_invalid = { .flags = 0xff, .cls = 0xff };

/* fresh: the memory comes straight from mmap and is already zero.  The
 * registry links stay as they are (a census may be following them), and so
 * do a reused segment's page descriptors: pages_map, cleared here, says none
 * is in use, and segment_page_alloc clears one when it hands it out
 * (clearing all 12 KiB at each reuse wrote every OS page of the header). */
void slices_init(segment_t *s, size_t size, bool fresh) {
  if (!fresh) memset(&s->slice_page, 0, offsetof(segment_t, pages) - offsetof(segment_t, slice_page));
  for (size_t i = 0; i < SLICES; i++) s->slice_page[i] = &hm_page_invalid;
  s->used_slices = 1;   /* slice 0: this header */
  s->size = size;
}

/* ---- a heap's index of free runs --------------------------------------------
 * A heap finds a segment with a free run of n slices without walking its
 * segments (a heap of big blocks may have hundreds, and the walk was most of
 * the time of a malloc there): each segment sits in two bins of its heap, by
 * its longest run of free slices (index 0) and by its longest run of free
 * slices that are still resident (index 1).  segment.c's fit_find reads the
 * bins. */
static unsigned longest_run(uint64_t m) {
  unsigned best = 0;
  while (m) {
    unsigned i, n;
    m &= ~slice_first_run(m, &i, &n);
    if (n > best) best = n;
  }
  return best;
}

static void fit_unlink(heap_t *h, segment_t *s, int k) {
  unsigned r = s->fit_run[k];
  if (!r) return;
  hm_assert(r < SLICES && (h->fit_map[k] >> r & 1) && (s->fit_prev[k] ? s->fit_prev[k]->fit_next[k] == s : h->fit[k][r] == s));
  if (s->fit_prev[k]) s->fit_prev[k]->fit_next[k] = s->fit_next[k];
  else if (!(h->fit[k][r] = s->fit_next[k])) h->fit_map[k] &= ~(1ull << r);
  if (s->fit_next[k]) s->fit_next[k]->fit_prev[k] = s->fit_prev[k];
  s->fit_run[k] = 0;
}

static void fit_link(heap_t *h, segment_t *s, int k, unsigned r) {
  hm_assert(r < SLICES && s->heap == h);
  s->fit_run[k] = (uint8_t)r;
  if (!r) return;
  s->fit_prev[k] = NULL;
  s->fit_next[k] = h->fit[k][r];
  if (s->fit_next[k]) s->fit_next[k]->fit_prev[k] = s;
  h->fit[k][r] = s;
  h->fit_map[k] |= 1ull << r;
}

/* s (of heap s->heap, if any) changed: rebin it. */
void slices_index(segment_t *s) {
  heap_t *h = s->heap;
  if (!h) return;
  hm_assert((s->used_slices & 1) && !(s->dirty_slices & s->used_slices) && !(s->aged_slices & ~s->dirty_slices));
  hm_assert(!(s->vacated_slices & s->used_slices));
  uint64_t free = ~s->used_slices, resident = free & s->dirty_slices;
  unsigned r[2] = { longest_run(free), 0 };
  r[1] = resident == free ? r[0] : longest_run(resident);   /* (mostly one or the other) */
  for (int k = 0; k < 2; k++)
    if (r[k] != s->fit_run[k]) {
      fit_unlink(h, s, k);
      fit_link(h, s, k, r[k]);
    }
}

/* s leaves h's bins. */
void slices_unindex(heap_t *h, segment_t *s) {
  fit_unlink(h, s, 0);
  fit_unlink(h, s, 1);
}

/* ---- free runs ------------------------------------------------------------ */

/* Half `half` of s, in huge pages, asks for 4 KiB pages from now on. */
void slices_half_small(segment_t *s, unsigned half) {
  hm_assert(s->advice == ADVICE_ALL && !(s->small_halves & (1u << half)));
  os_hugepage((uint8_t *)s + half * (SEG_SIZE / 2), SEG_SIZE / 2, false);
  s->small_halves |= (uint8_t)(1u << half);
}

/* Purge the free slices in mask, coalescing runs into one madvise each, and
 * note them purged for the decay (decay_reused, as they are taken again)
 * unless the purge was forced (malloc_trim, hakmem_collect): memory the
 * program had given back says nothing about the delay.  In
 * a segment in huge pages, a half that is still one page was resident whole:
 * its clean free slices in mask go too, and if it keeps a page in use (or the
 * header), it asks for 4 KiB pages first, or khugepaged would make it whole
 * again (an empty cached segment's header, 2 MiB).  A run from slice 1 takes
 * the header slice's tail with it (secure mode keeps its bitmaps there). */
void slices_purge(segment_t *s, uint64_t mask, bool forced) {
  uint64_t d = mask & s->dirty_slices & ~s->used_slices;
  for (unsigned half = 0; s->advice == ADVICE_ALL && half < 2; half++) {
    uint64_t m = half_slices(half);
    if (!(d & m) || (s->small_halves & (1u << half))) continue;
    d |= m & mask & ~s->used_slices;
    if (s->used_slices & m) slices_half_small(s, half);
  }
  if (d && !forced) { s->purged_slices |= d; s->purged_ms = os_now_ms(); }
  size_t header = s->advice == ADVICE_ALL && !hm_secure ? SEG_HEADER_SIZE : SLICE_SIZE;
  while (d) {
    unsigned i, n;
    d &= ~slice_first_run(d, &i, &n);
    size_t from = i == 1 ? header : (size_t)i * SLICE_SIZE;
    os_purge((uint8_t *)s + from, (size_t)(i + n) * SLICE_SIZE - from);
  }
  s->dirty_slices &= ~mask;
  s->aged_slices &= ~mask;
  hm_assert(!(s->purged_slices & s->used_slices));
  slices_index(s);
}

/* Give a page's slices back to its segment (which stays with its heap, if
 * any). */
void slices_free(segment_t *s, page_t *pg) {
  size_t i = pg->slice, n = pg->slices;
  uint64_t mask = slice_run(i, n);
  hm_assert(n > 0 && (s->used_slices & mask) == mask && s->slice_page[i] == pg && s->slice_page[i + n - 1] == pg);
  hm_assert((s->pages_map >> (pg - s->pages) & 1) && s->pages_used > 0);
  for (size_t k = 0; k < n; k++) s->slice_page[i + k] = &hm_page_invalid;
  pg->slices = 0;
  s->pages_map &= ~(1ull << (pg - s->pages));
  page_set_owner(pg, NULL);
  s->used_slices &= ~mask;
  s->dirty_slices |= mask;
  if (pg->cls == CLASS_LARGE) s->vacated_slices |= 1ull << i;
  s->pages_used--;
  slices_index(s);
}
