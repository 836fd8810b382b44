/* heap.c — one heap per thread: its page queues, the generic allocation path,
 * and its life cycle (creation on first use, abandonment at thread exit, fork).
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
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* size_class of every multiple of 16 up to SMALL_MAX and of 512 up to
 * MEDIUM_MAX, worked out by the compiler (the same formula as size_class). */
#define SC(n)    ((n) <= 128 ? ((n) <= 16 ? 0 : ((n) - 1) >> 4) \
                  : 8 + (63 - __builtin_clzl((n) - 1) - 7) * 4 + ((((n) - 1) >> (63 - __builtin_clzl((n) - 1) - 2)) & 3) \
                    + ((n) > SIZE_4K5))
#define C1(i)    (uint8_t)SC((size_t)(i) * 16)   /* (the cast: clang checks both arms of ?: against uint8_t) */
#define C4(i)    C1(i), C1((i) + 1), C1((i) + 2), C1((i) + 3)
#define C16(i)   C4(i), C4((i) + 4), C4((i) + 8), C4((i) + 12)
#define C128(i)  C16(i), C16((i) + 16), C16((i) + 32), C16((i) + 48), C16((i) + 64), C16((i) + 80), C16((i) + 96), C16((i) + 112)
const uint8_t hm_class_small[SMALL_MAX / 16 + 1] = { C128(0), C16(128), C16(144), C16(160), C16(176), C16(192), C16(208), C1(224) };
_Static_assert(SMALL_MAX / 16 + 1 == 225, "the initializer covers 225 sizes");
#define B1(i)    (uint8_t)SC((size_t)(i) * 512)
#define B4(i)    B1(i), B1((i) + 1), B1((i) + 2), B1((i) + 3)
#define B16(i)   B4(i), B4((i) + 4), B4((i) + 8), B4((i) + 12)
#define B128(i)  B16(i), B16((i) + 16), B16((i) + 32), B16((i) + 48), B16((i) + 64), B16((i) + 80), B16((i) + 96), B16((i) + 112)
const uint8_t hm_class_big[MEDIUM_MAX / 512 + 1] = { B128(0), B128(128), B128(256), B128(384), B1(512) };
_Static_assert(MEDIUM_MAX / 512 + 1 == 513, "the initializer covers 513 sizes");
#undef SC
#undef C1
#undef C4
#undef C16
#undef C128
#undef B1
#undef B4
#undef B16
#undef B128

__thread heap_t *hm_tls_heap = &hm_heap_empty;
page_t hm_page_empty;                                  /* free == 0: always "empty" */
heap_t hm_heap_empty = { .direct = { [0 ... DIRECT_N - 1] = &hm_page_empty.list },
                         .current = { [0 ... CLASSES] = &hm_page_empty.list } };

static pthread_once_t process_once = PTHREAD_ONCE_INIT;
static pthread_key_t heap_key;
static pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static heap_t *_Atomic heaps_all; /* every heap struct ever made (for the purger) */
static heap_t *heaps_free;       /* structs of exited threads, for reuse */
static heap_t *parked;           /* heaps of exited threads, whole, for the next threads */
static unsigned parked_count;
static _Atomic int handlers_registered;
static __thread bool thread_exited; /* its heap was parked or released (heap_thread_done) */

/* ---- queues and the pages malloc pops ------------------------------------- */

/* Large pages hold one block and live on the full list; only class pages queue. */
static pageq_t *queue_of(heap_t *h, page_t *pg) { return &h->queue[pg->cls]; }

static void spare_reuse(heap_t *h, page_t *pg);

/* direct[] entries of each class: direct_first[c] .. direct_first[c + 1] - 1 */
static uint16_t direct_first[CLASSES + 1];

