/* abandon.c — the segments of exited threads.  A thread's heap released for
 * good (thread.c) abandons its segments that still hold live blocks: their pages
 * have no owner, and the next thread that frees into one, or needs memory,
 * reclaims it (segment.c adopts it into that thread's heap).  Meanwhile the
 * purger collects the frees that reach them and purges their free slices
 * after the delay. */
#include "internal.h"
#include "stats.h"

static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static segment_t *abandoned;                 /* doubly linked via next/prev */
static _Atomic size_t abandoned_count;
static decay_t abandoned_decay;              /* (abandoned_lock) a segment reclaimed soon
                                                after its purge was purged too early (threads
                                                that come and go, each taking over what
                                                others left) */

/* Called by an exiting heap for a segment that still holds live blocks.  Its
 * free slices are purged once they have been abandoned for the delay
 * (abandon_tidy); returns when, or 0 if it has none. */
uint64_t abandon_push(segment_t *s) {
  page_t *pg;
  hm_assert(s->heap && heap_held(s->heap) && s->used_slices != 1);
  hm_assert(!atomic_load_explicit(&s->abandoned, memory_order_relaxed) && s->fit_run[0] == 0 && s->fit_run[1] == 0);
  for_each_page(s, pg) page_set_owner(pg, NULL);
  s->heap = NULL;
  pthread_mutex_lock(&abandoned_lock);
  uint64_t due = s->dirty_slices & ~s->used_slices ? decay_due(&abandoned_decay, os_now_ms()) : 0;
  s->purge_ms = due;
  seglist_push(&abandoned, s);
  atomic_store_explicit(&s->abandoned, 1, memory_order_release);
  atomic_fetch_add_explicit(&abandoned_count, 1, memory_order_relaxed);
  pthread_mutex_unlock(&abandoned_lock);       /* (s may be reclaimed from here on) */
  stat_inc(STAT_ABANDONED);
  return due;
}

/* Take s off the abandoned list (abandoned_lock held). */
static void unlist(segment_t *s) {
  hm_assert(atomic_load_explicit(&s->abandoned, memory_order_relaxed) && !s->heap);
  hm_assert(atomic_load_explicit(&abandoned_count, memory_order_relaxed) > 0);
  seglist_remove(&abandoned, s);
  atomic_store_explicit(&s->abandoned, 0, memory_order_relaxed);
  atomic_fetch_sub_explicit(&abandoned_count, 1, memory_order_relaxed);
}

/* (abandoned_lock held) s, taken off the list, goes back to work. */
static void reclaimed(segment_t *s) {
  unlist(s);
  if (s->purged_slices) decay_reused(&abandoned_decay, s->purged_ms, os_now_ms());
  s->purge_ms = 0;                           /* the new owner schedules its own */
}

/* Take s off the list if it is still abandoned: true if this thread got it
 * (the caller adopts it). */
bool abandon_take(segment_t *s) {
  bool got = false;
  pthread_mutex_lock(&abandoned_lock);
  if (atomic_load_explicit(&s->abandoned, memory_order_relaxed)) {
    reclaimed(s);
    got = true;
  }
  pthread_mutex_unlock(&abandoned_lock);
  return got;
}

/* Any abandoned segment, taken off the list (the caller adopts it), or NULL. */
segment_t *abandon_take_any(void) {
  if (!atomic_load_explicit(&abandoned_count, memory_order_relaxed)) return NULL;
  segment_t *s = NULL;
  pthread_mutex_lock(&abandoned_lock);
  if ((s = abandoned) != NULL) reclaimed(s);
  pthread_mutex_unlock(&abandoned_lock);
  return s;
}

/* The purger (and malloc_trim) on the segments of exited threads: collect
 * the frees that reached them after their owner left (no thread owns their
 * pages, and none can adopt one while we hold the lock), give back the pages
 * and segments that are empty now, and purge free slices whose delay has
 * passed (all of them if force).  Returns the next deadline, 0 if none;
 * *left: how many segments stay abandoned. */
uint64_t abandon_tidy(bool force, size_t *left) {
  uint64_t now = os_now_ms(), next = 0;
  segment_t *empty = NULL;
  pthread_mutex_lock(&abandoned_lock);
  for (segment_t *s = abandoned, *snext; s; s = snext) {
    snext = s->next;
    hm_assert(!s->heap && atomic_load_explicit(&s->abandoned, memory_order_relaxed));
    page_t *pg;
    for_each_page(s, pg) {
      page_collect(pg);
      if (page_used(pg) == 0) slices_free(s, pg);
    }
    if (s->used_slices == 1) {
      unlist(s);
      s->next = empty;
      empty = s;
      continue;
    }
    if (!(s->dirty_slices & ~s->used_slices)) continue;
    if (!s->purge_ms) s->purge_ms = decay_due(&abandoned_decay, now);
    if (force || now >= s->purge_ms) {
      slices_purge(s, ~0ull, force);
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
    segcache_put(s);
  }
  return next;
}

/* fork: the lock is held across it (thread.c's fork handlers). */
void abandon_fork_prepare(void) { pthread_mutex_lock(&abandoned_lock); }
void abandon_fork_parent(void) { pthread_mutex_unlock(&abandoned_lock); }
