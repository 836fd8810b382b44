/* huge.c — huge blocks: a block bigger than LARGE_MAX (or a buffer realloc
 * grew past GROW_HUGE) on a mapping of its own, a huge segment, which belongs
 * to no heap: any thread may free it.  Freed ones are kept mapped for reuse
 * (the huge cache), purged after their delay (decay.c).  A first-class
 * heap's huge blocks are listed (h->huge) for its destruction to find. */
#include "internal.h"
#include "options.h"
#include "stats.h"

#include <string.h>

/* A huge block sits at offset off of its own mapping, the header at the
 * mapping's start: right after the header's pages (SEG_HEADER_SIZE), at the
 * alignment asked for, so that under an address-space limit (ulimit -v
 * counts every page) a mapping costs its block and a few pages, as glibc's
 * do.  Otherwise the mapping has HUGE_ROOM bytes besides the block, and the
 * block starts at a random page among them (untouched address space): where
 * huge blocks lie is then as random as where the others do (6 more bits),
 * and the usable size is the mapping's size less the room, whatever the
 * draw.  (Not in the hardened mode, whose guard page follows the block.)
 * For alignments below SEG_SIZE the block stays inside the first SEG_SIZE
 * chunk, so the usual mask finds the header.  Bigger alignments put the
 * block exactly one chunk above the header (huge_offset), a case only the
 * slow paths (hm_lookup) need to know.  What is purged of a huge mapping is
 * all but its header. */
#define HUGE_ROOM ((size_t)256 << 10)
/* Freed huge blocks are kept for reuse (up to HUGE_CACHE_BYTES), their memory
 * resident for one purge delay, then purged; the oldest are unmapped first.
 * Without this, a program that repeatedly builds big buffers page-faults all
 * of them in again each time.  The old copy of a buffer that grew is purged
 * at its free (huge_free) until such reuse is seen. */
#define HUGE_CACHE_BYTES ((size_t)hm_options.huge_cache_mb << 20)
static pthread_mutex_t huge_lock = PTHREAD_MUTEX_INITIALIZER;
static segment_t *huge_cache;          /* newest first */
static size_t huge_cache_bytes;
static decay_t huge_decay;             /* (huge_lock) */
_Atomic uint64_t hm_huge_due;          /* the next purge in the cache, 0: none (read unlocked) */
static _Atomic uint64_t huge_serial;   /* huge blocks handed out so far */
static _Atomic size_t huge_last;       /* the size of the latest */
static void huge_list_remove(segment_t *s);

/* ---- transparent huge pages for huge blocks (HAKMEM_HUGEPAGES=1) ----------
 * In transparent huge pages a block the program fills takes one page fault
 * per 2 MiB instead of per 4 KiB; but every 2 MiB stretch it touches at all
 * costs a whole huge page, zeroed: a program that touches a few bytes of
 * each big buffer would pay hundreds of times the memory and the time.  So
 * huge blocks ask for them while the program is seen to fill its big blocks.
 * A clean block (no page of it resident) whose first stretch (the header's)
 * has no advice is a probe: at its free, that stretch's part of the block is
 * dense if at least half of its pages are resident.  The score moves toward
 * dense or sparse by one per probe, within +-THP_SCORE; the rest of a block
 * asks for huge pages while it is positive, and all of it once it is at the
 * top but for one clean block in THP_PROBE (an advised stretch reads as
 * full).  At the bottom one probe in THP_SAMPLE is measured (mincore, about
 * 1 us).  HAKMEM_HUGEPAGES=2 advises every huge block whole, 0 none. */
#define THP_SCORE  2
#define THP_PROBE  16
#define THP_SAMPLE 8
typedef struct {
  _Atomic int score;                   /* > 0: huge blocks ask for huge pages */
  _Atomic unsigned clean;              /* clean blocks handed out at the top */
  _Atomic unsigned probes;             /* probes freed at the bottom */
} thp_t;
static thp_t thp = { .score = 1 };    /* (so the first blocks are probes, the rest of them advised) */

/* The advice a huge block should have (clean: nothing of it resident). */
static uint8_t thp_wanted(bool clean) {
  long mode = atomic_load_explicit(&hm_options.hugepages, memory_order_relaxed);
  if (mode != 1) return mode >= 2 ? ADVICE_ALL : ADVICE_NONE;
  int score = atomic_load_explicit(&thp.score, memory_order_relaxed);
  if (score <= 0) return ADVICE_NONE;
  if (score < THP_SCORE || (clean && atomic_fetch_add_explicit(&thp.clean, 1, memory_order_relaxed) % THP_PROBE == 0))
    return ADVICE_BUT_FIRST;
  return ADVICE_ALL;
}