/* Point malloc's entries of class c at list l.  In slow mode they stay at
 * the empty page (heap_made) and l goes to h->current[c] instead: every
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

void page_unpark(heap_t *h, page_t *pg) {
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
  page_set_flags(pg, PAGE_FULL);
  pageq_push(&h->full, pg);
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
  while (atomic_exchange_explicit(&h->lock, 1, memory_order_acquire))
    while (atomic_load_explicit(&h->lock, memory_order_relaxed)) sched_yield();
  lock_hold(h);
}
static void unlock_raw(heap_t *h) {
  lock_drop(h);
  if (likely(lock_fenced)) atomic_store_explicit(&h->owner_in, 0, memory_order_release);
  else atomic_store_explicit(&h->lock, 0, memory_order_release);
}
bool heap_trylock(heap_t *h) {
  if (!lock_fenced) {
    bool got = !atomic_exchange_explicit(&h->lock, 1, memory_order_acquire);
    if (got) lock_hold(h);
    return got;
  }
  atomic_store_explicit(&h->other_in, 1, memory_order_relaxed);
  if (os_membarrier() && !atomic_load_explicit(&h->owner_in, memory_order_acquire)) { lock_hold(h); return true; }
  atomic_store_explicit(&h->other_in, 0, memory_order_release);
  return false;
}
void heap_unlock(heap_t *h) {
  lock_drop(h);
  if (lock_fenced) atomic_store_explicit(&h->other_in, 0, memory_order_release);
  else atomic_store_explicit(&h->lock, 0, memory_order_release);
}

void heap_enter(heap_t *h) {
  hm_assert(h != &hm_heap_empty && h->live);
  lock_raw(h);
  if (unlikely(h->tc_parked)) tcache_resume(h);   /* the purger took the caches */
  atomic_store_explicit(&h->slow_ops, atomic_load_explicit(&h->slow_ops, memory_order_relaxed) + 1,
                        memory_order_relaxed);
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
 * of up to KEEP_SLICES: CLASS_SPARES of them, one of one-slice pages (which
 * any class's next page reuses as they are), SPARE_SLICES in all.  A class
 * that empties pages without refilling them (a thread freeing what it built)
 * keeps none, nor do longer pages (buffers growing through the big classes
 * run slower and peak higher with them): those slices serve other classes
 * and big blocks.  A
 * spare still unused at the second check after it was kept (the checks are a
 * purge delay apart) goes back to its segment; the purger takes those of a
 * heap gone quiet at once, as malloc_trim and thread exit do. */

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

/* Has q room for another spare pg? */
static bool class_spare_room(const pageq_t *q, const page_t *pg) {
  unsigned n = 0, room = pg->slices == 1 ? 1 : CLASS_SPARES;
  hm_assert(q->first && q->first != pg);
  for (const page_t *s = q->first->next; s && s->spare; s = s->next) n++;
  return n < room;
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
        class_spare_room(q, pg)) {
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

/* Under an address-space limit (ulimit -v), a big block takes a mapping of
 * its own when that costs less address space than its share of a segment
 * filled with blocks of its size (16 slices: 17 against 21 1/3), as glibc's
 * big blocks have theirs; without a limit, address space costs nothing and
 * a run of slices is faster. */
static bool big_apart(size_t slices) {
  return (slices + 1) * ((SLICES - 1) / slices) < SLICES && os_space_limited();
}

/* Blocks above the largest class: a run of slices in one of the heap's
 * segments (large) or a mapping of their own (huge).  align may exceed
 * SLICE_SIZE: the block then starts inside its run, at the aligned address.
 * grow: a buffer realloc moves to grow (placed where it may grow in place). */
static void *heap_malloc_big(heap_t *h, size_t n, size_t align, bool grow) {
  if (n > ALLOC_MAX || align > ALLOC_MAX / 2) return enomem();
  if (n == 0) n = 1;            /* a block of 0 bytes would start where its run ends */
  hm_assert(heap_held(h) && (align == 0 || (align & (align - 1)) == 0));
  /* big blocks other threads freed: their runs first (a thread that allocates
   * only big blocks would otherwise never take them back) */
  if (atomic_load_explicit(&h->delayed, memory_order_relaxed)) heap_collect_delayed(h);
  segment_caches_tick(0);
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
      page_set_flags(pg, PAGE_FULL);
      atomic_store_explicit(&pg->thread_free, TF_NOTIFY, memory_order_relaxed);
      page_set_owner(pg, h);
      pageq_push(&h->full, pg);
      return blk;
    }
  }
  page_t *pg = segment_huge_alloc(h, n, align);
  if (!pg) return enomem();
  hm_assert(pg->cls == CLASS_HUGE && pg->block_size >= n && pg == &segment_of(pg)->pages[1]);
  hm_assert(segment_of(pg)->huge_offset || segment_of(pg->start) == segment_of(pg));   /* free's lookup */
  if (h->user) userheap_huge_add(h, segment_of(pg));
  return pg->start;
}

