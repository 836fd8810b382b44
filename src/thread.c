/* thread.c — a heap's life: made at its thread's first malloc (or for a
 * program, userheap.c), parked whole at its thread's exit for the next thread,
 * released for good when it waits too long, and what it gives back meanwhile
 * (malloc_trim, the purger's trim of a quiet heap).  Also the process's
 * set-up and the fork handlers. */
#include "hot.h"
#include "options.h"
#include "stats.h"

#include <stdlib.h>
#include <string.h>

__thread heap_t *hm_tls_heap = &hm_heap_empty;
heap_t hm_heap_empty = { .direct = { [0 ... DIRECT_N - 1] = &hm_page_empty.list },
                         .current = { [0 ... CLASSES] = &hm_page_empty.list },
                         .out = { [0 ... RB_SLOTS] = RB_NONE } };

static pthread_once_t process_once = PTHREAD_ONCE_INIT;
static pthread_key_t heap_key;
static pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static heap_t *_Atomic heaps_all; /* every heap struct ever made (for the purger) */
static heap_t *heaps_free;       /* structs of exited threads, for reuse */
static heap_t *parked;           /* heaps of exited threads, whole, for the next threads */
static unsigned parked_count;
static _Atomic int handlers_registered;
static __thread bool thread_exited; /* its heap was parked or released (heap_thread_done) */

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
      if (page_used(pg) == 0) heap_page_free(h, pg);
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
  heap_page_free(h, pg);
  stat_os(STAT_TRIMMED);
  return true;
}

/* The purger (h locked, its owner perhaps running fast paths): give back the
 * pages no thread can reach any more (page_unreachable), then purge what is
 * due.  First its quarantine (hardened mode) and thread caches are emptied
 * (a quiet thread does not need them).  Blocks handed over on the delayed
 * list count as free; those of pages still in use go back on the list for
 * the owner.  True if it freed a page. */
