/* The purger (src/purge.c): memory of threads that stopped calling the
 * allocator is returned while they wait, without corrupting what they hold.
 *
 *  - idle workers: threads build ~120 MB (a third freed by other threads),
 *    free everything and block; RSS must fall back without any malloc_trim
 *    while the main thread does only fast-path work.
 *  - races: threads alternate bursts (with remote frees) and quiet spells of
 *    fast-path malloc/free (of 48 B, and of 4-8 KiB blocks that go through
 *    the thread cache) while keeping verified long-lived blocks, so the
 *    purger trims heaps, and takes their thread caches, while their owners
 *    run fast paths.
 *  - malloc_trim reaches the pages of a waiting thread that other threads
 *    freed (it collects and returns them at once).
 *  - the last remote frees of a thread that then waits, held in its buffer
 *    (src/remote.c), reach their owner, which waits too: its pages return.
 *  - an exited thread's free memory, in segments it left with a few live
 *    blocks, is returned by the purger.
 *
 * The program runs with HAKMEM_PURGE_DELAY_MS=2 (re-executing itself with it
 * before anything is allocated) so that the purger works often. */
#include "test.h"
#include "companion.h"
#include "hakmem.h"
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

TEST_ENV("HAKMEM_PURGE_DELAY_MS=2")

/* ---- idle workers ---------------------------------------------------------------- */
#define IW 4
#define IBLOCKS 20000
static void *iblk[IW][IBLOCKS];
static pthread_barrier_t ibar;

static void *idle_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t r = (uint64_t)id * 7919 + 1;
  for (int i = 0; i < IBLOCKS; i++) {
    uint64_t x = test_rand(&r);
    size_t n = i % 10 == 0 ? 4096 + x % 28000 : 16 + x % 2000;
    if (i % 500 == 0) n = 200000;
    iblk[id][i] = hakmem_malloc(n);
    if (iblk[id][i]) memset(iblk[id][i], id + 1, n);
  }
  pthread_barrier_wait(&ibar);                 /* main reads the peak */
  pthread_barrier_wait(&ibar);
  int next = (id + 1) % IW;                    /* a third of the frees are remote */
  for (int i = 0; i < IBLOCKS; i++) hakmem_free(i % 3 ? iblk[id][i] : iblk[next][i]);
  pthread_barrier_wait(&ibar);                 /* everything is free */
  pthread_barrier_wait(&ibar);                 /* wait, calling nothing, until main is done */
  return NULL;
}

/* How long the memory may take to go back: two checks of a heap's delay (a
 * free slice is aged at one and purged at the next, segment_purge_due), the
 * delay grown to its 1 s cap (decay.c) when the fills below reuse slices
 * purged a moment before, as they sometimes do, and the purger's wait for a
 * quiet heap (up to 1 s). */
#define RSS_BACK_MS 5000

TEST(rss_falls_back_while_threads_wait) {
  long base = test_rss_kib();
  pthread_barrier_init(&ibar, NULL, IW + 1);
  pthread_t th[IW];
  for (int i = 0; i < IW; i++) pthread_create(&th[i], NULL, idle_worker, (void *)(intptr_t)i);
  pthread_barrier_wait(&ibar);
  long peak = test_rss_kib();
  pthread_barrier_wait(&ibar);
  pthread_barrier_wait(&ibar);
  uint64_t t0 = test_now_ms(), t = t0;
  long now = test_rss_kib();
  while (t - t0 < RSS_BACK_MS) {
    now = test_rss_kib();
    if (now - base < 16 * 1024) break;
    for (int i = 0; i < 100; i++) {            /* fast paths only: never reaches a slow path */
      void *p = hakmem_malloc(64);
      hakmem_free(p);
    }
    test_sleep_ms(2);
    t = test_now_ms();
  }
  pthread_barrier_wait(&ibar);
  for (int i = 0; i < IW; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&ibar);
  NOTE("RSS %ld KiB before, %ld KiB at the peak, %ld KiB %llu ms after %d waiting threads freed everything",
       base, peak, now, (unsigned long long)(t - t0), IW);
  CHECKF(peak - base > 64 * 1024, "the workload should hold > 64 MB at its peak, held %ld KiB", peak - base);
  if (!test_sanitized())
    CHECKF(now - base < 16 * 1024, "%ld KiB above the start still resident %llu ms after the threads freed "
           "everything and went quiet", now - base, (unsigned long long)(t - t0));
}

