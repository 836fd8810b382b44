/* purge.c — the purger: a background thread that returns the memory of
 * threads that stopped calling the allocator.
 *
 * A heap gives memory back only from its owner's slow paths.  A worker that
 * frees a burst of blocks and then waits for work would keep all of it: its
 * emptied slices are never purged, and the blocks other threads freed into
 * its pages are never even collected.  So every so often the purger looks at
 * each heap; one whose slow paths have not run for its wait (below) it locks
 * and trims (heap_trim_idle): pages no thread can reach go back to their
 * segments, and free slices to the OS once their delay has passed.  The
 * owner's fast paths take no lock and need none: the purger leaves alone the
 * pages they can reach.
 *
 * The thread runs while it has work in a process where threads allocate: it
 * starts at a malloc slow path once two threads have had a heap for 10 ms
 * (one more thread would cost a single-threaded program glibc's
 * single-thread fast paths), goes on while two have one, and once one thread
 * is left, ends by itself when it has nothing more to watch (the heaps the
 * others parked, their segments' purges: within about two seconds).  The
 * exit of the last thread with a heap stops it first and joins it, so a
 * program whose main thread called pthread_exit() ends with its last thread,
 * as glibc's rules have it, and so does exit() (an atexit handler).  It
 * sleeps while nothing needs watching; a scheduled purge, a remote free into a
 * trimmed heap, or a trimmed heap that is used again wakes it (purge_arm).
 * HAKMEM_BACKGROUND=0 turns it off. */
#include "internal.h"
#include "options.h"
#include "stats.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

enum { OFF, WANTED, STARTING, RUNNING, STOPPING, FAILED };
static _Atomic int state;
_Atomic int hm_purge_wanted;                 /* state == WANTED, for a cheap test */
static pthread_t purger;                     /* (state RUNNING or STOPPING) */
static pthread_t left;                       /* a purger that left by itself, */
static _Atomic bool unjoined;                /* not joined yet: before the next one starts */
static __thread bool in_purger;              /* this thread is the purger */

static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond;             /* on CLOCK_MONOTONIC, made at start */
static _Atomic uint64_t wake_ms;             /* next look; 0: sleep until armed */
static bool armed;                           /* (wake_lock) purge_arm moved wake_ms earlier */
static bool stop;                            /* (wake_lock) purge_stop: return */
static bool cond_made;                       /* wake_cond made: once (a thread may be signalling
                                                it), and again in a fork's child (whose copy holds
                                                the parent's purger as a waiter) */
static pthread_mutex_t pass_lock = PTHREAD_MUTEX_INITIALIZER;   /* a pass vs. fork */

#define POLL_MAX_MS 1000

/* glibc's flag (2.32 on); elsewhere: two threads have had a heap. */
extern char __libc_single_threaded __attribute__((weak));
bool multi_threaded(void) {
  if (&__libc_single_threaded) return !__libc_single_threaded;
  return atomic_load_explicit(&hm_stat_peak[STAT_THREADS], memory_order_relaxed) >= 2;
}

static uint64_t poll_base(void) {
  uint64_t d = (uint64_t)hm_options.purge_delay_ms;
  return d < 5 ? 5 : d > POLL_MAX_MS ? POLL_MAX_MS : d;
}

/* Two threads have heaps now: the purger's start condition. */
bool heaps_several(void) { return atomic_load_explicit(&hm_stat[STAT_THREADS], memory_order_relaxed) >= 2; }

/* The purger starts once two heaps have lived START_AFTER_MS: threads that
 * come and go in short batches (a pool's jobs, a round of workers) would
 * otherwise start and stop it with every batch. */
#define START_AFTER_MS 10
static _Atomic uint64_t wanted_ms;             /* (WANTED) since */

void purge_want(void) {
  int st = OFF;
  if (atomic_load_explicit(&state, memory_order_relaxed) == OFF && hm_options.background && heaps_several() &&
      atomic_compare_exchange_strong(&state, &st, WANTED)) {
    atomic_store_explicit(&wanted_ms, os_coarse_ms(), memory_order_relaxed);
    atomic_store_explicit(&hm_purge_wanted, 1, memory_order_relaxed);
  }
}