#define HEAP_TICKS 64

/* Every HEAP_TICKS slow-path events (a malloc's, a full thread cache's): the
 * decays that page frees drive (segment_after_free), for a program that
 * frees no page for a while, its blocks waiting in thread caches.  The
 * deadlines are tested on the coarse clock (never ahead of the precise one),
 * which is read only when something is due. */
void heap_tick(heap_t *h) {
  hm_assert(heap_held(h));
  hm_validate(h);
  h->ticks = HEAP_TICKS;
  segment_caches_tick(0);
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
  void *p = c == CLASS_LARGE ? heap_malloc_big(h, n, 0, false) : heap_malloc_class(h, c);
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
  if (!p) p = heap_malloc_big(h, n, align, false);
  hm_assert(!p || ((uintptr_t)p & (align - 1)) == 0);
  heap_leave(h);
  if (unlikely(hm_secure) && p) secure_arm(p, n);
  purge_start_if_wanted();
  if (unlikely(hm_slow_mode) && p) slow_mode_alloc(p, n);
  return p;
}

/* realloc's new block for a buffer of n > MEDIUM_MAX bytes that it moves to
 * grow. */
void *heap_malloc_grow(heap_t *h, size_t n) {
  if (unlikely(h == &hm_heap_empty) && !(h = heap_get())) return enomem();
  heap_enter(h);
  void *p = heap_malloc_big(h, n, 0, true);
  heap_leave(h);
  if (unlikely(hm_secure) && p) secure_arm(p, n);
  if (unlikely(hm_slow_mode) && p) slow_mode_alloc(p, n);
  return p;
}

/* ---- frees handed over by other threads ----------------------------------- */

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
  page_free_local_slow(pg, b);
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

/* ---- giving memory back ------------------------------------------------------ */

/* The owner (h locked): collect every remote free and give back every page
 * left empty, the queues' first pages included. */
void heap_collect_all(heap_t *h) {
  hm_assert(heap_held(h));
  heap_collect_delayed(h);
  for (size_t c = 0; c < CLASSES; c++) {
    for (page_t *pg = h->queue[c].first, *next; pg; pg = next) {
      next = pg->next;
      page_collect(pg);
      if (page_used(pg) == 0) {
        spare_drop(h, pg);
        queue_remove(h, pg);
        segment_page_free(pg);
      }
    }
  }
  hm_assert(h->spare_slices == 0);     /* (spares are empty pages: all gone) */
  h->freed_classes = 0;
  memset(h->refills, 0, sizeof h->refills);
  h->spare_check_ms = 0;
}

/* Give pg back if no thread can reach it (but 'elsewhere' of its blocks are
 * known free).  A queue's first page is left alone where malloc's fast path
 * allocates from it; a class with a thread cache refills the cache from it
 * on the slow path, locked, and its frees go to the cache or (caches
 * parked) the sink, never to the page, so there it goes too, even all free
 * (kept for the next refill).  A page on a delayed list may have been
 * unparked by its owner since, so its flag tells which list it is on. */
static bool trim_page(heap_t *h, page_t *pg, uint32_t elsewhere) {
  bool parked = pg->flags & PAGE_FULL;
  hm_assert(heap_held(h) && (parked || pg->cls < CLASSES));
  bool first = !parked && h->queue[pg->cls].first == pg;
  if (first && !tcache_fast(pg->cls)) return false;
  if (!pg->spare && !(first && page_used(pg) == 0) && !page_unreachable(pg, elsewhere)) return false;
  spare_drop(h, pg);
  if (parked) pageq_remove(&h->full, pg);
  else queue_remove(h, pg);
  segment_page_free(pg);
  stat_os(STAT_TRIMMED);
  return true;
}