/* ---- the purger against owners' fast paths ---------------------------------------- */
#define RW 4
#define KEEP 64
#define MAILBOX 4096
static _Atomic(uintptr_t) mailbox[MAILBOX];
static atomic_int race_errors;
#define RACER_LIFE_MS 300                      /* then a new thread: the purger has learnt nothing of it */

/* A kept block describes itself: its size and tag, then a pattern of both. */
static void stamp(unsigned char *p, size_t n, uint64_t tag) {
  memcpy(p, &n, sizeof n);
  memcpy(p + 8, &tag, sizeof tag);
  for (size_t i = 16; i < n - 1; i += 61) p[i] = (unsigned char)(tag + i);
  p[n - 1] = (unsigned char)(tag >> 3);
}
static int verify(const unsigned char *p) {
  size_t n;
  uint64_t tag;
  memcpy(&n, p, sizeof n);
  memcpy(&tag, p + 8, sizeof tag);
  if (n < 24 || n > 8192) return 0;
  for (size_t i = 16; i < n - 1; i += 61) if (p[i] != (unsigned char)(tag + i)) return 0;
  return p[n - 1] == (unsigned char)(tag >> 3);
}

static void *racer(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t r = (uint64_t)id * 104729 + 7;
  unsigned char *keep[KEEP] = {0};
  unsigned char *ring[8] = {0};               /* the quiet spell's cached-size blocks */
  void *burst[512];
  uint64_t round = 0, end = test_now_ms() + RACER_LIFE_MS;
  while (test_now_ms() < end) {
    round++;
    /* burst: allocate, hand a third to the mailbox, free the rest, renew some kept blocks */
    int nb = 64 + (int)(test_rand(&r) % 448);
    for (int i = 0; i < nb; i++) {
      uint64_t x = test_rand(&r);
      size_t n = 16 + (x % 8 == 0 ? x % 60000 : x % 1500);
      burst[i] = hakmem_malloc(n);
      if (!burst[i]) { atomic_fetch_add(&race_errors, 1); return NULL; }
      memset(burst[i], 0xa5, 16);
    }
    for (int i = 0; i < nb; i++) {
      if (i % 3 == 0) {
        uintptr_t old = atomic_exchange(&mailbox[test_rand(&r) % MAILBOX], (uintptr_t)burst[i]);
        if (old) hakmem_free((void *)old);         /* usually another thread's block */
      } else {
        hakmem_free(burst[i]);
      }
    }
    for (int k = (int)(round % 4); k < KEEP; k += 4) {       /* renew a quarter of the kept blocks */
      if (keep[k] && !verify(keep[k])) atomic_fetch_add(&race_errors, 1);
      hakmem_free(keep[k]);
      size_t n = 24 + test_rand(&r) % 8000;
      if (!(keep[k] = hakmem_malloc(n))) { atomic_fetch_add(&race_errors, 1); return NULL; }
      stamp(keep[k], n, ((uint64_t)id << 40) ^ ((uint64_t)k << 20) ^ round);
    }
    /* quiet spell: fast paths only, long enough for the purger to call us idle */
    uint64_t until = test_now_ms() + 3 + test_rand(&r) % 20;
    while (test_now_ms() < until) {
      for (int i = 0; i < 50; i++) {
        unsigned char *p = hakmem_malloc(48);
        p[0] = 1;
        p[47] = 2;
        hakmem_free(p);
        unsigned char **slot = &ring[i % 8];   /* replace one block of the ring */
        if (*slot && !verify(*slot)) atomic_fetch_add(&race_errors, 1);
        hakmem_free(*slot);
        size_t n = 4096 + test_rand(&r) % 4096;
        if (!(*slot = hakmem_malloc(n))) { atomic_fetch_add(&race_errors, 1); return NULL; }
        stamp(*slot, n, ((uint64_t)id << 40) ^ round ^ (uint64_t)i << 8);
      }
      for (int k = 0; k < KEEP; k += 8)
        if (keep[k] && !verify(keep[k])) atomic_fetch_add(&race_errors, 1);
      test_sleep_ms(1);
    }
  }
  for (int k = 0; k < KEEP; k++) {
    if (keep[k] && !verify(keep[k])) atomic_fetch_add(&race_errors, 1);
    hakmem_free(keep[k]);
  }
  for (int k = 0; k < 8; k++) {
    if (ring[k] && !verify(ring[k])) atomic_fetch_add(&race_errors, 1);
    hakmem_free(ring[k]);
  }
  return NULL;
}