bool purge_running(void) { return atomic_load_explicit(&state, memory_order_relaxed) == RUNNING; }

/* Have the purger look at the heaps by when (closely: and watch closely
 * again, its poll back at the start). */
static void wake_by(uint64_t when, bool closely) {
  if (atomic_load_explicit(&state, memory_order_acquire) != RUNNING) {
    purge_want();
    return;                                  /* its first pass looks at everything */
  }
  uint64_t w = atomic_load_explicit(&wake_ms, memory_order_relaxed);
  if (w && w <= when) return;                /* it looks by then anyway */
  pthread_mutex_lock(&wake_lock);
  w = atomic_load_explicit(&wake_ms, memory_order_relaxed);
  if (!w || when < w) {
    atomic_store_explicit(&wake_ms, when, memory_order_relaxed);
    armed |= closely;
    pthread_cond_signal(&wake_cond);
  }
  pthread_mutex_unlock(&wake_lock);
}

void purge_arm(uint64_t when) {
  hm_assert(when != 0);                      /* (0 means "no deadline") */
  wake_by(when, true);
}

/* A new heap (heap_get): a second one wants the purger started; and the
 * purger asleep with nothing to watch would not look at it until armed, so
 * have it look after one poll; otherwise its next look sees the heap anyway.
 * (Not purge_arm: a thread starting is no reason to watch closely again, and
 * a program that starts thousands a second, larson-like, would have it pass
 * over every heap every few milliseconds.) */
void purge_watch(void) {
  if (atomic_load_explicit(&state, memory_order_acquire) != RUNNING) purge_want();
  else if (!atomic_load_explicit(&wake_ms, memory_order_relaxed)) wake_by(os_now_ms() + poll_base(), false);
}

static uint64_t min_due(uint64_t a, uint64_t b) { return !a ? b : !b ? a : a < b ? a : b; }

/* ---- when a quiet heap is trimmed ------------------------------------------
 * A heap is trimmed once its slow paths have not run for its wait, at first
 * the poll's base.  A thread that comes back within QUIET_MAX_MS of a trim
 * (one that takes turns with others on a lock, as an interpreter's threads
 * on its global lock do) was trimmed for nothing, its caches and pages to be
 * filled again: its wait doubles, up to QUIET_MAX_MS.  One that stays away
 * longer has it halved.  A heap trimmed again before its thread is back
 * (other threads' frees woke it) waits twice as long each time. */
#define QUIET_MAX_MS POLL_MAX_MS

static uint64_t quiet_wait(const quiet_t *q) {
  uint64_t w = atomic_load_explicit(&q->wait_ms, memory_order_relaxed);
  return w ? w : poll_base();
}

/* When h, quiet since q->since_ms, is due for a trim. */
static uint64_t quiet_due(const quiet_t *q) {
  uint64_t t = atomic_load_explicit(&q->trimmed_ms, memory_order_relaxed);
  uint32_t k = atomic_load_explicit(&q->retrims, memory_order_relaxed);
  uint64_t w = quiet_wait(q) << (k < 7 ? k : 7);
  return (t > q->since_ms ? t : q->since_ms) + (w < QUIET_MAX_MS ? w : QUIET_MAX_MS);
}

/* (purger, h locked) h was trimmed now. */
static void quiet_trimmed(quiet_t *q, uint64_t now) {
  if (atomic_load_explicit(&q->trimmed_ms, memory_order_relaxed))
    atomic_store_explicit(&q->retrims, atomic_load_explicit(&q->retrims, memory_order_relaxed) + 1, memory_order_relaxed);
  atomic_store_explicit(&q->trimmed_ms, now, memory_order_relaxed);
}