/* The bytes from s to the end of the huge page's stretch it starts in. */
static size_t thp_first(const segment_t *s) {
  size_t h = os_hugepage_size();
  return h - ((uintptr_t)s & (h - 1));
}

/* Move span s (size bytes) from advice had to a: its first stretch and the
 * rest as each needs.  (It reads nothing of s: a fresh mapping is advised
 * before the header's first write faults in its page.) */
static void thp_set(segment_t *s, size_t size, uint8_t had, uint8_t a) {
  size_t first = thp_first(s);
  if (size <= first) {                         /* (pages of 16 or 64 KiB: huge pages of 32 or 512 MiB) */
    if ((had == ADVICE_ALL) != (a == ADVICE_ALL)) os_hugepage(s, size, a == ADVICE_ALL);
    return;
  }
  bool had_first = had == ADVICE_ALL, had_rest = had != ADVICE_NONE;
  bool want_first = a == ADVICE_ALL, want_rest = a != ADVICE_NONE;
  if (had_first != want_first && had_rest != want_rest) os_hugepage(s, size, want_rest);
  else if (had_first != want_first) os_hugepage(s, first, want_first);
  else if (had_rest != want_rest) os_hugepage((uint8_t *)s + first, size - first, want_rest);
}

/* s, a probe's segment, is freed: how densely was its first stretch used? */
static void thp_measure(segment_t *s) {
  int score = atomic_load_explicit(&thp.score, memory_order_relaxed);
  if (score == -THP_SCORE && atomic_fetch_add_explicit(&thp.probes, 1, memory_order_relaxed) % THP_SAMPLE != 0)
    return;
  uint8_t *start = s->pages[1].start, *end = (uint8_t *)s + thp_first(s);
  if (end > start + s->pages[1].block_size) end = start + s->pages[1].block_size;
  size_t pages;
  if (start >= end || !os_resident(start, (size_t)(end - start), &pages)) return;
  bool dense = pages * 2 * OS_PAGE >= (size_t)(end - start);
  /* (a racing update may be lost: the score is a tendency) */
  if (dense ? score < THP_SCORE : score > -THP_SCORE)
    atomic_store_explicit(&thp.score, score + (dense ? 1 : -1), memory_order_relaxed);
}

/* Purge entries past their delay; unmap the oldest beyond the byte budget.
 * Called with huge_lock held; returns the list of segments to unmap. */
static segment_t *huge_cache_decay(uint64_t now, size_t budget) {
  segment_t *drop = NULL, *next;
  size_t bytes = 0;
  uint64_t due = 0;
  for (segment_t *s = huge_cache; s; s = next) {
    next = s->next;
    bytes += s->size;
    if (bytes > budget) {
      seglist_remove(&huge_cache, s);
      huge_cache_bytes -= s->size;
      s->next = drop;
      drop = s;
    } else if (s->purge_ms && now >= s->purge_ms) {
      os_purge((uint8_t *)s + SEG_HEADER_SIZE, s->size - SEG_HEADER_SIZE);
      s->purge_ms = 0;
      s->purged_ms = now;
      if (now != UINT64_MAX) decay_purged(&huge_decay);
    } else if (s->purge_ms && (!due || s->purge_ms < due)) {
      due = s->purge_ms;
    }
  }
  atomic_store_explicit(&hm_huge_due, due, memory_order_relaxed);
  return drop;
}

static void unmap_list(segment_t *s) {
  while (s) {
    segment_t *next = s->next;
    stat_dec(STAT_HUGE_CACHED);
    registry_unmap(s);
    s = next;
  }
}

/* (huge_lock) A span of the cache, its purge state set. */
static void huge_cache_put(segment_t *s) {
  seglist_push(&huge_cache, s);
  huge_cache_bytes += s->size;
  stat_inc(STAT_HUGE_CACHED);
}
static void huge_cache_remove(segment_t *s) {
  hm_assert(huge_cache_bytes >= s->size);
  seglist_remove(&huge_cache, s);
  huge_cache_bytes -= s->size;
  stat_dec(STAT_HUGE_CACHED);
}

/* The smallest cached huge mapping of at least total bytes, or NULL.  One
 * bigger by a segment or more is split at a segment's boundary, the rest
 * staying cached: a freed block serves smaller ones too, resident, as a run
 * of slices does in a segment (a program that churns big buffers of many
 * sizes would otherwise map and fault in each anew). */
