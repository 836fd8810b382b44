/* heap.c — a heap's pages: its page queues, the heap lock, the allocation
 * path of the size classes, and the owner's frees that leave the fast path
 * (a heap's life cycle is thread.c's, blocks above the classes large.c's).
 *
 * Each size class has a queue of pages that may have free blocks; the first is
 * the page malloc allocates from (its direct[] entries point at it, or at the
 * class's thread cache, which refills from it).
 * A page found full is parked on heap->full with its thread_free state set to
 * TF_NOTIFY, so the first remote free into it tells the heap (page.c).
 *
 * The owner's slow paths run under heap->lock (heap_enter/heap_leave); the
 * only other taker is the purger (purge.c), trimming a heap whose thread has
 * gone quiet.  The fast paths take no lock: the purger leaves alone the first
 * page of each queue of a class without a thread cache (the only pages
 * malloc's fast path allocates from) and every page that still has a block in
 * use (the only pages free's could reach). */
#include "hot.h"
#include "options.h"
#include "stats.h"

#include <errno.h>
#include <string.h>

page_t hm_page_empty;                                  /* free == 0: always "empty" */

/* ---- queues and the pages malloc pops ------------------------------------- */

/* Large pages hold one block and live on the full list; only class pages queue. */
static pageq_t *queue_of(heap_t *h, page_t *pg) { return &h->queue[pg->cls]; }

static void spare_reuse(heap_t *h, page_t *pg);

/* direct[] entries of each class: direct_first[c] .. direct_first[c + 1] - 1 */
static uint16_t direct_first[CLASSES + 1];

/* Point malloc's entries of class c at list l.  In slow mode they stay at
 * the empty page (heap_direct_init) and l goes to h->current[c] instead: every
 * malloc then misses its fast path, to be counted or checked on the slow
 * path, or counted down to the profiler's next sample before it pops l
 * (profile_malloc), and the fast path pays nothing. */
static void set_direct(heap_t *h, size_t c, list_t *l) {
  hm_assert(c < CLASSES);
  if (hm_slow_mode) {
    atomic_store_explicit(&h->current[c], l, memory_order_release);
    return;
  }
  for (size_t i = direct_first[c]; i < direct_first[c + 1]; i++) atomic_store_explicit(&h->direct[i], l, memory_order_release);
}
/* Point malloc's entries of class c at pg, the first page of its queue (or
 * the empty page), unless they point at the class's thread cache. */
static void set_current(heap_t *h, size_t c, page_t *pg) {
  if (c < CLASS_4K || !tcache_fast(c)) set_direct(h, c, &pg->list);
}

/* A new heap's entries (a recycled struct keeps those of the cached classes):
 * the empty page, or the class's thread cache. */
void heap_direct_init(heap_t *h) {
  for (size_t c = 0; c <= CLASSES; c++) atomic_store_explicit(&h->current[c], &hm_page_empty.list, memory_order_relaxed);
  for (size_t c = 0; c < CLASSES; c++) set_current(h, c, &hm_page_empty);
  if (hm_slow_mode)                  /* (set_direct leaves them) */
    for (size_t i = 0; i < DIRECT_N; i++) atomic_store_explicit(&h->direct[i], &hm_page_empty.list, memory_order_relaxed);
  for (size_t c = TC_MIN; c < CLASSES; c++)
    if (tcache_fast(c) && atomic_load_explicit(&h->direct[direct_first[c]], memory_order_relaxed) != &h->tc[c - TC_MIN].l)
      set_direct(h, c, &h->tc[c - TC_MIN].l);
}

/* (purger, locked: tcache_take) Point malloc's entries of the classes with a
 * thread cache at the empty page and free's pushes at the sink (!to_caches),
 * so that either calls out at once; and back at the caches. */
void heap_route_caches(heap_t *h, bool to_caches) {
  hm_assert(heap_held(h));
  for (size_t c = TC_MIN; c < CLASSES; c++) {
    if (!tcache_fast(c)) continue;
    set_direct(h, c, to_caches ? &h->tc[c - TC_MIN].l : &hm_page_empty.list);
    for (page_t *pg = h->queue[c].first; pg; pg = pg->next) {
      hm_assert(pg->cls == c);
      if (to_caches) page_set_local(pg);
      else page_set_push(pg, &h->tc_sink);
    }
  }
}