/* The purger (h locked, its owner perhaps running fast paths): give back the
 * pages no thread can reach any more (page_unreachable), then purge what is
 * due.  First the thread caches are emptied (a quiet thread does not need
 * them).  Blocks handed over on the delayed list count as free; those of pages
 * still in use go back on the list for the owner.  True if it freed a page. */
bool heap_trim_idle(heap_t *h) {
  hm_assert(heap_held(h) && h->live);
  bool freed = false;
  tcache_take(h);                     /* its cached blocks onto their pages' remote lists */
  remote_take(h);                     /* and those other threads sent it */
  uintptr_t b = atomic_exchange_explicit(&h->delayed, 0, memory_order_acquire), keep = 0, keep_last = 0;
  while (b) {
    page_t *pg;
    uintptr_t next = delayed_next(b, &pg);
    page_set_tf_state(pg, TF_NORMAL);   /* waits out the sender's TF_BUSY */
    if (trim_page(h, pg, 1)) {
      freed = true;
    } else {
      /* (the sender left the state NORMAL; the owner's pass sets it again) */
      block_set_free(pg, (void *)b, keep);
      if (!keep) keep_last = b;
      keep = b;
    }
    b = next;
  }
  if (keep) delayed_push(h, (block_t *)keep, (block_t *)keep_last);
  for (size_t c = 0; c < CLASSES; c++) {
    for (page_t *pg = h->queue[c].first, *next; pg; pg = next) {
      next = pg->next;
      hm_assert(pg->cls == c && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
      freed |= trim_page(h, pg, 0);
    }
  }
  segment_purge_due(h, PURGE_IDLE, NULL);
  return freed;
}

heap_t *heap_first(void) { return atomic_load_explicit(&heaps_all, memory_order_acquire); }

/* ---- heap life cycle ------------------------------------------------------ */

static void heap_thread_done(void *arg);
static void fork_prepare(void), fork_parent(void), fork_child(void);

static void process_init(void) {
  options_init();
  if (hm_secure) secure_init();
  for (size_t c = 0, i = 0; c <= CLASSES; c++) {
    while (i < DIRECT_N && class_of(direct_size(i)) < c) i++;
    direct_first[c] = (uint16_t)i;
  }
  /* The purger can take what the fast paths hold (thread caches, buffers of
   * remote frees) only with membarrier; HAKMEM_THREAD_CACHE_KB=0 never asks. */
  bool membarrier = os_membarrier_init();
  bool fence = hm_options.thread_cache_kb > 0 && !hm_secure && membarrier;
  tcache_process_init(fence);
  remote_process_init(fence);
  lock_fenced = membarrier && !HM_TSAN;
  pthread_key_create(&heap_key, heap_thread_done);
}


static heap_t *heap_struct_alloc(void) {
  heap_t *h;
  pthread_mutex_lock(&heaps_lock);
  if ((h = heaps_free) != NULL) {
    heaps_free = h->next_free;
  } else {
    enum { sz = (sizeof(heap_t) + 63) & ~(size_t)63 };
    static _Alignas(64) uint8_t first[4 * sz];   /* the first threads' heaps: no mmap at start-up */
    static uint8_t *chunk = first, *chunk_end = first + sizeof first;
    if (!chunk || chunk + sz > chunk_end) {
      size_t csz = 64 * sz;
      chunk = os_map(csz);
      chunk_end = chunk ? chunk + csz : NULL;
    }
    if (chunk) {
      h = (heap_t *)chunk;
      chunk += sz;
      atomic_store_explicit(&h->next_all, atomic_load_explicit(&heaps_all, memory_order_relaxed), memory_order_relaxed);
      atomic_store_explicit(&heaps_all, h, memory_order_release);
    }
  }
  pthread_mutex_unlock(&heaps_lock);
  return h;
}

/* A parked heap (heap_park), as its last owner left it, or NULL.  Not for a
 * thread whose exit already parked its own: it would take a heap with memory
 * where its destructor no longer runs. */
static heap_t *heap_unpark(void) {
  if (thread_exited) return NULL;
  pthread_mutex_lock(&heaps_lock);
  heap_t *h = parked;
  if (h) {
    parked = h->next_free;
    parked_count--;
    atomic_store_explicit(&h->parked_ms, 0, memory_order_relaxed);
  }
  pthread_mutex_unlock(&heaps_lock);
  return h;
}

heap_t *heap_made(void) {
  heap_t *h = heap_struct_alloc();
  if (!h) return NULL;
  lock_raw(h);                       /* the purger may be looking at a recycled struct */
  memset(h, 0, HEAP_RESET_SIZE);
  for (size_t c = 0; c <= CLASSES; c++) atomic_store_explicit(&h->current[c], &hm_page_empty.list, memory_order_relaxed);
  for (size_t c = 0; c < CLASSES; c++) set_current(h, c, &hm_page_empty);
  if (hm_slow_mode)                  /* (set_direct leaves them) */
    for (size_t i = 0; i < DIRECT_N; i++) atomic_store_explicit(&h->direct[i], &hm_page_empty.list, memory_order_relaxed);
  h->rand = os_random() | 1;
  static _Atomic unsigned heaps_made;
  h->rb_slot = (uint8_t)(atomic_fetch_add_explicit(&heaps_made, 1, memory_order_relaxed) % RB_SLOTS);
  tcache_init(h);
  for (size_t c = TC_MIN; c < CLASSES; c++)       /* (a recycled struct has them) */
    if (tcache_fast(c) && atomic_load_explicit(&h->direct[direct_first[c]], memory_order_relaxed) != &h->tc[c - TC_MIN].l)
      set_direct(h, c, &h->tc[c - TC_MIN].l);
  h->ticks = HEAP_TICKS;
  decay_reset(&h->decay);
  h->live = true;
  atomic_store_explicit(&h->parked_ms, 0, memory_order_relaxed);
  atomic_store_explicit(&h->idle, 0, memory_order_relaxed);
  remote_open(h);
  unlock_raw(h);
  return h;
}

void heap_process_ready(void) { pthread_once(&process_once, process_init); }

heap_t *heap_get(void) {
  heap_t *h = hm_tls_heap;
  if (h != &hm_heap_empty) return h;
  pthread_once(&process_once, process_init);
  if (!(h = heap_unpark()) && !(h = heap_made())) return NULL;
  hm_assert(h->live && !atomic_load_explicit(&h->parked_ms, memory_order_relaxed));
  hm_tls_heap = h;                   /* before anything below may allocate */
  stat_inc(STAT_THREADS);
  pthread_setspecific(heap_key, h);
  /* A second thread: start the purger on this malloc's way out.  Or have it
   * watch this heap: asleep, with every other heap found idle, it would not
   * look at this one until it is armed again, and a thread that allocates,
   * is sent its blocks back and then waits would keep them (test_purge). */
  purge_watch();
  if (!atomic_exchange(&handlers_registered, 1)) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(purge_exit);
  }
  return h;
}

