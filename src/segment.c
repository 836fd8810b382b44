/* segment.c — segments and the slices they are cut into.
 *
 * A normal segment (SEG_SIZE, aligned) belongs to one heap and hands out runs
 * of 64 KiB slices as pages.  A huge segment holds a single block bigger than
 * LARGE_MAX (or a buffer realloc grew past GROW_HUGE) and belongs to no heap:
 * any thread may free it.  Freed slices stay
 * mapped but are purged (MADV_DONTNEED) once they have been free for their
 * decay's delay (decay.c); an empty segment goes at once to a small cache shared by
 * all threads (still resident, so the next thread to need a segment gets warm
 * memory) and is purged there after the delay, or back to the OS.
 * Segments of exited threads are abandoned and later reclaimed by a live
 * thread that allocates or frees into them. */
#include "internal.h"
#include "options.h"
#include "stats.h"

#include <string.h>

_Atomic uint64_t hm_segmap_lo;
_Atomic(uint8_t) hm_segmap[SEGMAP_SIZE];

/* Slice entries of free slices point here: its owner never matches a heap and
 * its area is empty, so free() of a pointer into a free slice is reported. */
page_t hm_page_invalid = { .flags = 0xff, .cls = 0xff };

static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static segment_t *abandoned;                 /* doubly linked via next/prev */
static _Atomic size_t abandoned_count;
static decay_t abandoned_decay;              /* (abandoned_lock) a segment reclaimed soon
                                                after its purge was purged too early (threads
                                                that come and go, each taking over what
                                                others left) */

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct { segment_t *first, *last; } segq_t;
/* Empty segments: resident ones, each with its purge deadline, and the
 * purged ones they move to at it (their deadlines set in order, so the
 * decay looks only at the oldest resident ones; a single list walked whole
 * at every discard ran HAKMEM_SEGMENT_CACHE=256 at a third of the default's
 * speed with 8 threads passing big blocks). */
static segq_t cache, cache_cold;
static segq_t *const caches[] = { &cache, &cache_cold };
static size_t cache_count;                   /* in both */
static _Atomic uint64_t cache_due;           /* the next purge or unmap due, 0: none (read unlocked) */
static decay_t cached_decay;                 /* (cache_lock) a segment taken back soon after
                                                its purge was purged too early */
/* Segments pushed out of the cache are retired: each waits one delay, still
 * mapped, and then goes at the purger's next decay with the others whose
 * delay has passed, in address order: a burst of frees empties whole reserve
 * batches, which are contiguous, so each run of adjacent segments goes with
 * one munmap, and the threads that freed do not wait for it.  A thread that
 * needs a segment takes the newest retired one before fresh address space,
 * so the list never makes the process map more than its peak need; what it
 * holds resident is what was freed within the last delay, as for free
 * slices.  (A bound on the list, whose older half went when it was reached,
 * made threads passing big blocks to each other, whose footprint swings by
 * gigabytes, unmap and map again some 1500 segments a run: mt_remote 8
 * threads, 256 KiB-1 MiB.)  Without the purger (HAKMEM_BACKGROUND=0, a forked
 * child), the threads' own slow paths unmap them once due, as they decay the
 * cache; a single-threaded program unmaps them at once, since it may never
 * call again (drop_with_neighbours).  The wait adapts as the purge delays
 * do: a fresh segment mapped soon after retired ones were unmapped doubles
 * it, an unmap not followed by one brings it back down. */
static segq_t retired;                       /* (cache_lock) */
static decay_t retired_decay;               /* (cache_lock) */
static uint64_t unmapped_ms;                 /* (cache_lock) when retired ones last went */
static bool remapped;                        /* (cache_lock) and a fresh one came soon after */
static uint64_t taken_back_ms;               /* (cache_lock) when a retired one was last reused */
/* Segments are mapped in batches, each with one mmap: address space only,
 * until a segment is used.  A batch is as many segments as the process has
 * had from batches so far, 1 to RESERVE_BATCH (64 MiB), so that what is
 * reserved ahead of need is never more than what was needed; when the
 * address space refuses it (ulimit -v), half as many, down to one. */
#define RESERVE_BATCH 16
static uint8_t *reserve;                     /* (cache_lock) the next unused segment */
static size_t reserve_left;
static size_t reserved;                      /* (cache_lock) segments mapped in batches */

/* Every mapped segment (normal or huge, in use or cached) is registered, so a
 * census (mallinfo2, the stats report) can walk them.  Unmapping and moving
 * take the registry lock: the census never reads a header that goes away. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static segment_t *registry;

static void registry_add(segment_t *s) {
  hm_assert(((uintptr_t)s & SEG_MASK) == 0 && s->size > 0);
  pthread_mutex_lock(&registry_lock);
  s->all_prev = NULL;
  s->all_next = registry;
  if (registry) registry->all_prev = s;
  registry = s;
  pthread_mutex_unlock(&registry_lock);
}
static void registry_remove(segment_t *s) {
  hm_assert(s->all_prev ? s->all_prev->all_next == s : registry == s);   /* registered */
  hm_assert(!s->all_next || s->all_next->all_prev == s);
  if (s->all_prev) s->all_prev->all_next = s->all_next; else registry = s->all_next;
  if (s->all_next) s->all_next->all_prev = s->all_prev;
}
static void segment_unmap(segment_t *s) {
  pthread_mutex_lock(&registry_lock);
  registry_remove(s);
  os_unmap(s, s->size);
  pthread_mutex_unlock(&registry_lock);
}

/* ---- the segment map (internal.h) ------------------------------------------
 * The window is placed when the first segment is registered, centred on the
 * start of os.c's region for aligned mappings (any segment's, aligned to
 * SEG_SIZE or more, may come first), or without one (hinting off) on that
 * segment; the far map's chunks are mapped as segments outside it are
 * registered.  Under map_lock; both are there for good. */