void purge_owner_back(heap_t *h) {
  hm_assert(heap_held(h));
  quiet_t *q = &h->quiet;
  uint64_t now = os_now_ms(), t = atomic_load_explicit(&q->trimmed_ms, memory_order_relaxed), w = quiet_wait(q);
  w = now < t + QUIET_MAX_MS ? 2 * w : w / 2;
  w = w < poll_base() ? poll_base() : w > QUIET_MAX_MS ? QUIET_MAX_MS : w;
  atomic_store_explicit(&q->wait_ms, (uint32_t)w, memory_order_relaxed);
  atomic_store_explicit(&q->retrims, 0, memory_order_relaxed);
  atomic_store_explicit(&q->trimmed_ms, 0, memory_order_relaxed);
}

/* One look at every heap, the parked ones, the abandoned segments and the
 * caches; returns when something is due next (0: nothing), and in *watch
 * when to look again at heaps that were busy (0: none was).  *poll backs off
 * while nothing needs doing. */
static uint64_t pass(uint64_t *poll, uint64_t *watch) {
  pthread_mutex_lock(&pass_lock);
  uint64_t now = os_now_ms(), next = 0;
  bool trimmed = false, watching = false;
  for (heap_t *h = heap_first(); h; h = atomic_load_explicit(&h->next_all, memory_order_acquire)) {
    if (atomic_load_explicit(&h->idle, memory_order_relaxed)) continue;
    uint64_t ops = atomic_load_explicit(&h->slow_ops, memory_order_relaxed);
    bool parked = atomic_load_explicit(&h->parked_ms, memory_order_relaxed) != 0;
    if (ops != h->quiet.seen_ops) {            /* busy: it trims itself, unless its thread parked it */
      h->quiet.seen_ops = ops;
      h->quiet.since_ms = now;
      if (!parked) { watching = true; continue; }
    } else if (!parked) {
      uint64_t due = quiet_due(&h->quiet);
      if (now < due) { next = min_due(next, due); continue; }
    }
    if (!(parked ? heap_trylock_parked(h) : heap_trylock(h))) { watching = true; continue; }
    hm_assert(heap_held(h) && in_purger);
    /* Idle before the trim looks at what other threads sent the heap (its
     * inbox, delayed list, pages' remote lists): one that sends after the
     * look sees the mark and wakes the purger (heap_idle).  Marked after the
     * look, a send in between waited for the owner's next slow path. */
    atomic_store_explicit(&h->idle, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (h->live) {
      trimmed |= heap_trim_idle(h);
      if (!parked) quiet_trimmed(&h->quiet, now);
    }
    if (h->live && h->next_purge_ms) {
      next = min_due(next, h->next_purge_ms);
      atomic_store_explicit(&h->idle, 0, memory_order_relaxed);
    }
    heap_unlock(h);
    hm_assert(!heap_held(h));
  }
  next = min_due(next, heap_parked_tidy(now));
  size_t abandoned;                          /* (their late remote frees reach nobody) */
  next = min_due(next, abandon_tidy(false, &abandoned));
  watching |= abandoned > 0;
  next = min_due(next, segcache_decay());
  uint64_t huge;
  huge_cache_purge(false, &huge);
  next = min_due(next, huge);
  pthread_mutex_unlock(&pass_lock);
  if (trimmed) *poll = poll_base();
  else if (*poll < POLL_MAX_MS) *poll *= 2;
  *watch = watching ? now + *poll : 0;
  return next;
}

/* One thread with a heap is left, and nothing is due: the purger ends by
 * itself (unless that thread's exit is stopping it already), to be joined
 * by whoever starts the next one or sees the last heap go (reap). */
static bool leave(void) {
  int st = RUNNING;
  hm_assert(in_purger);
  if (!atomic_compare_exchange_strong(&state, &st, STOPPING)) return false;
  left = pthread_self();
  atomic_store_explicit(&unjoined, true, memory_order_release);
  atomic_store_explicit(&wake_ms, 0, memory_order_relaxed);
  atomic_store_explicit(&state, OFF, memory_order_release);
  if (heaps_several()) purge_want();           /* a thread came meanwhile: wanted again */
  return true;
}

/* Join a purger that left by itself (no heap lock held). */
static void reap(void) {
  if (!atomic_exchange_explicit(&unjoined, false, memory_order_acquire)) return;
  int cancel;                                /* (join is a cancellation point) */
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
  pthread_join(left, NULL);
  pthread_setcancelstate(cancel, NULL);
}

static void *purger_main(void *arg) {
  (void)arg;
  in_purger = true;
  prctl(PR_SET_NAME, "hakmem-purge");
  uint64_t poll = poll_base();
  for (;;) {
    pthread_mutex_lock(&wake_lock);
    for (;;) {
      if (stop) {
        pthread_mutex_unlock(&wake_lock);
        return NULL;                             /* purge_stop joins this thread */
      }
      uint64_t w = atomic_load_explicit(&wake_ms, memory_order_relaxed);
      if (w && os_now_ms() >= w) break;
      if (!w) {
        pthread_cond_wait(&wake_cond, &wake_lock);
      } else {
        struct timespec ts = { (time_t)(w / 1000), (long)(w % 1000) * 1000000L };
        pthread_cond_timedwait(&wake_cond, &wake_lock, &ts);
      }
    }
    atomic_store_explicit(&wake_ms, 0, memory_order_relaxed);
    if (armed) poll = poll_base();             /* something happened: watch closely again */
    armed = false;
    pthread_mutex_unlock(&wake_lock);
    uint64_t watch, next = pass(&poll, &watch);
    if (!next && !heaps_several() && leave()) return NULL;   /* (a busy heap looks after itself) */
    if ((next = min_due(next, watch)) != 0) purge_arm(next);
  }
}

/* Stop the purger and wait until it is gone (no heap lock held). */
static void purge_stop(void) {
  int st = RUNNING;
  hm_assert(!in_purger);                     /* (it would join itself) */
  if (!atomic_compare_exchange_strong(&state, &st, STOPPING)) return;
  pthread_mutex_lock(&wake_lock);
  stop = true;
  pthread_cond_signal(&wake_cond);
  pthread_mutex_unlock(&wake_lock);
  int cancel;                                /* (join is a cancellation point) */
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
  pthread_join(purger, NULL);
  pthread_setcancelstate(cancel, NULL);
  stop = false;
  atomic_store_explicit(&wake_ms, 0, memory_order_relaxed);
  atomic_store_explicit(&state, OFF, memory_order_release);
  if (heaps_several()) purge_want();           /* a thread came meanwhile: wanted again */
}

/* The purger is no longer wanted: one only wanted is not started, a running
 * one is stopped and joined; with while_heaps, not while a thread still has
 * a heap. */
static void unwant(bool while_heaps) {
  for (;;) {
    int st = atomic_load_explicit(&state, memory_order_acquire);
    /* (another thread's pthread_create, or a stop begun: by the purger
     * leaving, or another thread; once OFF, it is joined below) */
    if (st == STARTING || st == STOPPING) { sched_yield(); continue; }
    if (st == WANTED) {
      if (!atomic_compare_exchange_strong(&state, &st, OFF)) continue;
      atomic_store_explicit(&hm_purge_wanted, 0, memory_order_relaxed);
    }
    if (while_heaps && atomic_load_explicit(&hm_stat[STAT_THREADS], memory_order_relaxed)) return;
    if (st == RUNNING) purge_stop();
    reap();
    return;
  }
}

/* A thread with a heap is exiting (its heap no longer counted), before it
 * gives its memory back.  Fewer than two heaps: a purger not started yet is
 * no longer wanted.  None: the purger goes first (this thread joins it), so
 * it never outlives the program's last thread. */
void purge_thread_exit(void) {
  if (in_purger || heaps_several()) return;
  unwant(true);
}

/* HAKMEM_BACKGROUND set at run time: off stops the purger now (the threads
 * then purge in their own slow paths, as with the variable set to 0 at
 * start); on wants it again, to start once two threads have heaps. */
void purge_background_changed(void) {
  if (atomic_load_explicit(&hm_options.background, memory_order_relaxed)) purge_want();
  else unwant(false);
}

/* exit(): the purger goes before the process does.  After the atexit
 * handlers, exit_group ends every thread wherever it is, and valgrind then
 * runs glibc's __libc_freeres, whose frees waited forever for a heap the
 * killed purger had been trimming. */
void purge_exit(void) {
  int st = WANTED;
  if (atomic_compare_exchange_strong(&state, &st, OFF)) atomic_store_explicit(&hm_purge_wanted, 0, memory_order_relaxed);
  else if (st == RUNNING && !in_purger) purge_stop();
  if (!in_purger) reap();
}

/* The purger's thread, state STARTING.  Called where no heap lock is held
 * (pthread_create allocates). */
static void start(void) {
  hm_assert(atomic_load_explicit(&state, memory_order_relaxed) == STARTING && !in_purger);
  atomic_store_explicit(&hm_purge_wanted, 0, memory_order_relaxed);
  reap();
  if (!cond_made) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wake_cond, &ca);
    pthread_condattr_destroy(&ca);
    cond_made = true;
  }
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, 256 << 10);
  sigset_t all, old;                         /* signals are for the program's threads */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&purger, &a, purger_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&a);
  atomic_store_explicit(&state, rc == 0 ? RUNNING : FAILED, memory_order_release);
  if (rc == 0) purge_arm(os_now_ms() + poll_base());
}