/* A heap whose thread left, its pages collected: empty segments leave it,
 * and without the purger what is due is purged now, and retired segments
 * unmapped (no thread may call for them). */
static void heap_give_back(heap_t *h) {
  hm_assert(heap_held(h));
  if (!purge_running()) segment_purge_due(h, PURGE_IDLE, NULL);
  for (segment_t *s = h->segments, *next; s; s = next) {
    next = s->next;
    if (s->used_slices == 1) segment_release_empty(h, s);
  }
  if (!purge_running()) segment_retired_unmap();
}

/* Free every page of h that is empty (its caches, parked pages and the
 * frees of other threads collected first), and the segments left empty. */
void heap_drain(heap_t *h) {
  hm_assert(heap_held(h));
  hm_validate(h);
  tcache_flush(h);
  /* 1. no more deliveries into h->delayed */
  for (page_t *pg = h->full.first; pg; pg = pg->next) page_set_tf_state(pg, TF_NORMAL);
  /* 2. frees already delivered */
  heap_collect_delayed(h);
  /* 3. collect remote frees everywhere; free empty pages */
  heap_collect_all(h);
  for (page_t *pg = h->full.first, *next; pg; pg = next) {
    next = pg->next;
    page_collect(pg);
    page_set_flags(pg, pg->flags & (uint8_t)~PAGE_FULL);
    if (page_used(pg) == 0) { pageq_remove(&h->full, pg); segment_page_free(pg); }
  }
  hm_assert(h->spare_slices == 0 && !atomic_load_explicit(&h->delayed, memory_order_relaxed));
  /* 4. empty segments leave; the rest are abandoned, each unlinked from the
   * heap before it joins the global list (it cannot be on both).  Their free
   * slices stay resident for the delay of abandoned segments, for a thread
   * that starts soon to take over; the purger purges them when due. */
  heap_give_back(h);
}