#define FAR_CHUNKS ((size_t)1 << (ADDR_BITS - SEG_SHIFT - SEGMAP_BITS))
static _Atomic(_Atomic(uint8_t) *) far_map[FAR_CHUNKS];
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static bool window_placed;                   /* (map_lock) */

_Atomic(uint8_t) *segmap_far(uintptr_t i) {
  if (i >> SEGMAP_BITS >= FAR_CHUNKS) return NULL;
  _Atomic(uint8_t) *chunk = atomic_load_explicit(&far_map[i >> SEGMAP_BITS], memory_order_acquire);
  return chunk ? &chunk[i & (SEGMAP_SIZE - 1)] : NULL;
}

/* The entry of segment s, made if it has none (a segment is registered);
 * NULL if the far chunk it needs cannot be mapped. */
static _Atomic(uint8_t) *segmap_make(segment_t *s) {
  uintptr_t i = (uintptr_t)s >> SEG_SHIFT;
  pthread_mutex_lock(&map_lock);
  if (!window_placed) {
    uintptr_t start = os_hint_start(), mid = start ? start >> SEG_SHIFT : i;
    atomic_store_explicit(&hm_segmap_lo, mid > SEGMAP_SIZE / 2 ? mid - SEGMAP_SIZE / 2 : 0, memory_order_relaxed);
    window_placed = true;
  }
  _Atomic(uint8_t) *e = segmap_entry(i);
  if (!e && i >> SEGMAP_BITS < FAR_CHUNKS) {
    _Atomic(uint8_t) *chunk = os_map(SEGMAP_SIZE);
    if (chunk) {
      atomic_store_explicit(&far_map[i >> SEGMAP_BITS], chunk, memory_order_release);
      e = &chunk[i & (SEGMAP_SIZE - 1)];
    }
  }
  pthread_mutex_unlock(&map_lock);
  return e;
}

/* Set the map entry of s, which has one (segmap_make). */
static void segmap_set(segment_t *s, uint8_t v) {
  hm_assert(((uintptr_t)s & SEG_MASK) == 0 && v <= SEGMAP_HUGE);
  atomic_store_explicit(segmap_entry((uintptr_t)s >> SEG_SHIFT), v, memory_order_release);
}
static uint8_t segmap_kind(const segment_t *s) {     /* (a split span's may have none) */
  _Atomic(uint8_t) *e = segmap_entry((uintptr_t)s >> SEG_SHIFT);
  return e ? atomic_load_explicit(e, memory_order_relaxed) : 0;
}

static void list_push(segment_t **head, segment_t *s) {
  s->prev = NULL;
  s->next = *head;
  if (*head) (*head)->prev = s;
  *head = s;
}
static void list_remove(segment_t **head, segment_t *s) {
  hm_assert(s->prev ? s->prev->next == s : *head == s);          /* s is on the list */
  hm_assert(!s->next || s->next->prev == s);
  if (s->prev) s->prev->next = s->next; else *head = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
}
/* A list that also knows its oldest (the segment caches and the retired
 * list: newest first, the oldest go first). */
static void segq_push(segq_t *q, segment_t *s) {
  list_push(&q->first, s);
  if (!q->last) q->last = s;
}
static void segq_remove(segq_t *q, segment_t *s) {
  hm_assert(q->first && q->last && !q->last->next && (q->last != s || !s->next));
  if (q->last == s) q->last = s->prev;
  list_remove(&q->first, s);
}

/* The lowest run of set bits of m (not 0): its first bit *i, length *n, mask. */
static uint64_t first_run(uint64_t m, unsigned *i, unsigned *n) {
  hm_assert(m != 0);
  *i = (unsigned)__builtin_ctzll(m);
  uint64_t rest = ~(m >> *i);                             /* zero bits: the run */
  *n = rest ? (unsigned)__builtin_ctzll(rest) : 64 - *i;
  return slice_run(*i, *n);
}

/* ---- a heap's index of free runs --------------------------------------------
 * A heap finds a segment with a free run of n slices without walking its
 * segments (a heap of big blocks may have hundreds, and the walk was most of
 * the time of a malloc there): each segment sits in two bins of its heap, by
 * its longest run of free slices (index 0) and by its longest run of free
 * slices that are still resident (index 1).  segment_index() after every
 * change to a heap segment's used or dirty slices. */