static segment_t *huge_cache_take(size_t total) {
  segment_t *best = NULL;
  pthread_mutex_lock(&huge_lock);
  for (segment_t *s = huge_cache; s; s = s->next)
    if (s->size >= total && (!best || s->size < best->size)) best = s;
  if (best) {
    huge_cache_remove(best);
    if (!best->purge_ms) decay_reused(&huge_decay, best->purged_ms, os_now_ms());
  }
  pthread_mutex_unlock(&huge_lock);
  if (!best) return NULL;
  size_t keep = (total + SEG_MASK) & ~SEG_MASK;
  if (best->size >= keep + SEG_SIZE) {
    segment_t *rest = (segment_t *)((uint8_t *)best + keep);
    hm_assert(((uintptr_t)rest & SEG_MASK) == 0 && keep >= total);
    rest->size = best->size - keep;
    rest->purge_ms = best->purge_ms;
    rest->purged_ms = best->purged_ms;
    rest->advice = best->advice == ADVICE_NONE ? ADVICE_NONE : ADVICE_ALL;   /* (best's rest) */
    rest->pages[1].cls = CLASS_HUGE;           /* (the census: a cached huge mapping) */
    best->size = keep;
    registry_add(rest);
    pthread_mutex_lock(&huge_lock);
    huge_cache_put(rest);
    pthread_mutex_unlock(&huge_lock);
  }
  return best;
}

/* (huge_lock) Take the cached spans right before and after s (adjacent in
 * the address space: they came from one mapping, or from the hint region's
 * consecutive ones) out of the cache; *before, *after, or NULL. */
static void huge_cache_neighbours(segment_t *s, segment_t **before, segment_t **after) {
  *before = *after = NULL;
  for (segment_t *c = huge_cache; c; c = c->next) {
    if ((uint8_t *)c + c->size == (uint8_t *)s) *before = c;
    else if ((uint8_t *)s + s->size == (uint8_t *)c) *after = c;
  }
  if (*before) huge_cache_remove(*before);
  if (*after) huge_cache_remove(*after);
}

/* Span a (cached, or being freed) absorbs b, which follows it: one span,
 * purged only if both were (a purge pending on either stays pending); b's
 * header, now inside a's block area, is purged with them (a purged span
 * reads as zero: calloc counts on it). */
static void huge_merge(segment_t *a, segment_t *b) {
  hm_assert((uint8_t *)a + a->size == (uint8_t *)b);   /* adjacent */
  if (a->advice != b->advice || a->advice == ADVICE_BUT_FIRST) {   /* one advice for the span */
    uint8_t want = thp_wanted(false);
    os_hugepage(a, a->size + b->size, want == ADVICE_ALL);
    a->advice = want == ADVICE_ALL ? ADVICE_ALL : ADVICE_NONE;
  }
  registry_remove(b);
  if (!a->purge_ms && !b->purge_ms) os_purge(b, SEG_HEADER_SIZE);
  a->size += b->size;
  if (!a->purge_ms || (b->purge_ms && b->purge_ms > a->purge_ms)) a->purge_ms = b->purge_ms;
}

