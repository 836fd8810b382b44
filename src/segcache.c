/* segcache.c — empty segments between heaps: the cache shared by all
 * threads, the retired list waiting to be unmapped, and the reserve that
 * fresh segments come from.
 *
 * An empty segment goes at once to the front of the cache, still resident
 * (a thread about to need a segment gets warm memory), and is purged there
 * after its delay (decay.c); the oldest beyond the cache's size is retired,
 * and unmapped after one more delay. */
#include "internal.h"
#include "options.h"
#include "stats.h"

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

/* A list that also knows its oldest (the segment caches and the retired
 * list: newest first, the oldest go first). */
static void segq_push(segq_t *q, segment_t *s) {
  seglist_push(&q->first, s);
  if (!q->last) q->last = s;
}
static void segq_remove(segq_t *q, segment_t *s) {
  hm_assert(q->first && q->last && !q->last->next && (q->last != s || !s->next));
  if (q->last == s) q->last = s->prev;
  seglist_remove(&q->first, s);
}

/* An empty segment for a heap (segment.c): the newest cached one, else the
 * newest retired one, else the next of the reserve (*fresh: zero, and not
 * registered yet); NULL when the OS gives no more. */
segment_t *segcache_take(bool *fresh) {
  segment_t *s = NULL;
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
      *fresh = true;
    }
  }
  pthread_mutex_unlock(&cache_lock);
  if (!s) return NULL;
  hm_assert(((uintptr_t)s & SEG_MASK) == 0 && !segmap_kind(s));
  return s;
}

/* (cache_lock held) Queue s for unmap_runs, newest first (segcache_take takes
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
 * fresh segment (segcache_take) brings the delay back down. */
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
  while (s) s = registry_unmap_run(s);
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
    slices_purge(s, ~0ull, false);
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
      slices_purge(s, ~0ull, force);
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
void segcache_put(segment_t *s) {
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
uint64_t segcache_decay(void) { return cache_decay_now(os_now_ms(), true); }

/* A thread exits without the purger: the segments waiting on the retired
 * list go now (no thread may call again to unmap them). */
void segcache_retired_unmap(void) {
  pthread_mutex_lock(&cache_lock);
  segment_t *unmap = take_retired(os_now_ms(), true);
  pthread_mutex_unlock(&cache_lock);
  unmap_runs(unmap);
}

/* malloc_trim: every cached segment goes, with the retired ones; true if
 * any was unmapped. */
bool segcache_trim(void) {
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

/* A program with no purger thread (one thread) decays the shared caches from
 * its slow paths as well: an empty segment or a huge block it freed would
 * otherwise stay resident until the next one is freed.  Two loads while
 * nothing is due; now: the time, or 0 to test the coarse clock and read the
 * time only if something is due (a clock read costs ~20 ns, and a program
 * that cycles pages frees one every few mallocs). */
void segcache_tick(uint64_t now) {
  uint64_t huge = atomic_load_explicit(&hm_huge_due, memory_order_relaxed);
  uint64_t segs = atomic_load_explicit(&cache_due, memory_order_relaxed);
  if (!huge && !segs) return;
  uint64_t due = now ? now : os_coarse_ms();
  if (huge && due >= huge) huge_cache_purge(false, NULL);
  if (segs && due >= segs && !purge_running()) cache_decay_now(now ? now : os_now_ms(), false);
}

/* fork: the lock is held across it (thread.c's fork handlers). */
void segcache_fork_prepare(void) { pthread_mutex_lock(&cache_lock); }
void segcache_fork_parent(void) { pthread_mutex_unlock(&cache_lock); }