static unsigned longest_run(uint64_t m) {
  unsigned best = 0;
  while (m) {
    unsigned i, n;
    m &= ~first_run(m, &i, &n);
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
static void segment_index(segment_t *s) {
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

static void segment_unindex(heap_t *h, segment_t *s) {
  fit_unlink(h, s, 0);
  fit_unlink(h, s, 1);
}

/* The segment of h whose longest run (k: resident run) is the shortest that
 * holds n slices, or NULL. */
static segment_t *fit_find(heap_t *h, int k, size_t n) {
  uint64_t bins = h->fit_map[k] & (~0ull << n);
  hm_assert(n > 0 && n < SLICES && (!bins || h->fit[k][__builtin_ctzll(bins)]->fit_run[k] >= n));
  return bins ? h->fit[k][__builtin_ctzll(bins)] : NULL;
}

/* fresh: the memory comes straight from mmap and is already zero.  The
 * registry links stay as they are (a census may be following them), and so
 * do a reused segment's page descriptors: pages_map, cleared here, says none
 * is in use, and segment_page_alloc clears one when it hands it out
 * (clearing all 12 KiB at each reuse wrote every OS page of the header). */
static void segment_header_init(segment_t *s, size_t size, bool fresh) {
  if (!fresh) memset(&s->slice_page, 0, offsetof(segment_t, pages) - offsetof(segment_t, slice_page));
  for (size_t i = 0; i < SLICES; i++) s->slice_page[i] = &hm_page_invalid;
  s->used_slices = 1;   /* slice 0: this header */
  s->size = size;
}

static void schedule_purge(heap_t *h, segment_t *s, uint64_t now);

static segment_t *segment_new(heap_t *h) {
  segment_t *s = NULL;
  hm_assert(heap_held(h));
  bool fresh = false;
  pthread_mutex_lock(&cache_lock);
  if (cache.first || cache_cold.first) {
    segq_t *q = cache.first ? &cache : &cache_cold;
    s = q->first;
    segq_remove(q, s);
    cache_count--;
    if (s->purged_slices) decay_reused(&cached_decay, s->purged_ms, os_now_ms());
  } else if (retired.first) {
    /* one waiting to be unmapped: the threads need more segments than the
     * cache holds after all (a burst of big blocks freed by other threads) */
    s = retired.first;
    segq_remove(&retired, s);
    taken_back_ms = os_coarse_ms();
  } else {
    uint64_t now = os_now_ms();
    if (unmapped_ms && !remapped) {
      decay_reused(&retired_decay, unmapped_ms, now);
      remapped = true;
    }
    if (!reserve_left) {
      size_t n = reserved < RESERVE_BATCH ? (reserved ? reserved : 1) : RESERVE_BATCH;
      while (!(reserve = os_map_aligned(n * SEG_SIZE, SEG_SIZE)) && n > 1) n /= 2;
      reserve_left = reserve ? n : 0;
      reserved += reserve_left;
    }
    if (reserve_left && segmap_make((segment_t *)reserve)) {
      s = (segment_t *)reserve;
      reserve += SEG_SIZE;
      reserve_left--;
      fresh = true;
    }
  }
  pthread_mutex_unlock(&cache_lock);
  if (!s) return NULL;
  hm_assert(((uintptr_t)s & SEG_MASK) == 0 && !segmap_kind(s));
  uint64_t dirty = 0, guards = 0;
  if (fresh) {
    bool huge = hm_options.hugepages >= 2;
    if (huge) os_hugepage(s, SEG_SIZE);       /* (before the header's first write faults in its page) */
    s->huge_pages = huge;
    stat_inc(STAT_SEGMENTS);
  } else {
    dirty = s->dirty_slices;          /* resident: not zero, and to be purged if unused */
    guards = s->guard_slices;
  }
  segment_header_init(s, SEG_SIZE, fresh);
  if (fresh) registry_add(s);
  s->heap = h;
  list_push(&h->segments, s);
  segmap_set(s, SEGMAP_NORMAL);
  s->guard_slices = guards;
  if (dirty) {
    s->dirty_slices = dirty;
    schedule_purge(h, s, os_now_ms());
  }
  segment_index(s);
  hm_assert(s->heap == h && s->used_slices == 1 && s->pages_map == 0 && s->pages_used == 0);
  return s;
}

/* The slices of s that its decay leaves resident whatever their age: in a
 * segment in huge pages, each 2 MiB half that holds a page in use (the first
 * always: the header).  A purge inside a huge page splits it, and khugepaged
 * would fault the rest of it back in to make it whole again. */
static uint64_t huge_page_kept(const segment_t *s) {
  if (!s->huge_pages) return 0;
  uint64_t low = (1ull << (SLICES / 2)) - 1, kept = 0;
  if (s->used_slices & low) kept |= low;
  if (s->used_slices & ~low) kept |= ~low;
  return kept;
}

/* Purge the free slices in mask, coalescing runs into one madvise each. */
static void segment_purge(segment_t *s, uint64_t mask) {
  uint64_t d = mask & s->dirty_slices & ~s->used_slices;
  if (d) { s->purged_slices |= d; s->purged_ms = os_now_ms(); }
  while (d) {
    unsigned i, n;
    d &= ~first_run(d, &i, &n);
    os_purge((uint8_t *)s + (size_t)i * SLICE_SIZE, (size_t)n * SLICE_SIZE);
  }
  s->dirty_slices &= ~mask;
  s->aged_slices &= ~mask;
  hm_assert(!(s->purged_slices & s->used_slices));
  segment_index(s);
}

void segment_unlink(heap_t *h, segment_t *s) {
  hm_assert(heap_held(h) && s->heap == h);
  segment_unindex(h, s);
  list_remove(&h->segments, s);
}

/* (cache_lock held) Queue s for unmap_runs, newest first (segment_new takes
 * the newest back; a sorted insert here held the lock for the walk), to go
 * once it has waited the delay (purge_ms, unused while retired). */
static void retire(segment_t *s, uint64_t now) {
  hm_assert(!s->heap && !segmap_kind(s));
  s->purge_ms = decay_due(&retired_decay, now);
  segq_push(&retired, s);
}

/* (cache_lock held) The retired segments whose delay has passed at now (the
 * oldest, at the tail; all of them if force), taken off the list: for
 * unmap_runs after the lock.  While threads take retired ones back, those
 * retired since stay, for them; when none was taken back for a whole delay,
 * the rest goes too, in the same runs (a teardown's segments, retired a few
 * at a time, then go with a few munmap calls instead of one per pass:
 * rss_free's exiting threads made 49 against 10).  (Not "none since retired
 * ones were last due": their deadlines can be milliseconds apart, and
 * test_retired's loop, taking some back every 10 ms or so, once lost the
 * whole list under ASan and two CPU hogs.)  An unmap not followed by a
 * fresh segment (segment_new) brings the delay back down. */
static segment_t *take_retired(uint64_t now, bool force) {
  segment_t *list = NULL;
  if (retired.last && now >= retired.last->purge_ms && now >= decay_due(&retired_decay, taken_back_ms)) force = true;
  while (retired.last && (force || now >= retired.last->purge_ms)) {
    segment_t *s = retired.last;
    segq_remove(&retired, s);
    s->next = list;
    list = s;
  }
  if (list) {
    if (unmapped_ms && !remapped) decay_purged(&retired_decay);
    unmapped_ms = now;
    remapped = false;
  }
  return list;
}

/* A list of segments in ascending address order (merge sort). */
static segment_t *sort_by_address(segment_t *s) {
  if (!s || !s->next) return s;
  segment_t *slow = s, *fast = s->next;
  while (fast && fast->next) { slow = slow->next; fast = fast->next->next; }
  segment_t *b = sort_by_address(slow->next), *a = (slow->next = NULL, sort_by_address(s)), *head = NULL, **at = &head;
  while (a && b) {
    segment_t **low = (uintptr_t)a < (uintptr_t)b ? &a : &b;
    *at = *low;
    at = &(*low)->next;
    *low = (*low)->next;
  }
  *at = a ? a : b;
  return head;
}

/* Unmap a list of segments, one munmap per run of adjacent ones. */
static void unmap_runs(segment_t *s) {
  s = sort_by_address(s);
  while (s) {
    uint8_t *start = (uint8_t *)s, *end = start;
    pthread_mutex_lock(&registry_lock);
    while (s && (uint8_t *)s == end) {
      segment_t *next = s->next;
      hm_assert(!s->heap && !segmap_kind(s));
      end += s->size;
      registry_remove(s);
      stat_dec(STAT_SEGMENTS);
      s = next;
    }
    os_unmap(start, (size_t)(end - start));
    pthread_mutex_unlock(&registry_lock);
  }
}

/* The number of runs of adjacent segments in an ascending list. */
static size_t count_runs(const segment_t *s) {
  size_t runs = 0;
  for (const uint8_t *end = NULL; s; end = (const uint8_t *)s + s->size, s = s->next)
    if ((const uint8_t *)s != end) runs++;
  return runs;
}

/* (cache_lock held) Retired segments about to be unmapped (list u) take the
 * place in the cache of cached ones at higher addresses, when that unmaps
 * them with fewer munmap calls; an ascending list for unmap_runs.  A
 * teardown's segments empty in no order and the cache keeps the last few,
 * which then split the retired ones' runs (rss_free's exiting threads: 9
 * munmap calls where two would do).  Which ones the cache holds matters
 * little: all are empty, and those taken in are purged now, as their turn
 * to go has come.  (Caches of more than 64: left as they are.) */
static segment_t *cache_keep_lowest(segment_t *u) {
  struct { segment_t *s; segq_t *q; } c[64];
  size_t n = 0;
  if (!u || cache_count > sizeof c / sizeof c[0]) return u;
  for (size_t k = 0; k < sizeof caches / sizeof caches[0]; k++)
    for (segment_t *s = caches[k]->first; s; s = s->next) c[n].s = s, c[n++].q = caches[k];
  if (!n) return u;
  for (size_t i = 1; i < n; i++)                    /* ascending (n is small) */
    for (size_t j = i; j > 0 && (uintptr_t)c[j - 1].s > (uintptr_t)c[j].s; j--) {
      __typeof__(c[0]) x = c[j]; c[j] = c[j - 1]; c[j - 1] = x;
    }
  u = sort_by_address(u);
  /* t: the n-th lowest address of both; the cache would keep those up to t */
  const segment_t *a = u;
  uintptr_t t = 0;
  for (size_t i = 0, k = 0; k < n; k++) {
    if (i < n && (!a || (uintptr_t)c[i].s < (uintptr_t)a)) t = (uintptr_t)c[i++].s;
    else { t = (uintptr_t)a; a = a->next; }
  }
  /* the runs of the segments that would go: those of u above t, joined by
   * the cached ones between them */
  size_t runs = 0;
  const uint8_t *end = NULL;
  a = u;
  for (size_t i = 0; i < n || a;) {
    const segment_t *s;
    if (i < n && (!a || (uintptr_t)c[i].s < (uintptr_t)a)) s = c[i++].s;
    else { s = a; a = a->next; }
    if ((uintptr_t)s <= t) continue;
    if ((const uint8_t *)s != end) runs++;
    end = (const uint8_t *)s + s->size;
  }
  if (runs >= count_runs(u)) return u;
  segment_t *go = NULL, **at = &go;
  for (segment_t *s = u, *next; s; s = next) {    /* u's lowest into the cache */
    next = s->next;
    if ((uintptr_t)s > t) { *at = s; at = &s->next; continue; }
    segment_purge(s, ~0ull);
    segq_push(&cache_cold, s);
    cache_count++;
  }
  *at = NULL;
  for (size_t i = 0; i < n; i++) {                /* the cache's highest out */
    if ((uintptr_t)c[i].s <= t) continue;
    segq_remove(c[i].q, c[i].s);
    cache_count--;
    c[i].s->next = go;
    go = c[i].s;
  }
  return go;
}

/* (cache_lock held) Purge the cached segments whose delay has passed (all
 * of them if force); for the purger, hand over the retired ones once theirs
 * has (*unmap: for unmap_runs, after the lock).  The next deadline, or 0. */
static uint64_t cache_decay(uint64_t now, bool force, bool purger, segment_t **unmap) {
  if (force || purger || !purge_running()) *unmap = cache_keep_lowest(take_retired(now, force));
  for (segment_t *s; (s = cache.last) != NULL && (force || now >= s->purge_ms);) {
    segq_remove(&cache, s);
    if (s->dirty_slices) {
      segment_purge(s, ~0ull);
      if (!force) decay_purged(&cached_decay);
    }
    segq_push(&cache_cold, s);
  }
  uint64_t next = cache.last ? cache.last->purge_ms : 0;
  if (retired.last && (!next || retired.last->purge_ms < next)) next = retired.last->purge_ms;
  atomic_store_explicit(&cache_due, next, memory_order_relaxed);
  return next;
}

/* (cache_lock held) In a single-threaded program, a segment pushed out of
 * the cache is unmapped at once, and takes with it the cached segments next
 * to it in memory: a teardown that empties many segments (adjacent, from the
 * same reserve batches) then unmaps them a run at a time instead of one by
 * one, holding nothing back.  An ascending list for unmap_runs. */
static segment_t *drop_with_neighbours(segment_t *s) {
  s->next = NULL;
  segment_t *first = s, *last = s;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t k = 0; k < sizeof caches / sizeof caches[0] && !grew; k++) {
      segq_t *q = caches[k];
      for (segment_t *c = q->first; c; c = c->next) {
        if ((uint8_t *)c + c->size == (uint8_t *)first) {
          segq_remove(q, c);
          c->next = first;
          first = c;
        } else if ((uint8_t *)last + last->size == (uint8_t *)c) {
          segq_remove(q, c);
          last->next = c;
          last = c;
        } else {
          continue;
        }
        cache_count--;
        grew = true;
        break;
      }
    }
  }
  return first;
}

/* An empty segment, on no list any more, goes to the front of the cache as
 * it is (a thread about to need a segment gets resident memory), and is
 * purged there after the delay; the oldest beyond the cache's size is
 * unmapped. */
static void segment_discard(segment_t *s) {
  hm_assert(s->used_slices == 1 && s->pages_map == 0 && s->pages_used == 0 && s->size == SEG_SIZE);   /* empty */
  hm_assert(!atomic_load_explicit(&s->abandoned, memory_order_relaxed));
  segmap_set(s, 0);
  s->heap = NULL;
  uint64_t now = os_now_ms();
  segment_t *drop = s, *unmap = NULL;
  pthread_mutex_lock(&cache_lock);
  if (hm_options.segment_cache > 0) {
    s->purge_ms = decay_due(&cached_decay, now);
    segq_push(&cache, s);
    drop = NULL;
    if (++cache_count > (size_t)hm_options.segment_cache) {   /* the oldest goes, purged ones first */
      segq_t *q = cache_cold.last ? &cache_cold : &cache;
      drop = q->last;
      segq_remove(q, drop);
      cache_count--;
    }
  }
  /* (without the purger, unmapping at once made threads that pass big blocks
   * to each other map and fault in every segment again: 8 threads of
   * mt_remote, 256 KiB-1 MiB, ran at a quarter of the purger's speed) */
  if (drop && (purge_running() || multi_threaded())) {
    retire(drop, now);
    drop = NULL;
  }
  if (drop) drop = drop_with_neighbours(drop);
  uint64_t due = cache_decay(now, false, false, &unmap);
  pthread_mutex_unlock(&cache_lock);
  unmap_runs(drop);
  unmap_runs(unmap);
  if (due) purge_arm(due);
}

/* Purge the cached segments whose delay has passed at now, and unmap the
 * retired ones when due (purger: the purger's pass); next deadline. */
static uint64_t cache_decay_now(uint64_t now, bool purger) {
  segment_t *unmap = NULL;
  pthread_mutex_lock(&cache_lock);
  uint64_t next = cache_decay(now, false, purger, &unmap);
  pthread_mutex_unlock(&cache_lock);
  unmap_runs(unmap);
  return next;
}

/* The purger's pass over the segment cache. */
uint64_t segment_cache_decay(void) { return cache_decay_now(os_now_ms(), true); }

/* An empty segment leaves its heap. */
void segment_release_empty(heap_t *h, segment_t *s) {
  hm_assert(s->used_slices == 1);
  segment_unlink(h, s);
  segment_discard(s);
}

/* A thread exits without the purger: the segments waiting on the retired
 * list go now (no thread may call again to unmap them). */
void segment_retired_unmap(void) {
  pthread_mutex_lock(&cache_lock);
  segment_t *unmap = take_retired(os_now_ms(), true);
  pthread_mutex_unlock(&cache_lock);
  unmap_runs(unmap);
}

bool segment_cache_trim(void) {
  pthread_mutex_lock(&cache_lock);
  uint64_t now = os_now_ms();
  for (size_t k = 0; k < sizeof caches / sizeof caches[0]; k++) {
    for (segment_t *s; (s = caches[k]->first) != NULL;) {
      segq_remove(caches[k], s);
      retire(s, now);
    }
  }
  cache_count = 0;
  segment_t *unmap = take_retired(now, true);
  pthread_mutex_unlock(&cache_lock);
  unmap_runs(unmap);
  return unmap != NULL;
}

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
  segment_index(s);
  return pg;
}