TEST(purger_races_owner_fast_paths) {
  hakmem_stats_t a, b;
  hakmem_stats_get(&a);
  pthread_t th[RW];
  uint64_t end = test_now_ms() + (test_sanitized() ? 1500 : 3000);
  int generations = 0;
  for (; test_now_ms() < end; generations++) {
    for (int i = 0; i < RW; i++) pthread_create(&th[i], NULL, racer, (void *)(intptr_t)i);
    for (int i = 0; i < RW; i++) pthread_join(th[i], NULL);
  }
  for (int i = 0; i < MAILBOX; i++) hakmem_free((void *)atomic_exchange(&mailbox[i], 0));
  hakmem_stats_get(&b);
  NOTE("%zu MiB purged meanwhile, %d generations of %d threads", (b.purged - a.purged) >> 20, generations, RW);
  CHECKF(atomic_load(&race_errors) == 0, "%d corrupted blocks or failed allocations", atomic_load(&race_errors));
  CHECK(b.purged > a.purged);
}

/* ---- malloc_trim reaches a waiting thread ------------------------------------------ */
#define TBLOCKS 200000
static void *tblk[TBLOCKS];
static pthread_barrier_t tbar;

static void *trim_owner(void *arg) {
  (void)arg;
  for (int i = 0; i < TBLOCKS; i++) {
    tblk[i] = hakmem_malloc(200);
    if (tblk[i]) memset(tblk[i], 7, 200);
  }
  pthread_barrier_wait(&tbar);          /* main frees them all */
  pthread_barrier_wait(&tbar);          /* main trims and measures */
  return NULL;
}

TEST(malloc_trim_reaches_waiting_thread) {
  pthread_barrier_init(&tbar, NULL, 2);
  pthread_t t;
  long base = test_rss_kib();
  pthread_create(&t, NULL, trim_owner, NULL);
  pthread_barrier_wait(&tbar);
  long full = test_rss_kib();
  for (int i = 0; i < TBLOCKS; i++) hakmem_free(tblk[i]);      /* all remote frees */
  int r = hakmem_malloc_trim(0);
  long trimmed = test_rss_kib();
  pthread_barrier_wait(&tbar);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&tbar);
  NOTE("RSS %ld KiB before, %ld KiB with 200000 blocks of a waiting thread, %ld KiB after another thread "
       "freed them and called malloc_trim (%d)", base, full, trimmed, r);
  CHECK(r == 1);
  if (!test_sanitized())
    CHECKF(full - trimmed > 30 * 1024, "malloc_trim returned only %ld KiB of ~40 MB freed", full - trimmed);
}

/* ---- a quiet thread's buffer of remote frees --------------------------------------- */
/* B frees A's blocks of 8 KiB (8 to a one-slice page), the first seven of each
 * page and then the first block of each: the last frees, fewer than a buffer
 * holds, are one block of each of the last RB_PAGES pages, and they wait in B's
 * buffer while both threads wait.  Only the purger can send them on (and then
 * give those pages back).  A and B start when the purger has found every heap
 * idle and sleeps: their new heaps must wake it (they once did not, and none
 * of the memory came back). */