/* Drain h, and abandon the segments that still hold live blocks so that
 * live threads can reclaim them. */
static void heap_done(heap_t *h) {
  heap_drain(h);
  uint64_t pending = 0;
  while (h->segments) {
    segment_t *s = h->segments;
    segment_unlink(h, s);
    hm_assert(s->heap == h && s->used_slices != 1);   /* (the empty ones left above) */
    uint64_t due = segment_abandon(s);
    if (due && (!pending || due < pending)) pending = due;
  }
  if (pending) purge_arm(pending);
}

/* Give h back for good: what it holds goes to its segments, which are freed
 * or abandoned, and the struct to heaps_free.  The calling thread acts as
 * h's owner meanwhile (h is its own exiting heap, or one taken off the
 * parked list). */
static void heap_release(heap_t *h) {
  heap_t *self = hm_tls_heap;
  hm_tls_heap = h;
  remote_close(h);                   /* (before the lock: it frees) */
  lock_raw(h);
  heap_done(h);
  hm_assert(!h->segments && h->fit_map[0] == 0 && h->fit_map[1] == 0);   /* nothing left */
  heap_gone(h);
  unlock_raw(h);
  hm_tls_heap = self;
  heap_recycle(h);
}

/* (h locked) h holds nothing any more: the purger passes it by. */
void heap_gone(heap_t *h) {
  hm_assert(heap_held(h));
  h->live = false;
  atomic_store_explicit(&h->idle, 1, memory_order_relaxed);
}

void heap_recycle(heap_t *h) {
  pthread_mutex_lock(&heaps_lock);
  h->next_free = heaps_free;
  heaps_free = h;
  pthread_mutex_unlock(&heaps_lock);
}

/* An exiting thread's heap waits, whole, for the next thread that needs one
 * (heap_get): its segments and pages stay its own, other threads' frees of
 * its blocks reach it as before (its inbox stays open), and the purger trims
 * it as a quiet heap from its first look, a purge delay after the parking.
 * A thread that starts and ends in a moment (a pool's job, a round of
 * workers) then costs no abandoning and reclaiming of segments, and its
 * successor no refault of purged memory.  The caches go
 * back to their pages first, and empty pages to their segments.  At most
 * PARK_MAX wait, each at most PARK_MS (the purger releases it then):
 * beyond, the one parked longest is released. */
#define PARK_MAX 16
#define PARK_MS  1000
static void heap_park(heap_t *h) {
  lock_raw(h);
  hm_validate(h);
  tcache_flush(h);
  heap_collect_all(h);
  segment_purge_reset_delay(h);
  heap_give_back(h);
  hm_validate(h);
  uint64_t now = os_now_ms(), look = decay_due(&h->decay, now);
  atomic_store_explicit(&h->parked_ms, now, memory_order_relaxed);
  unlock_raw(h);
  hm_tls_heap = &hm_heap_empty;      /* (the next thread may take it from here on) */
  heap_t *oldest = NULL;
  pthread_mutex_lock(&heaps_lock);
  h->next_free = parked;
  parked = h;
  if (++parked_count > PARK_MAX) {   /* the list is full: the oldest goes for good */
    heap_t **p = &parked;
    while ((*p)->next_free) p = &(*p)->next_free;
    oldest = *p;
    *p = NULL;
    parked_count--;
  }
  pthread_mutex_unlock(&heaps_lock);
  if (oldest) heap_release(oldest);
  purge_start_now();                 /* (if it does not run) */
  purge_arm(look);                   /* to take in other threads' late frees; its pass
                                        also schedules the release (heap_parked_tidy) */
}