page_t *huge_alloc(heap_t *h, size_t size, size_t align) {
  size_t a = align > OS_PAGE ? align : OS_PAGE;
  size_t first = align >= SEG_SIZE ? SEG_SIZE : (SEG_HEADER_SIZE + a - 1) & ~(a - 1), room = first;
  if (align < SEG_SIZE && first < HUGE_ROOM && !hm_secure && !os_space_limited()) room = HUGE_ROOM;
  size_t off = first + heap_rand(h) % ((room - first) / a + 1) * a;
  size_t usable = (size + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1);
  if (usable < size || usable > SIZE_MAX - room - align - OS_PAGE) return NULL;
  size_t total = room + usable + secure_guard();
  segment_t *s;
  bool zero = true, fresh = true;
  if (align <= SLICE_SIZE && !hm_secure && (s = huge_cache_take(total)) != NULL) {
    zero = s->purge_ms == 0;           /* purged memory reads as zero */
    fresh = false;
    total = s->size;
    usable = total - room;
  } else if (align < SEG_SIZE) {
    s = os_map_aligned(total, SEG_SIZE);
  } else {
    uint8_t *raw = os_map(total + align);
    if (!raw) return NULL;
    uint8_t *blk = (uint8_t *)(((uintptr_t)raw + SEG_SIZE + align - 1) & ~(uintptr_t)(align - 1));
    s = (segment_t *)(blk - SEG_SIZE);
    if ((uint8_t *)s > raw) os_unmap(raw, (size_t)((uint8_t *)s - raw));
    size_t tail = (size_t)(raw + total + align - ((uint8_t *)s + total));
    if (tail) os_unmap((uint8_t *)s + total, tail);
  }
  if (!s) return NULL;
  if (!segmap_make(s)) {                     /* (a split span's may be new too) */
    if (fresh) {
      os_unmap(s, total);
    } else {
      pthread_mutex_lock(&huge_lock);
      huge_cache_put(s);
      pthread_mutex_unlock(&huge_lock);
    }
    return NULL;
  }
  uint8_t advice = thp_wanted(zero);
  thp_set(s, total, fresh ? ADVICE_NONE : s->advice, advice);
  secure_guard_set(s, total);
  slices_init(s, total, fresh);
  if (fresh) registry_add(s);
  s->advice = advice;
  s->huge_probe = zero && advice != ADVICE_ALL;
  s->huge_offset = align >= SEG_SIZE ? SEG_SIZE : 0;
  s->huge_serial = atomic_fetch_add_explicit(&huge_serial, 1, memory_order_relaxed) + 1;
  atomic_store_explicit(&huge_last, usable, memory_order_relaxed);
  s->used_slices = ~0ull;
  page_t *pg = &s->pages[1];
  if (!fresh) memset(pg, 0, sizeof *pg);     /* (a split span's header was a block's bytes) */
  pg->slice = pg->slices = 1;
  pg->cls = CLASS_HUGE;
  pg->is_zero = zero;
  pg->start = (uint8_t *)s + off;
  pg->block_size = usable;
  page_set_magic(pg, true);
  page_set_area(pg, usable);
  pg->reserved = pg->capacity = 1;
  page_set_used(pg, 1);
  for (size_t i = 0; i < SLICES; i++) s->slice_page[i] = pg;   /* (the block may start in slice 0) */
  hm_assert(((uintptr_t)s & SEG_MASK) == 0 && pg->start + usable <= (uint8_t *)s + s->size);
  hm_assert(align <= 1 || ((uintptr_t)pg->start & (align - 1)) == 0);
  stat_inc(STAT_HUGE);
  segmap_set(s, SEGMAP_HUGE);
  return pg;
}

void huge_free(segment_t *s) {
  hm_assert(s->pages[1].cls == CLASS_HUGE && s->slice_page[1] == &s->pages[1] && (!s->heap || s->heap->user));
  /* claim the block: of two racing frees, the second is reported */
  uint8_t expect = SEGMAP_HUGE;
  if (!atomic_compare_exchange_strong_explicit(segmap_entry((uintptr_t)s >> SEG_SHIFT), &expect, 0,
                                               memory_order_acq_rel, memory_order_relaxed))
    hm_fatal("double free", s->pages[1].start, &s->pages[1]);
  if (s->heap) huge_list_remove(s);
  hm_assert(!s->heap);                          /* (a first-class heap's list no longer has it) */
  stat_dec(STAT_HUGE);
  if (s->huge_probe) thp_measure(s);
  if (s->huge_offset || s->size > HUGE_CACHE_BYTES / 4 || hm_secure) { registry_unmap(s); return; }
  uint64_t now = os_now_ms();
  /* The old copy of a growing buffer (a bigger block was handed out since
   * this one: a vector or hash table that doubled, and frees the old copy
   * once it has moved) is purged now unless copies were seen reused: kept
   * resident for the delay, it would count in the program's peak next to
   * the new copy, and the program is past its size. */
  size_t bs = s->pages[1].block_size;
  bool superseded = atomic_load_explicit(&huge_serial, memory_order_relaxed) > s->huge_serial &&
                    atomic_load_explicit(&huge_last, memory_order_relaxed) >= bs + bs / 2;
  pthread_mutex_lock(&huge_lock);
  superseded &= decay_at_base(&huge_decay);
  pthread_mutex_unlock(&huge_lock);
  if (superseded) {
    os_purge((uint8_t *)s + SEG_HEADER_SIZE, s->size - SEG_HEADER_SIZE);
    s->purged_ms = now;
  }
  s->purge_ms = superseded ? 0 : decay_due(&huge_decay, now);
  /* with its cached neighbours, one span again */
  segment_t *before, *after;
  pthread_mutex_lock(&huge_lock);
  huge_cache_neighbours(s, &before, &after);
  pthread_mutex_unlock(&huge_lock);
  if (after) huge_merge(s, after);
  if (before) {
    huge_merge(before, s);
    s = before;
  }
  pthread_mutex_lock(&huge_lock);
  huge_cache_put(s);
  segment_t *drop = huge_cache_decay(now, HUGE_CACHE_BYTES);
  uint64_t due = s->purge_ms;
  pthread_mutex_unlock(&huge_lock);
  unmap_list(drop);
  if (due) purge_arm(due);
}