/* malloc's slow path (the safe point): start the purger wanted 10 ms ago. */
void purge_start(void) {
  int st = WANTED;
  if (os_coarse_ms() >= atomic_load_explicit(&wanted_ms, memory_order_relaxed) + START_AFTER_MS &&
      atomic_compare_exchange_strong(&state, &st, STARTING))
    start();
}

/* An exiting thread parked its heap and another thread with a heap runs on:
 * the purger must give back what the parked heap holds if no thread takes
 * it, so it starts now (the exiting thread holds no lock). */
void purge_start_now(void) {
  if (!hm_options.background || !atomic_load_explicit(&hm_stat[STAT_THREADS], memory_order_relaxed)) return;
  int st = atomic_load_explicit(&state, memory_order_acquire);
  while ((st == OFF || st == WANTED) && !atomic_compare_exchange_weak(&state, &st, STARTING)) {}
  if (st == OFF || st == WANTED) start();
}

/* malloc_trim: release the parked heaps, trim every other heap now (those
 * not busy in a slow path) and purge everything they and the abandoned
 * segments hold; then, one thread with a heap left, stop the purger. */
void purge_idle_heaps(heap_t *except) {
  pthread_mutex_lock(&pass_lock);
  heap_parked_tidy(UINT64_MAX);              /* parked heaps go for good */
  for (heap_t *h = heap_first(); h; h = atomic_load_explicit(&h->next_all, memory_order_acquire)) {
    if (h == except || !heap_trylock(h)) continue;
    hm_assert(heap_held(h));
    if (h->live) {
      if (hm_secure) hm_free_quarantine_held(h);     /* (its blocks go back as remote frees) */
      heap_trim_idle(h);
      segment_purge_due(h, PURGE_FORCE, NULL);
    }
    heap_unlock(h);
  }
  size_t left;
  abandon_tidy(true, &left);
  pthread_mutex_unlock(&pass_lock);
  /* Nothing is left for the purger to watch: with one thread left it goes
   * now, not after its last look (a program may want to be single-threaded
   * right after joining its threads: unshare(CLONE_NEWUSER)). */
  if (heaps_several() || in_purger) return;
  if (atomic_load_explicit(&state, memory_order_acquire) == RUNNING) purge_stop();
  reap();
}

/* fork: the child has no purger (threads do not survive fork); it starts one
 * again if it becomes multi-threaded. */
void purge_fork_prepare(void) { pthread_mutex_lock(&pass_lock); }
void purge_fork_parent(void) { pthread_mutex_unlock(&pass_lock); }
void purge_fork_child(bool locked) {
  if (locked) pthread_mutex_unlock(&pass_lock);
  pthread_mutex_init(&wake_lock, NULL);
  atomic_store_explicit(&wake_ms, 0, memory_order_relaxed);
  armed = stop = cond_made = false;
  atomic_store_explicit(&unjoined, false, memory_order_relaxed);
  atomic_store_explicit(&hm_purge_wanted, 0, memory_order_relaxed);
  atomic_store_explicit(&state, OFF, memory_order_relaxed);
}