/* (the purger) Release the heaps parked longer than PARK_MS: a program that
 * no longer starts threads can adopt their segments.  The next deadline, 0
 * if none is parked. */
uint64_t heap_parked_tidy(uint64_t now) {
  for (;;) {
    pthread_mutex_lock(&heaps_lock);
    heap_t **p = &parked, *h = NULL;
    uint64_t next = 0;
    for (; *p; p = &(*p)->next_free) {
      uint64_t due = atomic_load_explicit(&(*p)->parked_ms, memory_order_relaxed) + PARK_MS;
      if (now >= due) { h = *p; break; }
      if (!next || due < next) next = due;
    }
    if (h) {
      *p = h->next_free;
      parked_count--;
    }
    pthread_mutex_unlock(&heaps_lock);
    if (!h) return next;
    heap_release(h);
  }
}

static void heap_thread_done(void *arg) {
  heap_t *h = arg;
  if (!h || h == &hm_heap_empty) return;
  userheap_thread_done(h);
  stat_dec(STAT_THREADS);
  purge_thread_exit();               /* (first: the heap is given back as without the purger) */
  if (hm_secure) secure_flush(h);
  remote_flush(h);
  thread_exited = true;
  heap_park(h);
}

/* fork: take every global lock so the child inherits consistent state.  The
 * child keeps only the forking thread; the heaps of the other threads stay as
 * they were (their blocks remain valid and may be freed, as remote frees).
 *
 * As glibc's own malloc does: no locks when the process is single-threaded
 * (no other thread can hold one; a signal handler's fork during fork would
 * wait for itself), and stdio's list lock before ours.  glibc's fork takes
 * that lock after the atfork handlers, while fflush(NULL) holds it and waits
 * for a FILE whose owner allocates inside getline: taken after ours, fork
 * would wait for fflush, which waits for getline, which waits for fork.
 * Taken first, it is free again only once the child exists; glibc's fork
 * takes it once more (it is recursive) and resets it in the child. */
extern void _IO_list_lock(void) __attribute__((weak));
extern void _IO_list_unlock(void) __attribute__((weak));
extern void _IO_list_resetlock(void) __attribute__((weak));
static __thread bool fork_locked;      /* this thread's fork took the locks */

static void fork_prepare(void) {
  if (!multi_threaded()) return;
  fork_locked = true;
  if (_IO_list_lock) _IO_list_lock();
  purge_fork_prepare();
  pthread_mutex_lock(&heaps_lock);
  segment_fork_prepare();
  profile_fork_prepare();
}
static void fork_parent(void) {
  if (!fork_locked) return;
  fork_locked = false;
  profile_fork_parent();
  segment_fork_parent();
  pthread_mutex_unlock(&heaps_lock);
  purge_fork_parent();
  if (_IO_list_unlock) _IO_list_unlock();
}
static void fork_child(void) {
  purge_fork_child(fork_locked);
  profile_fork_child(fork_locked);
  if (fork_locked) {
    fork_locked = false;
    segment_fork_child();
    pthread_mutex_unlock(&heaps_lock);
    if (_IO_list_resetlock) _IO_list_resetlock();
  }
  /* A thread that no longer exists may have been handing one of our blocks
   * over (TF_BUSY) at the fork; it never finishes, so finish for it. */
  heap_t *h = hm_tls_heap;
  if (h == &hm_heap_empty) return;
  for (page_t *pg = h->full.first; pg; pg = pg->next) {
    uintptr_t tf = atomic_load_explicit(&pg->thread_free, memory_order_relaxed);
    if ((tf & TF_MASK) == TF_BUSY) atomic_store_explicit(&pg->thread_free, tf & ~(uintptr_t)TF_MASK, memory_order_relaxed);
  }
}