static void current_update(heap_t *h, size_t c) {
  hm_assert(c < CLASSES && (!h->queue[c].first || h->queue[c].first->cls == c));
  if (h->queue[c].first && h->queue[c].first->spare) spare_reuse(h, h->queue[c].first);
  set_current(h, c, h->queue[c].first ? h->queue[c].first : &hm_page_empty);
}

static void queue_remove(heap_t *h, page_t *pg) {
  pageq_t *q = queue_of(h, pg);
  hm_assert(pg->cls < CLASSES && !(pg->flags & PAGE_FULL));   /* a class page on its queue */
  bool was_first = q->first == pg;
  pageq_remove(q, pg);
  if (was_first) current_update(h, pg->cls);
}

static void queue_push(heap_t *h, page_t *pg, bool front) {
  pageq_t *q = queue_of(h, pg);
  hm_assert(pg->cls < CLASSES && !(pg->flags & PAGE_FULL));
  hm_assert(atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  if (front || !q->first) {
    pageq_push_front(q, pg);
    current_update(h, pg->cls);
  } else {
    pageq_push(q, pg);
  }
}

/* Park a full page; false if remote frees arrived meanwhile (collect those).
 * (find_page points malloc's entries at the queue's new first page afterwards.) */
static bool page_park(heap_t *h, page_t *pg) {
  hm_assert(heap_held(h) && pg->cls < CLASSES && !(pg->flags & PAGE_FULL));
  hm_assert(!pg->free && pg->capacity == pg->reserved);   /* full: nothing free, nothing to carve */
  if (!page_try_notify(pg)) return false;
  pageq_remove(queue_of(h, pg), pg);
  page_set_flags(pg, pg->flags | PAGE_FULL);
  pageq_push(&h->full, pg);
  return true;
}

static void page_unpark(heap_t *h, page_t *pg) {
  hm_assert(heap_held(h) && (pg->flags & PAGE_FULL) && pg->cls < CLASSES);
  hm_assert(atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  page_set_tf_state(pg, TF_NORMAL);
  page_set_flags(pg, pg->flags & (uint8_t)~PAGE_FULL);
  pageq_remove(&h->full, pg);
  queue_push(h, pg, false);
}

/* A page of a reclaimed segment joins h (its remote frees collected).
 * False when it turned out empty: the caller frees it. */
bool heap_adopt_page(heap_t *h, page_t *pg) {
  hm_assert(heap_held(h) && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  hm_assert(pg->cls < CLASSES || (pg->cls == CLASS_LARGE && pg->capacity == 1));
  if (pg->cls != CLASS_LARGE) { queue_push(h, pg, false); return true; }
  /* single-block pages live parked; a free may have raced with the collect */
  while (!page_try_notify(pg)) {
    page_collect(pg);
    if (page_used(pg) == 0) return false;
  }
  pageq_push(&h->full, pg);                 /* (parked: its flags say so, segment_adopt) */
  return true;
}

/* ---- the heap lock ----------------------------------------------------------
 * The owner takes it on every slow path, the purger (or another thread's
 * malloc_trim, both under purge.c's pass_lock) only for a heap gone quiet.
 * An exchange on every slow path cost the owner a fifth of the time of a
 * program of big blocks: a locked instruction waits for every store before it
 * to complete, such as the program's writes into the block it just got.  So
 * the lock is asymmetric, as the thread caches' busy mark (hot.h): the owner
 * marks itself in and then reads whether the other side holds the heap, with
 * no processor fence between; the other side marks itself, calls
 * membarrier(), which runs a full fence on every thread of the process on a
 * CPU, and backs off if it then sees the owner in.  One of the two sees the
 * other.  Without membarrier (and under ThreadSanitizer, which cannot see
 * that fence) both sides take a spin lock. */
static bool lock_fenced;

/* The debug build records who holds a heap's lock (heap->holder): a thread is
 * told by the address of its own thread-local tag. */
#if HM_DEBUG_ON
static __thread char holder_tag;
static void lock_hold(heap_t *h) {
  hm_assert(atomic_load_explicit(&h->holder, memory_order_relaxed) == NULL);
  atomic_store_explicit(&h->holder, &holder_tag, memory_order_relaxed);
}
static void lock_drop(heap_t *h) {
  hm_assert(heap_held(h));
  atomic_store_explicit(&h->holder, NULL, memory_order_relaxed);
}
bool heap_held(const heap_t *h) { return atomic_load_explicit(&h->holder, memory_order_relaxed) == &holder_tag; }
#else
#define lock_hold(h) ((void)0)
#define lock_drop(h) ((void)0)
#endif

static void lock_raw(heap_t *h) {
  if (likely(lock_fenced)) {
    for (;;) {
      atomic_store_explicit(&h->owner_in, 1, memory_order_relaxed);
      atomic_signal_fence(memory_order_seq_cst);
      if (likely(!atomic_load_explicit(&h->other_in, memory_order_acquire))) { lock_hold(h); return; }
      atomic_store_explicit(&h->owner_in, 0, memory_order_relaxed);
      while (atomic_load_explicit(&h->other_in, memory_order_relaxed)) sched_yield();
    }
  }
  spin_lock(&h->lock);
  lock_hold(h);
}
static void unlock_raw(heap_t *h) {
  lock_drop(h);
  if (likely(lock_fenced)) atomic_store_explicit(&h->owner_in, 0, memory_order_release);
  else spin_unlock(&h->lock);
}
bool heap_trylock(heap_t *h) {
  if (!lock_fenced) {
    bool got = spin_trylock(&h->lock);
    if (got) lock_hold(h);
    return got;
  }
  atomic_store_explicit(&h->other_in, 1, memory_order_relaxed);
  if (os_membarrier() && !atomic_load_explicit(&h->owner_in, memory_order_acquire)) { lock_hold(h); return true; }
  atomic_store_explicit(&h->other_in, 0, memory_order_release);
  return false;
}
/* The same for a heap no thread owns (parked, thread.c), the caller holding
 * what a thread must take to own it: no thread is in it, and the next owner
 * sees other_in when it looks, with no membarrier. */
bool heap_trylock_unowned(heap_t *h) {
  if (!lock_fenced) return heap_trylock(h);
  hm_assert(!atomic_load_explicit(&h->owner_in, memory_order_relaxed));
  atomic_store_explicit(&h->other_in, 1, memory_order_relaxed);
  lock_hold(h);
  return true;
}
void heap_unlock(heap_t *h) {
  lock_drop(h);
  if (lock_fenced) atomic_store_explicit(&h->other_in, 0, memory_order_release);
  else spin_unlock(&h->lock);
}

/* The owner's side without heap_enter's work: a heap being made, parked or
 * released (thread.c). */
void heap_lock_raw(heap_t *h) { lock_raw(h); }
void heap_unlock_raw(heap_t *h) { unlock_raw(h); }

/* The process's set-up (thread.c): malloc's class entries, and the lock's
 * kind. */
void heap_process_init(bool membarrier) {
  for (size_t c = 0, i = 0; c <= CLASSES; c++) {
    while (i < DIRECT_N && class_of(direct_size(i)) < c) i++;
    direct_first[c] = (uint16_t)i;
  }
  lock_fenced = membarrier && !HM_TSAN;
}

void heap_enter(heap_t *h) {
  hm_assert(h != &hm_heap_empty && h->live);
  lock_raw(h);
  if (unlikely(h->tc_parked)) tcache_resume(h);   /* the purger took the caches */
  atomic_store_explicit(&h->slow_ops, atomic_load_explicit(&h->slow_ops, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  if (unlikely(atomic_load_explicit(&h->quiet.trimmed_ms, memory_order_relaxed))) purge_owner_back(h);
  if (unlikely(atomic_load_explicit(&h->idle, memory_order_relaxed))) {
    /* the purger stopped watching us: we are busy again, so watch */
    atomic_store_explicit(&h->idle, 0, memory_order_relaxed);
    purge_arm(decay_due(&h->decay, os_now_ms()));
  }
}

void heap_leave(heap_t *h) {
  hm_assert(!h->tc_parked);                    /* (the caches resumed on the way in) */
  unlock_raw(h);
}

/* An owner the purger found idle does not collect what other threads free
 * into its pages: have the purger look at it again. */
void heap_wake_idle(heap_t *h) {
  if (atomic_exchange_explicit(&h->idle, 0, memory_order_relaxed))
    purge_arm(os_now_ms() + (uint64_t)hm_options.purge_delay_ms);
}

/* The last block of a page came back (free's fast path).  Keep the page if it
 * is the one the class allocates from and at most KEEP_SLICES long (so a
 * malloc/free ping-pong does not re-carve it each time; a bigger page goes
 * back to its segment, where any class can reuse its slices); otherwise give
 * its slices back.  The test needs no lock: only the owner changes a queue's
 * first page, but for the purger's of a class with a thread cache, whose
 * pages the owner's fast paths do not free into (tcache.c). */
#define KEEP_SLICES 4
void heap_page_retire(heap_t *h, page_t *pg) {
  hm_assert(pg->cls < CLASSES && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  if (pg->cls < CLASSES && h->queue[pg->cls].first == pg && pg->slices <= KEEP_SLICES) return;
  heap_enter(h);
  heap_page_retire_locked(h, pg);
  heap_leave(h);
}

/* ---- spare pages -------------------------------------------------------------
 * A page emptied behind the first page of its queue may stay there, all its
 * blocks free, for its class's next refill: a spare.  A thread whose frees
 * come in batches (other threads' frees it collects, a full thread cache)
 * empties pages in passing and carves new ones at once, each new page on
 * whatever slices the segments have free while the old one's wait for the
 * purge.
 * So a class that refills (carves a page, or takes a spare, after one of its
 * pages emptied) SPARE_AFTER times in a purge delay keeps its emptied pages
 * of up to KEEP_SLICES: CLASS_SPARES of them, SPARE_SLICES in all (a page
 * carved again costs a pass over its memory, which a spare's list saves).
 * A class that empties pages without refilling them (a thread freeing what
 * it built) keeps none, nor do longer pages (buffers growing through the big
 * classes run slower and peak higher with them): those slices serve other
 * classes and big blocks.  A spare still unused at the second check after it
 * was kept (the checks are a purge delay apart) goes back to its segment;
 * the purger takes those of a heap gone quiet at once, as malloc_trim and
 * thread exit do. */

static void spare_drop(heap_t *h, page_t *pg) {
  if (pg->spare) {
    hm_assert(h->spare_slices >= pg->slices);
    pg->spare = 0;
    h->spare_slices -= pg->slices;
  }
}

static void refilled(heap_t *h, size_t c) {
  if (h->refills[c] < UINT8_MAX) h->refills[c]++;
}

/* A spare became its queue's first page. */
static void spare_reuse(heap_t *h, page_t *pg) {
  spare_drop(h, pg);
  refilled(h, pg->cls);
}

/* (h locked) Spares sit right behind their queue's first page. */
static void spares_check(heap_t *h, uint64_t now) {
  hm_assert(heap_held(h) && h->spare_slices <= SPARE_SLICES);
  bool again = h->spare_slices > 0;
  for (size_t c = 0; c < CLASSES; c++) {
    pageq_t *q = &h->queue[c];
    for (page_t *pg = q->first ? q->first->next : NULL, *next; pg && pg->spare; pg = next) {
      next = pg->next;
      hm_assert(pg->cls == c && page_used(pg) == 0 && pg->slices <= KEEP_SLICES);   /* all free */
      if (pg->spare == 1) {                     /* kept since the last check */
        pg->spare = 2;
        continue;
      }
      spare_drop(h, pg);
      pageq_remove(q, pg);
      segment_page_free(pg);
    }
    again |= (h->refills[c] >>= 1) > 0;
  }
  h->freed_classes = 0;
  h->spare_check_ms = again ? decay_due(&h->decay, now) : 0;
}

/* Has q room for another spare? */
static bool class_spare_room(const pageq_t *q) {
  unsigned n = 0;
  hm_assert(q->first);
  for (const page_t *s = q->first->next; s && s->spare; s = s->next) n++;
  return n < CLASS_SPARES;
}

void heap_page_retire_locked(heap_t *h, page_t *pg) {
  hm_assert(heap_held(h) && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  hm_assert(pg->cls < CLASSES && page_used(pg) == 0 && !pg->spare);   /* a class page just emptied */
  if (pg->cls < CLASSES) {
    h->freed_classes |= 1ull << pg->cls;
    if (!h->spare_check_ms) h->spare_check_ms = decay_due(&h->decay, os_coarse_ms());
  }
  if (pg->cls < CLASSES && !(pg->flags & PAGE_FULL) && pg->slices <= KEEP_SLICES) {
    pageq_t *q = &h->queue[pg->cls];
    if (q->first == pg) return;
    if (h->refills[pg->cls] >= SPARE_AFTER && h->spare_slices + pg->slices <= SPARE_SLICES &&
        class_spare_room(q)) {
      if (q->first->next != pg) {
        pageq_remove(q, pg);
        pageq_insert_after(q, q->first, pg);
      }
      pg->spare = 1;
      h->spare_slices += pg->slices;
      hm_assert(h->spare_slices <= SPARE_SLICES && q->first->next == pg);   /* right behind the first */
      return;
    }
  }
  if (pg->flags & PAGE_FULL) pageq_remove(&h->full, pg);
  else queue_remove(h, pg);
  segment_page_free(pg);
}

/* (h locked) pg, empty or out of every thread's reach, leaves h's queue (or
 * the full list) and goes back to its segment. */
void heap_page_free(heap_t *h, page_t *pg) {
  spare_drop(h, pg);
  if (pg->flags & PAGE_FULL) pageq_remove(&h->full, pg);
  else queue_remove(h, pg);
  segment_page_free(pg);
}

/* ---- allocation ---------------------------------------------------------- */

static void *enomem(void) { errno = ENOMEM; return NULL; }

static size_t class_slices(size_t bsize) {
  if (bsize <= 8 * 1024) return 1;
  size_t blocks = bsize <= 32 * 1024 ? 8 : 4;
  hm_assert(bsize <= MEDIUM_MAX && (bsize * blocks + SLICE_SIZE - 1) / SLICE_SIZE < SLICES);
  return (bsize * blocks + SLICE_SIZE - 1) / SLICE_SIZE;
}

/* The page to allocate class c from, left first in its queue.  The walk
 * looks only at the queue's first page: one with no free block after
 * collecting remote frees or carving more leaves the front, to the back of
 * the queue the first time (the owner's frees into it stay on the fast path,
 * and a page of few big blocks is soon in use again), parked the second, so
 * the walk never passes over a page more than twice.  Maps a new page when
 * none has room. */
static page_t *find_page(heap_t *h, size_t c) {
  pageq_t *q = &h->queue[c];
  page_t *pg = q->first;
  hm_assert(heap_held(h) && c < CLASSES);
  while (pg) {
    page_t *next = pg->next;
    hm_assert(pg == q->first && pg->cls == c && !(pg->flags & PAGE_FULL));
    if (pg->free) break;
    if (TF_PTR(atomic_load_explicit(&pg->thread_free, memory_order_relaxed))) {
      page_collect(pg);
      if (pg->free) break;
    }
    if (pg->capacity < pg->reserved) { page_extend(pg); break; }
    if (!pg->full_once && next) {
      pg->full_once = 1;
      q->first = next;                  /* to the back of the queue */
      next->prev = NULL;
      pg->next = NULL;
      pg->prev = q->last;
      q->last->next = pg;
      q->last = pg;
    } else if (!page_park(h, pg)) {
      page_collect(pg);
      break;
    }
    pg = next;
  }
  if (!pg) {
    if (h->freed_classes >> c & 1) refilled(h, c);
    pg = segment_page_alloc(h, class_slices(class_size(c)), (uint8_t)c, false);
    if (pg) {
      page_init(h, pg, class_size(c), (uint8_t)c);
      page_extend(pg);
      pageq_push_front(q, pg);
    }
  } else {
    pg->full_once = 0;
  }
  hm_assert(!pg || (pg == q->first && pg->free && page_used(pg) < pg->capacity));   /* a block to pop */
  current_update(h, c);              /* once, for whatever the walk changed */
  return pg;
}

static void *heap_malloc_class(heap_t *h, size_t c) {
  if (unlikely(hm_secure) && c == 0) return secure_zero_alloc(h);
  bool cached = class_cached(c) && hm_tcache_on;
  hm_assert(heap_held(h) && c < CLASSES);
  if (cached) {               /* (stats mode: the fast path, which would pop, keeps out) */
    void *b = tcache_pop(h, c);
    if (unlikely(hm_counting)) stat_os(b ? STAT_TC_HITS : STAT_TC_MISSES);
    if (b) return b;
  }
  if (unlikely(hm_counting)) {
    page_t *cur = h->queue[c].first;
    stat_os(cur && cur->free ? STAT_HITS : STAT_REFILLS);
  }
  if (atomic_load_explicit(&h->delayed, memory_order_relaxed)) heap_collect_delayed(h);
  page_t *pg = find_page(h, c);
  if (!pg) return enomem();
  if (unlikely(hm_secure)) return secure_pop(pg);
  return cached && tcache_fast(c) ? tcache_refill(h, pg) : hm_page_pop(pg);
}


/* Every HEAP_TICKS slow-path events (a malloc's, a full thread cache's): the
 * decays that page frees drive (segment_after_free), for a program that
 * frees no page for a while, its blocks waiting in thread caches.  The
 * deadlines are tested on the coarse clock (never ahead of the precise one),
 * which is read only when something is due. */
void heap_tick(heap_t *h) {
  hm_assert(heap_held(h));
  hm_validate(h);
  h->ticks = HEAP_TICKS;
  segcache_tick(0);
  bool cached = tcache_held(h);
  if (!cached && !h->next_purge_ms && !h->spare_check_ms) return;
  uint64_t coarse = os_coarse_ms();
  if (h->spare_check_ms && coarse >= h->spare_check_ms) spares_check(h, coarse);
  if (h->next_purge_ms && coarse >= h->next_purge_ms) segment_purge_due(h, PURGE_BUSY, NULL);
  if (cached && coarse >= h->tc_decay_ms) tcache_decay(h, os_now_ms());
}

void *heap_malloc_slow(heap_t *h, size_t n, size_t c) {
  if (unlikely(h == &hm_heap_empty) && !(h = heap_get())) return enomem();
  if (atomic_load_explicit(&h->inbox, memory_order_relaxed)) {   /* other threads freed our blocks */
    remote_collect(h);
    void *p = hm_malloc_try(h, n, &c);
    if (p) return p;
  }
  if (unlikely(hm_secure)) c = secure_class(n);       /* room for the canaries */
  hm_assert(c < CLASSES || c == CLASS_LARGE);
  heap_enter(h);
  void *p = c == CLASS_LARGE ? large_malloc(h, n, 0, false) : heap_malloc_class(h, c);
  bool tick = --h->ticks == 0;
  if (tick) heap_tick(h);
  heap_leave(h);
  if (unlikely(hm_secure) && p) secure_arm(p, n);
  if (tick && remote_held(h)) remote_flush(h);
  purge_start_if_wanted();
  if (unlikely(hm_slow_mode) && p) slow_mode_alloc(p, n);
  return p;
}

/* align is a power of two > 16.  Blocks of a class whose size is a multiple of
 * align are aligned (pages start on 64 KiB boundaries; in secure mode past a
 * pad that keeps alignments up to SECURE_ALIGN_MAX), so small alignments
 * cost no more than rounding the size up. */
void *heap_malloc_aligned(heap_t *h, size_t n, size_t align) {
  if (unlikely(h == &hm_heap_empty) && !(h = heap_get())) return enomem();
  if (atomic_load_explicit(&h->inbox, memory_order_relaxed)) remote_collect(h);
  void *p = NULL;
  heap_enter(h);
  if (n <= MEDIUM_MAX && align <= (hm_secure ? SECURE_ALIGN_MAX : MAX_ALIGN_IN_CLASS)) {
    size_t c = hm_secure ? secure_class(n) : size_class(n);
    while (c < CLASSES && class_size(c) % align) c++;
    if (c < CLASSES) p = heap_malloc_class(h, c);
  }
  if (!p) p = large_malloc(h, n, align, false);
  hm_assert(!p || ((uintptr_t)p & (align - 1)) == 0);
  heap_leave(h);
  if (unlikely(hm_secure) && p) secure_arm(p, n);
  purge_start_if_wanted();
  if (unlikely(hm_slow_mode) && p) slow_mode_alloc(p, n);
  return p;
}

/* ---- frees handed over by other threads ----------------------------------- */

/* (h, pg's owner, locked) Is b, a block of pg that looks free, free: on
 * pg's lists or in h's thread cache?  (A block in h's inbox does not look
 * free: its sender leaves it as it was.) */
bool heap_block_free(heap_t *h, page_t *pg, const void *b) {
  hm_assert(heap_held(h) && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  return page_contains_free(pg, (uintptr_t)b) || tcache_contains(h, pg->cls, (uintptr_t)b);
}

/* The owner frees a block of a class page that is parked or looks
 * double-freed. */
void heap_free_slow(page_t *pg, block_t *b) {
  heap_t *h = atomic_load_explicit(&pg->heap, memory_order_relaxed);
  hm_assert(heap_held(h) && pg->cls < CLASSES);
  hm_assert((uintptr_t)b - (uintptr_t)pg->start < page_area(pg) &&
            ((uintptr_t)b - (uintptr_t)pg->start) % pg->block_size == 0);
  if (block_looks_free(pg, b) && heap_block_free(h, pg, b)) hm_fatal("double free", b, pg);
  hm_assert(page_used(pg) > 0 && page_used(pg) <= pg->capacity);   /* b was in use */
  block_set_free(pg, b, pg->free);
  pg->free = (uintptr_t)b;
  if (pg->flags & PAGE_FULL) page_unpark(h, pg);
  page_set_used(pg, page_used(pg) - 1);
  if (page_used(pg) == 0) heap_page_retire_locked(h, pg);
}

/* The owner frees b on its own page pg (slow variant: parked, large,
 * suspicious; h locked). */
void heap_free_local(heap_t *h, page_t *pg, block_t *b) {
  hm_assert(heap_held(h) && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  if (pg->cls == CLASS_LARGE) {
    hm_assert((pg->flags & PAGE_FULL) && page_used(pg) == 1 && (uint8_t *)b == pg->start);   /* lives parked */
    pageq_remove(&h->full, pg);
    segment_page_free(pg);
    return;
  }
  heap_free_slow(pg, b);
}

/* (h locked) */
void heap_collect_delayed(heap_t *h) {
  hm_assert(heap_held(h));
  uintptr_t b = atomic_exchange_explicit(&h->delayed, 0, memory_order_acquire);
  while (b) {
    page_t *pg;
    uintptr_t next = delayed_next(b, &pg);
    page_set_tf_state(pg, TF_NORMAL);   /* waits out the sender's TF_BUSY */
    if (unlikely(hm_counting)) stat_os(STAT_REMOTE_RECEIVED);
    ((block_t *)b)->word = 0;           /* freed again below: not a double free */
    if (atomic_load_explicit(&pg->heap, memory_order_relaxed) == h) heap_free_local(h, pg, (block_t *)b);
    else page_free_remote(pg, (block_t *)b);   /* (not expected: h still owns its parked pages) */
    b = next;
  }
}