#define RB_PAGES_ALL 127                       /* 1016 frees: 16 buffers of 60 and 56 more */
#define RB_PAGES 56
static void *rblk[RB_PAGES_ALL * 8];
static pthread_barrier_t rbar;

static void *rb_owner(void *arg) {
  (void)arg;
  pthread_barrier_wait(&rbar);                 /* the purger asleep (no heap yet) */
  for (int i = 0; i < RB_PAGES_ALL * 8; i++)
    if ((rblk[i] = hakmem_malloc(8192)) != NULL) memset(rblk[i], 7, 8192);
  pthread_barrier_wait(&rbar);                 /* allocated */
  pthread_barrier_wait(&rbar);                 /* B has freed them */
  pthread_barrier_wait(&rbar);                 /* wait, calling nothing, until main is done */
  return NULL;
}

static void *rb_freer(void *arg) {
  (void)arg;
  pthread_barrier_wait(&rbar);                 /* the purger asleep (no heap yet) */
  pthread_barrier_wait(&rbar);                 /* allocated */
  for (int pg = 0; pg < RB_PAGES_ALL; pg++)
    for (int k = 1; k < 8; k++) hakmem_free(rblk[pg * 8 + k]);
  for (int pg = 0; pg < RB_PAGES_ALL; pg++) hakmem_free(rblk[pg * 8]);
  pthread_barrier_wait(&rbar);                 /* freed */
  pthread_barrier_wait(&rbar);                 /* wait, calling nothing */
  return NULL;
}

/* Every heap idle (the purger, with nothing to watch, asleep)? */
static bool all_heaps_idle(void) {
  for (heap_t *h = heap_first(); h; h = atomic_load_explicit(&h->next_all, memory_order_acquire))
    if (!atomic_load_explicit(&h->idle, memory_order_relaxed)) return false;
  return true;
}

TEST(quiet_thread_remote_frees_reach_owner) {
  test_companion_start();                      /* the purger runs (two threads have a heap) */
  pthread_t a, b;
  hakmem_free(hakmem_malloc(64));
  pthread_barrier_init(&rbar, NULL, 3);
  pthread_create(&a, NULL, rb_owner, NULL);
  pthread_create(&b, NULL, rb_freer, NULL);
  long base = test_rss_kib();
  uint64_t w0 = test_now_ms();
  while (!all_heaps_idle() && test_now_ms() - w0 < 3000) test_sleep_ms(5);
  bool asleep = all_heaps_idle();
  pthread_barrier_wait(&rbar);                 /* A and B start */
  pthread_barrier_wait(&rbar);
  long full = test_rss_kib();
  pthread_barrier_wait(&rbar);
  long now = test_rss_kib();
  uint64_t t0 = test_now_ms(), ms = 0;
  for (; ms < 3000 && now - base >= 1024; ms = test_now_ms() - t0) {
    test_sleep_ms(5);
    now = test_rss_kib();
  }
  pthread_barrier_wait(&rbar);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  pthread_barrier_destroy(&rbar);
  NOTE("every heap idle before A and B allocated: %s", asleep ? "yes" : "no");
  NOTE("RSS %ld KiB before, %ld KiB with %d blocks of 8 KiB another thread freed, %ld KiB %llu ms later",
       base, full, RB_PAGES_ALL * 8, now, (unsigned long long)ms);
  if (!test_sanitized())
    CHECKF(now - base < 1024, "%ld KiB still resident: A's pages not given back (the last %d frees, one block of "
           "each of %d pages, not sent on, or the purger not watching A and B)", now - base, RB_PAGES, RB_PAGES);
}

/* ---- a thread that takes turns ---------------------------------------------------
 * A thread that waits a little between bursts of work, as an interpreter's
 * threads wait for its global lock, comes back soon after each trim: the
 * purger learns to wait longer for it (purge.c, quiet_t) rather than take
 * its caches and pages at every turn, and still trims it once it stays
 * away. */