/* Grow or shrink a huge block with mremap.  The block must stay in the first
 * chunk of a SEG_SIZE-aligned mapping, so a move goes to a freshly reserved
 * aligned range (MREMAP_FIXED): the pages move, nothing is copied. */
void *huge_resize(segment_t *s, page_t *pg, size_t n) {
  if (hm_secure) return NULL;                 /* (its guard page would have to move) */
  if (s->heap) return NULL;                   /* (a first-class heap lists it where it is) */
  hm_assert(pg == &s->pages[1] && pg->cls == CLASS_HUGE && !s->huge_offset);
  size_t off = (size_t)(pg->start - (uint8_t *)s);
  /* Growth reserves half as much again of address space (untouched, so it costs no
   * memory) so that a buffer grown step by step remaps rarely. */
  if (n > pg->block_size && n - pg->block_size < pg->block_size / 2 && pg->block_size / 2 <= ALLOC_MAX - n)
    n = pg->block_size + pg->block_size / 2;
  size_t usable = (n + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1);
  size_t total = off + usable;
  if (usable == pg->block_size) return pg->start;
  if (usable < pg->block_size) {
    os_resize_in_place(s, s->size, total);                 /* shrinking never fails */
  } else if (!os_resize_in_place(s, s->size, total)) {
    void *dst = os_map_aligned(total, SEG_SIZE);
    if (!dst) return NULL;
    if (!segmap_make(dst)) {
      os_unmap(dst, total);
      return NULL;
    }
    if (!(s = registry_remap_huge(s, total, dst))) return NULL;
    pg = &s->pages[1];
  }
  s->size = total;
  pg->start = (uint8_t *)s + off;
  pg->block_size = usable;
  page_set_magic(pg, true);
  page_set_area(pg, usable);
  return pg->start;
}

/* Purge the cached huge blocks whose delay passed (force: unmap them all).
 * Returns whether anything was unmapped; *next (if given) gets the next
 * deadline, 0 if none. */
bool huge_cache_purge(bool force, uint64_t *next) {
  pthread_mutex_lock(&huge_lock);
  segment_t *drop = huge_cache_decay(force ? UINT64_MAX : os_now_ms(), force ? 0 : HUGE_CACHE_BYTES);
  if (next) *next = atomic_load_explicit(&hm_huge_due, memory_order_relaxed);
  pthread_mutex_unlock(&huge_lock);
  bool any = drop != NULL;
  unmap_list(drop);
  return any;
}

/* ---- a first-class heap's huge blocks ----------------------------------------
 * Listed on the heap (h->huge, under h->huge_lock): the thread that made the
 * heap adds them, any thread's free takes one off. */

/* s, the segment of a huge block h just handed out, joins h's list. */
void huge_list_add(heap_t *h, segment_t *s) {
  spin_lock(&h->huge_lock);
  s->heap = h;
  seglist_push(&h->huge, s);
  spin_unlock(&h->huge_lock);
}

/* s's huge block is being freed (any thread; the free has claimed it). */
static void huge_list_remove(segment_t *s) {
  heap_t *h = s->heap;
  spin_lock(&h->huge_lock);
  seglist_remove(&h->huge, s);
  s->heap = NULL;
  spin_unlock(&h->huge_lock);
}

/* h is deleted: its huge blocks become plain ones. */
void huge_list_drop(heap_t *h) {
  spin_lock(&h->huge_lock);
  for (segment_t *s = h->huge; s; s = s->next) s->heap = NULL;
  h->huge = NULL;
  spin_unlock(&h->huge_lock);
}

/* h is destroyed: its huge blocks are freed. */
void huge_list_free(heap_t *h) {
  spin_lock(&h->huge_lock);
  segment_t *huge = h->huge;
  h->huge = NULL;
  spin_unlock(&h->huge_lock);
  for (segment_t *s = huge, *next; s; s = next) {
    next = s->next;
    s->heap = NULL;
    huge_free(s);
  }
}

/* fork: the lock is held across it (thread.c's fork handlers). */
void huge_fork_prepare(void) { pthread_mutex_lock(&huge_lock); }
void huge_fork_parent(void) { pthread_mutex_unlock(&huge_lock); }