bool heap_trim_idle(heap_t *h) {
  hm_assert(heap_held(h) && h->live);
  bool freed = false;
  if (hm_secure) hm_free_quarantine_quiet(h);   /* its quarantined blocks back to their owners */
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



/* ---- heap life cycle ------------------------------------------------------ */

heap_t *heap_first(void) { return atomic_load_explicit(&heaps_all, memory_order_acquire); }

static void heap_thread_done(void *arg);
static void fork_prepare(void), fork_parent(void), fork_child(void);

static void process_init(void) {
  options_init();
  if (hm_secure) secure_init();
  /* The purger can take what the fast paths hold (thread caches, buffers of
   * remote frees) only with membarrier; HAKMEM_THREAD_CACHE_KB=0 never asks. */
  bool membarrier = os_membarrier_init();
  bool fence = hm_options.thread_cache_kb > 0 && !hm_secure && membarrier;
  tcache_process_init(fence);
  remote_process_init(fence);
  heap_process_init(membarrier);
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
static heap_t *parked_take(void) {
  if (thread_exited) return NULL;
  pthread_mutex_lock(&heaps_lock);
  heap_t *h = parked;
  if (h) {
    parked = h->next_free;
    parked_count--;
    atomic_store_explicit(&h->parked_ms, 0, memory_order_relaxed);
    quiet_reset(&h->quiet);
  }
  pthread_mutex_unlock(&heaps_lock);
  return h;
}

/* The purger's lock of h if h is still parked (else false): parked_take
 * takes heaps_lock before the next owner's lock_raw looks at other_in. */
bool heap_trylock_parked(heap_t *h) {
  pthread_mutex_lock(&heaps_lock);
  bool got = atomic_load_explicit(&h->parked_ms, memory_order_relaxed) != 0 && heap_trylock_unowned(h);
  pthread_mutex_unlock(&heaps_lock);
  return got;
}

heap_t *heap_made(void) {
  heap_t *h = heap_struct_alloc();
  if (!h) return NULL;
  heap_lock_raw(h);                  /* the purger may be looking at a recycled struct */
  memset(h, 0, HEAP_RESET_SIZE);
  atomic_store_explicit(&h->user, false, memory_order_relaxed);
  h->rand = os_random() | 1;
  static _Atomic unsigned heaps_made;
  h->rb_slot = (uint8_t)(atomic_fetch_add_explicit(&heaps_made, 1, memory_order_relaxed) % RB_SLOTS);
  for (size_t i = 0; i <= RB_SLOTS; i++) atomic_store_explicit(&h->out[i], RB_NONE, memory_order_relaxed);
  tcache_init(h);
  heap_direct_init(h);
  h->ticks = HEAP_TICKS;
  decay_reset(&h->decay);
  h->live = true;
  atomic_store_explicit(&h->parked_ms, 0, memory_order_relaxed);
  atomic_store_explicit(&h->idle, 0, memory_order_relaxed);
  quiet_reset(&h->quiet);
  remote_open(h);
  heap_unlock_raw(h);
  return h;
}

void heap_process_ready(void) { pthread_once(&process_once, process_init); }

heap_t *heap_get(void) {
  heap_t *h = hm_tls_heap;
  if (h != &hm_heap_empty) return h;
  pthread_once(&process_once, process_init);
  if (!(h = parked_take()) && !(h = heap_made())) return NULL;
  hm_assert(h->live && !atomic_load_explicit(&h->parked_ms, memory_order_relaxed));
  hm_tls_heap = h;                   /* before anything below may allocate */
  if (hm_profiling) profile_heap_taken(h);
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
  if (!purge_running()) segcache_retired_unmap();
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
    uint64_t due = abandon_push(s);
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
  heap_lock_raw(h);
  heap_done(h);
  hm_assert(!h->segments && h->fit_map[0] == 0 && h->fit_map[1] == 0);   /* nothing left */
  heap_gone(h);
  heap_unlock_raw(h);
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
  heap_lock_raw(h);
  hm_validate(h);
  tcache_flush(h);
  heap_collect_all(h);
  segment_purge_reset_delay(h);
  heap_give_back(h);
  hm_validate(h);
  uint64_t now = os_now_ms(), look = decay_due(&h->decay, now);
  heap_unlock_raw(h);
  hm_tls_heap = &hm_heap_empty;      /* (the next thread may take it from here on) */
  heap_t *oldest = NULL;
  pthread_mutex_lock(&heaps_lock);
  atomic_store_explicit(&h->parked_ms, now, memory_order_relaxed);   /* (out of it: heap_trylock_parked) */
  h->next_free = parked;
  parked = h;
  if (++parked_count > PARK_MAX) {   /* the list is full: the oldest goes for good */
    heap_t **p = &parked;
    while ((*p)->next_free) p = &(*p)->next_free;
    oldest = *p;
    *p = NULL;
    parked_count--;
    atomic_store_explicit(&oldest->parked_ms, 0, memory_order_relaxed);
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
      atomic_store_explicit(&h->parked_ms, 0, memory_order_relaxed);
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
  if (hm_secure) hm_free_quarantine(h);
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

/* The segment modules' locks (segcache.c takes segmap.c's inside its own). */
static void segments_fork_prepare(void) {
  registry_fork_prepare();
  abandon_fork_prepare();
  segcache_fork_prepare();
  huge_fork_prepare();
  segmap_fork_prepare();
}
static void segments_fork_parent(void) {
  segmap_fork_parent();
  huge_fork_parent();
  segcache_fork_parent();
  abandon_fork_parent();
  registry_fork_parent();
}

static void fork_prepare(void) {
  if (!multi_threaded()) return;
  fork_locked = true;
  if (_IO_list_lock) _IO_list_lock();
  purge_fork_prepare();
  pthread_mutex_lock(&heaps_lock);
  segments_fork_prepare();
  profile_fork_prepare();
}
static void fork_parent(void) {
  if (!fork_locked) return;
  fork_locked = false;
  profile_fork_parent();
  segments_fork_parent();
  pthread_mutex_unlock(&heaps_lock);
  purge_fork_parent();
  if (_IO_list_unlock) _IO_list_unlock();
}
static void fork_child(void) {
  purge_fork_child(fork_locked);
  profile_fork_child(fork_locked);
  if (fork_locked) {
    fork_locked = false;
    segments_fork_parent();         /* (the forking thread holds them) */
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