#define TURNS 40
static int turns_trimmed;
static bool long_trimmed;
static uint64_t long_ms;

static void *turn_taker(void *arg) {
  (void)arg;
  heap_t *h = NULL;
  for (int i = 0; i < TURNS; i++) {
    void *p = hakmem_malloc(512 << 10);        /* above the classes: a slow path, the heap is busy */
    memset(p, 1, 4096);
    hakmem_free(p);
    h = hm_tls_heap;
    test_sleep_ms(20);                         /* quiet, past the purger's 5 ms poll here */
    turns_trimmed += atomic_load_explicit(&h->idle, memory_order_relaxed) != 0;
  }
  uint64_t t0 = test_now_ms();
  while (!atomic_load_explicit(&h->idle, memory_order_relaxed) && test_now_ms() - t0 < 5000) test_sleep_ms(10);
  long_trimmed = atomic_load_explicit(&h->idle, memory_order_relaxed) != 0;
  long_ms = test_now_ms() - t0;
  return NULL;
}

TEST(turn_taking_thread_trimmed_once_it_stays_away) {
  test_companion_start();                      /* the purger runs (two threads have a heap) */
  pthread_t t;
  pthread_create(&t, NULL, turn_taker, NULL);
  pthread_join(t, NULL);
  NOTE("trimmed after %d of %d turns of 20 ms; then %s after %llu ms away", turns_trimmed, TURNS,
       long_trimmed ? "trimmed" : "not trimmed", (unsigned long long)long_ms);
  CHECKF(turns_trimmed >= 1, "never trimmed while it took turns: is the purger running?");
  CHECKF(turns_trimmed <= TURNS / 4, "trimmed after %d of %d turns: the purger does not learn that it comes back",
         turns_trimmed, TURNS);
  CHECKF(long_trimmed, "not trimmed after %llu ms away", (unsigned long long)long_ms);
}

/* ---- an exited thread's free memory ---------------------------------------------- */
#define XBLOCKS 1600                           /* of 40 KiB: 64 MB */
#define XKEEP 64                               /* one kept in 64: every segment stays in use */
static void *xkept[XBLOCKS / XKEEP];

static void *exiting_worker(void *arg) {
  (void)arg;
  static void *b[XBLOCKS];
  for (int i = 0; i < XBLOCKS; i++)
    if ((b[i] = hakmem_malloc(40 << 10)) != NULL) memset(b[i], 7, 40 << 10);
  for (int i = 0; i < XBLOCKS; i++) {
    if (i % XKEEP == 0) xkept[i / XKEEP] = b[i];
    else hakmem_free(b[i]);
  }
  return NULL;                                 /* its segments are abandoned, mostly free */
}

TEST(exited_thread_memory_returned) {
  test_companion_start();                      /* the purger runs on after the worker */
  long base = test_rss_kib();
  pthread_t t;
  pthread_create(&t, NULL, exiting_worker, NULL);
  pthread_join(t, NULL);
  long left = test_rss_kib(), now = left;
  uint64_t t0 = test_now_ms(), ms = 0;
  for (; ms < 3000 && now - base >= 16 * 1024; ms = test_now_ms() - t0) {
    test_sleep_ms(5);                          /* calling nothing: only the purger can return it */
    now = test_rss_kib();
  }
  NOTE("RSS %ld KiB before, %ld KiB as the thread exited, %ld KiB %llu ms later", base, left, now,
       (unsigned long long)ms);
  for (int i = 0; i < XBLOCKS / XKEEP; i++) {
    const unsigned char *p = xkept[i];
    CHECKF(p && p[0] == 7 && p[(40 << 10) - 1] == 7, "kept block %d changed", i);
    hakmem_free(xkept[i]);
  }
  if (!test_sanitized())
    CHECKF(now - base < 16 * 1024, "%ld KiB above the start still resident %llu ms after the thread exited",
           now - base, (unsigned long long)ms);
}

TEST_MAIN()