/* Give a page's slices back to its segment (which stays with its heap). */
static void page_slices_free(segment_t *s, page_t *pg) {
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
  segment_index(s);
}

/* After slices were freed: schedule their purge.  An empty segment stays with
 * its heap until the decay has purged it (it may be reused before that), then
 * leaves unless it is the heap's only segment (segment_purge_due).  Returns
 * true if s was released. */
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
  segment_caches_tick(now);
  if ((now ? now : os_coarse_ms()) >= h->next_purge_ms) return segment_purge_due(h, PURGE_BUSY, s);
  return false;
}

void segment_page_free(page_t *pg) {
  segment_t *s = segment_of(pg);
  hm_assert(s->heap && atomic_load_explicit(&pg->heap, memory_order_relaxed) == s->heap);
  page_slices_free(s, pg);
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
    segment_index(s);
    segment_after_free(s->heap, s);
  } else {
    if (i + slices > SLICES) return false;
    uint64_t more = slice_run(i + n, slices - n);
    if (s->used_slices & more) return false;
    for (size_t k = n; k < slices; k++) s->slice_page[i + k] = pg;
    s->purged_slices &= ~more;
    s->used_slices |= more;
    s->dirty_slices &= ~more;
    s->aged_slices &= ~more;
    s->vacated_slices &= ~more;
    segment_index(s);
  }
  pg->slices = (uint8_t)slices;
  hm_assert(s->slice_page[i + slices - 1] == pg && (i + slices == SLICES || s->slice_page[i + slices] != pg));
  pg->block_size = (size_t)((uint8_t *)s + (i + slices) * SLICE_SIZE - pg->start);
  page_set_magic(pg, true);
  page_set_area(pg, pg->block_size);
  return true;
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
 * a segment that has fewer slices in use than at the last check: a program
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
    if (mode == PURGE_FORCE) segment_purge(s, ~0ull);
    else if (s->purge_ms && now >= s->purge_ms) {
      uint64_t purge = s->aged_slices & s->dirty_slices & ~huge_page_kept(s);
      unsigned used = (unsigned)__builtin_popcountll(s->used_slices);
      if (mode == PURGE_BUSY && used < s->checked_used) purge = 0;   /* draining */
      s->checked_used = used;
      for (uint64_t runs = purge; runs && keep;) {   /* whole runs stay aged, while the budget lasts */
        unsigned i, n;
        uint64_t run = first_run(runs, &i, &n);
        if (n <= keep) { keep -= n; purge &= ~run; }
        runs &= ~run;
      }
      if (purge) {
        decay_purged(&h->decay);
        segment_purge(s, purge);
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

/* ---- huge blocks -------------------------------------------------------- */

/* A huge block sits at offset off of its own mapping, the header at the
 * mapping's start: right after the header's pages (huge_header), at the
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
static size_t huge_header(void) { return (sizeof(segment_t) + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1); }
#define HUGE_ROOM ((size_t)256 << 10)
/* Freed huge blocks are kept for reuse (up to HUGE_CACHE_BYTES), their memory
 * resident for one purge delay, then purged; the oldest are unmapped first.
 * Without this, a program that repeatedly builds big buffers page-faults all
 * of them in again each time.  The old copy of a buffer that grew is purged
 * at its free (segment_huge_free) until such reuse is seen. */
#define HUGE_CACHE_BYTES ((size_t)hm_options.huge_cache_mb << 20)
static pthread_mutex_t huge_lock = PTHREAD_MUTEX_INITIALIZER;
static segment_t *huge_cache;          /* newest first */
static size_t huge_cache_bytes;
static decay_t huge_decay;             /* (huge_lock) */
static _Atomic uint64_t huge_due;      /* the next purge in the cache, 0: none (read unlocked) */
static _Atomic uint64_t huge_serial;   /* huge blocks handed out so far */
static _Atomic size_t huge_last;       /* the size of the latest */

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
      list_remove(&huge_cache, s);
      huge_cache_bytes -= s->size;
      s->next = drop;
      drop = s;
    } else if (s->purge_ms && now >= s->purge_ms) {
      os_purge((uint8_t *)s + huge_header(), s->size - huge_header());
      s->purge_ms = 0;
      s->purged_ms = now;
      if (now != UINT64_MAX) decay_purged(&huge_decay);
    } else if (s->purge_ms && (!due || s->purge_ms < due)) {
      due = s->purge_ms;
    }
  }
  atomic_store_explicit(&huge_due, due, memory_order_relaxed);
  return drop;
}

static void unmap_list(segment_t *s) {
  while (s) {
    segment_t *next = s->next;
    stat_dec(STAT_HUGE_CACHED);
    segment_unmap(s);
    s = next;
  }
}

/* (huge_lock) A span of the cache, its purge state set. */
static void huge_cache_put(segment_t *s) {
  list_push(&huge_cache, s);
  huge_cache_bytes += s->size;
  stat_inc(STAT_HUGE_CACHED);
}
static void huge_cache_remove(segment_t *s) {
  hm_assert(huge_cache_bytes >= s->size);
  list_remove(&huge_cache, s);
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
  pthread_mutex_lock(&registry_lock);
  registry_remove(b);
  pthread_mutex_unlock(&registry_lock);
  if (!a->purge_ms && !b->purge_ms) os_purge(b, huge_header());
  a->size += b->size;
  if (!a->purge_ms || (b->purge_ms && b->purge_ms > a->purge_ms)) a->purge_ms = b->purge_ms;
}

page_t *segment_huge_alloc(heap_t *h, size_t size, size_t align) {
  size_t a = align > OS_PAGE ? align : OS_PAGE;
  size_t first = align >= SEG_SIZE ? SEG_SIZE : (huge_header() + a - 1) & ~(a - 1), room = first;
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
  if (fresh && hm_options.hugepages) os_hugepage(s, total);
  secure_guard_set(s, total);
  segment_header_init(s, total, fresh);
  if (fresh) registry_add(s);
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

void segment_huge_free(segment_t *s) {
  hm_assert(s->pages[1].cls == CLASS_HUGE && s->slice_page[1] == &s->pages[1] && (!s->heap || s->heap->user));
  /* claim the block: of two racing frees, the second is reported */
  uint8_t expect = SEGMAP_HUGE;
  if (!atomic_compare_exchange_strong_explicit(segmap_entry((uintptr_t)s >> SEG_SHIFT), &expect, 0,
                                               memory_order_acq_rel, memory_order_relaxed))
    hm_fatal("double free", s->pages[1].start, &s->pages[1]);
  if (s->heap) userheap_huge_remove(s);
  hm_assert(!s->heap);                          /* (a first-class heap's list no longer has it) */
  stat_dec(STAT_HUGE);
  if (s->huge_offset || s->size > HUGE_CACHE_BYTES / 4 || hm_secure) { segment_unmap(s); return; }
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
    os_purge((uint8_t *)s + huge_header(), s->size - huge_header());
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
void *segment_huge_resize(segment_t *s, page_t *pg, size_t n) {
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
    pthread_mutex_lock(&registry_lock);
    segmap_set(s, 0);
    segment_t *ns = os_remap(s, s->size, total, dst);
    if (!ns) {
      os_unmap(dst, total);
      segmap_set(s, SEGMAP_HUGE);
      pthread_mutex_unlock(&registry_lock);
      return NULL;
    }
    /* the header moved with the pages: repoint the registry at it */
    if (ns->all_prev) ns->all_prev->all_next = ns; else registry = ns;
    if (ns->all_next) ns->all_next->all_prev = ns;
    s = ns;
    pg = &s->pages[1];
    for (size_t i = 0; i < SLICES; i++) s->slice_page[i] = pg;
    segmap_set(s, SEGMAP_HUGE);
    pthread_mutex_unlock(&registry_lock);
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
bool segment_huge_cache_purge(bool force, uint64_t *next) {
  pthread_mutex_lock(&huge_lock);
  segment_t *drop = huge_cache_decay(force ? UINT64_MAX : os_now_ms(), force ? 0 : HUGE_CACHE_BYTES);
  if (next) *next = atomic_load_explicit(&huge_due, memory_order_relaxed);
  pthread_mutex_unlock(&huge_lock);
  bool any = drop != NULL;
  unmap_list(drop);
  return any;
}

/* A program with no purger thread (one thread) decays the shared caches from
 * its slow paths as well: an empty segment or a huge block it freed would
 * otherwise stay resident until the next one is freed.  Two loads while
 * nothing is due; now: the time, or 0 to test the coarse clock and read the
 * time only if something is due (a clock read costs ~20 ns, and a program
 * that cycles pages frees one every few mallocs). */
void segment_caches_tick(uint64_t now) {
  uint64_t huge = atomic_load_explicit(&huge_due, memory_order_relaxed);
  uint64_t segs = atomic_load_explicit(&cache_due, memory_order_relaxed);
  if (!huge && !segs) return;
  uint64_t due = now ? now : os_coarse_ms();
  if (huge && due >= huge) segment_huge_cache_purge(false, NULL);
  if (segs && due >= segs && !purge_running()) cache_decay_now(now ? now : os_now_ms(), false);
}

/* ---- census ------------------------------------------------------------- */

/* A snapshot of every mapped segment: blocks in use per class, and how much
 * of the memory may be resident.  Other threads keep allocating while we read
 * their page descriptors, so the figures are approximate by a few blocks
 * (deliberately unsynchronised reads; the registry lock keeps every header
 * mapped).  Committed counts carved page memory, free slices not yet purged,
 * segment headers and unpurged huge mappings. */
__attribute__((no_sanitize("thread")))
void segment_census(census_t *c) {
  memset(c, 0, sizeof *c);
  size_t header = (sizeof(segment_t) + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1);
  pthread_mutex_lock(&registry_lock);
  for (segment_t *s = registry; s; s = s->all_next) {
    uint8_t kind = segmap_kind(s);
    c->mapped += s->size;
    if (s->pages[1].cls == CLASS_HUGE) {                    /* a huge mapping */
      if (kind) {
        c->cls[CLASS_HUGE].pages++;
        c->cls[CLASS_HUGE].used++;
        c->cls[CLASS_HUGE].capacity++;
        c->in_use += s->pages[1].block_size;
        c->huge_bytes += s->pages[1].block_size;
        c->huge_mapped += s->size;
        c->committed += s->size;
      } else {
        c->cached += s->size;
        c->committed += s->purge_ms ? s->size : header;
        c->purgeable += s->purge_ms ? s->size - huge_header() : 0;
      }
      continue;
    }
    c->segments++;
    c->committed += header;
    uint64_t dirty = (uint64_t)__builtin_popcountll(s->dirty_slices & ~s->used_slices) * SLICE_SIZE;
    c->committed += dirty;
    c->purgeable += dirty;
    if (!kind) { c->cached += s->size; continue; }          /* empty, in the cache */
    page_t *pg;
    for_each_page(s, pg) {
      c->cls[pg->cls].pages++;
      c->cls[pg->cls].used += page_used(pg);
      c->cls[pg->cls].capacity += pg->capacity;
      c->in_use += (uint64_t)page_used(pg) * pg->block_size;
      c->committed += (page_area(pg) + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1);
    }
  }
  pthread_mutex_unlock(&registry_lock);
  uint64_t cached[CLASSES] = { 0 };        /* in thread caches: free, though used on their pages */
  tcache_census(cached);
  for (size_t k = TC_MIN; k < TC_MIN + TC_CLASSES; k++) {
    uint64_t n = cached[k] < c->cls[k].used ? cached[k] : c->cls[k].used;
    c->cls[k].used -= n;
    c->in_use -= n * class_size(k);
    c->thread_cached += n * class_size(k);
  }
}

/* ---- abandonment --------------------------------------------------------- */

/* Called by an exiting heap for a segment that still holds live blocks.  Its
 * free slices are purged once they have been abandoned for the delay
 * (segment_tidy_abandoned); returns when, or 0 if it has none. */
uint64_t segment_abandon(segment_t *s) {
  page_t *pg;
  hm_assert(s->heap && heap_held(s->heap) && s->used_slices != 1);
  hm_assert(!atomic_load_explicit(&s->abandoned, memory_order_relaxed) && s->fit_run[0] == 0 && s->fit_run[1] == 0);
  for_each_page(s, pg) page_set_owner(pg, NULL);
  s->heap = NULL;
  pthread_mutex_lock(&abandoned_lock);
  uint64_t due = s->dirty_slices & ~s->used_slices ? decay_due(&abandoned_decay, os_now_ms()) : 0;
  s->purge_ms = due;
  list_push(&abandoned, s);
  atomic_store_explicit(&s->abandoned, 1, memory_order_release);
  atomic_fetch_add_explicit(&abandoned_count, 1, memory_order_relaxed);
  pthread_mutex_unlock(&abandoned_lock);       /* (s may be reclaimed from here on) */
  stat_inc(STAT_ABANDONED);
  return due;
}

/* Make s part of heap h: every page gets h as owner, collects its remote
 * frees, and goes to h's queues, or back to the segment when empty. */
/* Returns false when s turned out empty and was released. */
static bool segment_adopt(heap_t *h, segment_t *s) {
  hm_assert(heap_held(h) && !s->heap && !atomic_load_explicit(&s->abandoned, memory_order_relaxed));
  s->heap = h;
  list_push(&h->segments, s);
  segment_index(s);
  stat_inc(STAT_RECLAIMED);
  page_t *pg;
  for_each_page(s, pg) {
    page_set_flags(pg, hm_page_flags | (pg->flags & PAGE_SLOW));   /* (profile.c: a page holding samples) */
    page_set_owner(pg, h);
    page_collect(pg);
    if (page_used(pg) == 0 || !heap_adopt_page(h, pg)) page_slices_free(s, pg);
  }
  return !segment_after_free(h, s);
}

/* A first-class heap's segment goes to the thread's own heap (hakmem_heap_delete). */
void segment_give(heap_t *to, segment_t *s) { segment_adopt(to, s); }

/* A first-class heap destroyed: every page of s goes, in use or not, and s
 * with them (what other threads freed into them goes too). */
void segment_destroy(heap_t *h, segment_t *s) {
  page_t *pg;
  for_each_page(s, pg) page_slices_free(s, pg);
  segment_release_empty(h, s);
}

/* Take s off the abandoned list (abandoned_lock held). */
static void abandoned_take(segment_t *s) {
  hm_assert(atomic_load_explicit(&s->abandoned, memory_order_relaxed) && !s->heap);
  hm_assert(atomic_load_explicit(&abandoned_count, memory_order_relaxed) > 0);
  list_remove(&abandoned, s);
  atomic_store_explicit(&s->abandoned, 0, memory_order_relaxed);
  atomic_fetch_sub_explicit(&abandoned_count, 1, memory_order_relaxed);
}

/* (abandoned_lock held) s, taken off the list, goes back to work. */
static void abandoned_reclaim(segment_t *s) {
  abandoned_take(s);
  if (s->purged_slices) decay_reused(&abandoned_decay, s->purged_ms, os_now_ms());
  s->purge_ms = 0;                           /* the new owner schedules its own */
}

bool segment_try_reclaim(heap_t *h, segment_t *s) {
  hm_assert(heap_held(h));
  bool got = false;
  pthread_mutex_lock(&abandoned_lock);
  if (atomic_load_explicit(&s->abandoned, memory_order_relaxed)) {
    abandoned_reclaim(s);
    got = true;
  }
  pthread_mutex_unlock(&abandoned_lock);
  if (got) segment_adopt(h, s);
  return got;
}

segment_t *segment_reclaim_any(heap_t *h) {
  hm_assert(heap_held(h));
  if (!atomic_load_explicit(&abandoned_count, memory_order_relaxed)) return NULL;
  segment_t *s = NULL;
  pthread_mutex_lock(&abandoned_lock);
  if ((s = abandoned) != NULL) abandoned_reclaim(s);
  pthread_mutex_unlock(&abandoned_lock);
  if (!s) return NULL;
  return segment_adopt(h, s) ? s : segment_reclaim_any(h);
}

/* The purger (and malloc_trim) on the segments of exited threads: collect
 * the frees that reached them after their owner left (no thread owns their
 * pages, and none can adopt one while we hold the lock), give back the pages
 * and segments that are empty now, and purge free slices whose delay has
 * passed (all of them if force).  Returns the next deadline, 0 if none;
 * *left: how many segments stay abandoned. */
uint64_t segment_tidy_abandoned(bool force, size_t *left) {
  uint64_t now = os_now_ms(), next = 0;
  segment_t *empty = NULL;
  pthread_mutex_lock(&abandoned_lock);
  for (segment_t *s = abandoned, *snext; s; s = snext) {
    snext = s->next;
    hm_assert(!s->heap && atomic_load_explicit(&s->abandoned, memory_order_relaxed));
    page_t *pg;
    for_each_page(s, pg) {
      page_collect(pg);
      if (page_used(pg) == 0) page_slices_free(s, pg);
    }
    if (s->used_slices == 1) {
      abandoned_take(s);
      s->next = empty;
      empty = s;
      continue;
    }
    if (!(s->dirty_slices & ~s->used_slices)) continue;
    if (!s->purge_ms) s->purge_ms = decay_due(&abandoned_decay, now);
    if (force || now >= s->purge_ms) {
      segment_purge(s, ~0ull);
      s->purge_ms = 0;
      if (!force) decay_purged(&abandoned_decay);
    }
    else if (!next || s->purge_ms < next) next = s->purge_ms;
  }
  *left = atomic_load_explicit(&abandoned_count, memory_order_relaxed);
  pthread_mutex_unlock(&abandoned_lock);
  while (empty) {
    segment_t *s = empty;
    empty = s->next;
    segment_discard(s);
  }
  return next;
}

/* fork: hold the global locks across fork so the child never inherits them
 * mid-update; the child starts with fresh, unlocked mutexes. */
void segment_fork_prepare(void) {
  pthread_mutex_lock(&registry_lock);
  pthread_mutex_lock(&abandoned_lock);
  pthread_mutex_lock(&cache_lock);
  pthread_mutex_lock(&huge_lock);
  pthread_mutex_lock(&map_lock);
}
void segment_fork_parent(void) {
  pthread_mutex_unlock(&map_lock);
  pthread_mutex_unlock(&huge_lock);
  pthread_mutex_unlock(&cache_lock);
  pthread_mutex_unlock(&abandoned_lock);
  pthread_mutex_unlock(&registry_lock);
}
void segment_fork_child(void) { segment_fork_parent(); }   /* the forking thread holds them */
