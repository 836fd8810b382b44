/* The thread caches (src/tcache.c): a thread's freed 4-256 KiB blocks wait in
 * its cache, last freed first, within HAKMEM_THREAD_CACHE_KB; they are free,
 * not in use, in the statistics; and the thread's exit, malloc_trim and, for
 * a thread that went quiet, the purger give them back to their pages.  (A
 * second free of a cached block is among bad_free.h's cases.)
 *
 * The caches need membarrier(); where the kernel has none they are off, and
 * this test checks that instead. */
#include "test.h"
#include "companion.h"
#include "hakmem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define BOUND ((size_t)32768 << 10)         /* HAKMEM_THREAD_CACHE_KB's default */

static const size_t sizes[] = { 4096, 4608, 5120, 6144, 7168, 8192, 10240, 12288, 14336,
                                16384, 20480, 24576, 28672, 32768 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

static hakmem_stats_t stats(void) { hakmem_stats_t st; hakmem_stats_get(&st); return st; }

/* Allocate and free n blocks of every cached size, touching each. */
static void churn(int n) {
  void *p[64];
  for (size_t s = 0; s < NSIZES; s++) {
    for (int i = 0; i < n; i++) { p[i] = hakmem_malloc(sizes[s]); memset(p[i], (int)i, sizes[s]); }
    for (int i = 0; i < n; i++) hakmem_free(p[i]);
  }
}

TEST(freed_blocks_wait_last_freed_first) {
  hakmem_malloc_trim(0);
  CHECK(stats().thread_cached == 0);
  void *p[8];
  for (int i = 0; i < 8; i++) { p[i] = hakmem_malloc(8000); memset(p[i], i, 8000); }
  hakmem_stats_t a = stats();
  for (int i = 0; i < 8; i++) hakmem_free(p[i]);
  hakmem_stats_t b = stats();
  if (!test_thread_caches_possible()) {
    NOTE("no membarrier: the thread caches are off");
    CHECK(b.thread_cached == 0);
    return;
  }
  CHECKF(b.thread_cached == 8 * 8192, "%zu bytes cached after freeing 8 blocks of 8 KiB", b.thread_cached);
  CHECKF(a.in_use - b.in_use == 8 * 8192, "in use fell by %zu, not by the 64 KiB freed", a.in_use - b.in_use);
  void *q = hakmem_malloc(8100);
  CHECK(q == p[7]);
  CHECK(stats().thread_cached == 7 * 8192);
  hakmem_free(q);
  hakmem_malloc_trim(0);
}

/* Batches of every 4-32 KiB size: each cache grows to its batch of 64. */
TEST(caches_grow_to_their_batches) {
  churn(64);
  size_t c = stats().thread_cached, all = 0;
  for (size_t s = 0; s < NSIZES; s++) all += 64 * sizes[s];
  NOTE("%zu KiB cached after freeing 64 blocks of each of the %zu sizes", c >> 10, NSIZES);
  CHECKF(c <= all, "%zu KiB cached, more than the %zu KiB freed", c >> 10, all >> 10);
  if (test_thread_caches_possible()) CHECKF(c >= all / 2, "only %zu KiB cached", c >> 10);
}

/* The caches' room stays within the bound: batches of big blocks of three
 * classes (64 x 224, 256 and 160 KiB: 40 MiB) fill it, and no more. */
TEST(big_blocks_cached_within_the_bound) {
  enum { N = 64 };
  static const size_t big[] = { 200 << 10, 250 << 10, 150 << 10 };
  static void *p[3][N];
  hakmem_malloc_trim(0);
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < N; i++) { p[k][i] = hakmem_malloc(big[k]); CHECK(p[k][i] != NULL); memset(p[k][i], i, 4096); }
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < N; i++) hakmem_free(p[k][i]);
  size_t c = stats().thread_cached;
  NOTE("%zu KiB cached after freeing %d blocks each of 200, 250 and 150 KiB", c >> 10, N);
  if (!test_thread_caches_possible()) { CHECK(c == 0); return; }
  CHECKF(c <= BOUND, "%zu KiB cached, more than the %zu KiB bound", c >> 10, BOUND >> 10);
  CHECKF(c >= BOUND / 2, "only %zu KiB cached", c >> 10);
  void *q = hakmem_malloc(150 << 10);
  CHECKF(q == p[2][N - 1] || stats().thread_cached < c, "malloc gave %p, not a cached block", q);
  hakmem_free(q);
  hakmem_malloc_trim(0);
  CHECK(stats().thread_cached == 0);
}

/* A cache left alone for a second goes back to its pages (src/tcache.c,
 * TC_DECAY_MS).  One in use, whose pops and pushes balance, looks the same
 * and may go too: its next malloc refills it (a slow path a second), so it
 * holds no more than its first cap. */
TEST(idle_caches_decay) {
  enum { N = 40 };                            /* 40 x 200 KiB and 40 x 8 KiB cached */
  static void *p[N], *s[N];
  hakmem_malloc_trim(0);
  for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(200 << 10); memset(p[i], i, 200 << 10); }
  for (int i = 0; i < N; i++) { s[i] = hakmem_malloc(8 << 10); memset(s[i], i, 8 << 10); }
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
  for (int i = 0; i < N; i++) hakmem_free(s[i]);
  void *kept = hakmem_malloc(100 << 10);     /* its class: 112 KiB */
  hakmem_free(kept);
  hakmem_stats_t a = stats();
  if (!test_thread_caches_possible()) { CHECK(a.thread_cached == 0); return; }
  /* (a free into a page parked as full goes to the page: one in four here) */
  CHECKF(a.thread_cached >= N / 2 * (224 << 10) + N / 2 * (8 << 10) + (112 << 10), "%zu KiB cached", a.thread_cached >> 10);
  /* 2.4 s of work that keeps using the 112 KiB class and, now and then, a
   * size without a cache (1 MiB), whose slow path counts towards the tick */
  for (int r = 0; r < 40; r++) {
    test_sleep_ms(60);
    for (int i = 0; i < 64; i++) {
      void *q = hakmem_malloc(100 << 10);
      CHECK(q != NULL);
      if (q) memset(q, r, 100 << 10);
      hakmem_free(q);
      void *big = hakmem_malloc(1 << 20);
      CHECK(big != NULL);
      hakmem_free(big);
    }
  }
  hakmem_stats_t b = stats();
  NOTE("cached %zu -> %zu KiB", a.thread_cached >> 10, b.thread_cached >> 10);
  CHECKF(b.thread_cached >= 112 << 10 && b.thread_cached <= 8 * (112 << 10), "%zu KiB still cached",
         b.thread_cached >> 10);
  hakmem_malloc_trim(0);
}

/* A cache starts small and doubles when free finds it full (up to 64 blocks,
 * TC_MAX in src/tcache.c), so a batch of one class fits, last freed on top;
 * a batch beyond that gives the older half of the cache back to the pages.
 * (The cache may also hold blocks its last refill took from a page.) */
#define TC_MAX_BLOCKS 64
TEST(a_batch_grows_its_cache) {
  hakmem_malloc_trim(0);
  void *p[100], *q[40];
  for (int r = 0; r < 2; r++) {
    for (int i = 0; i < 40; i++) { p[i] = hakmem_malloc(4096); memset(p[i], i, 4096); }
    for (int i = 0; i < 40; i++) hakmem_free(p[i]);
  }
  size_t grown = stats().thread_cached;
  if (!test_thread_caches_possible()) { CHECK(grown == 0); return; }
  CHECKF(grown >= 40 * 4096 && grown <= TC_MAX_BLOCKS * 4096, "%zu blocks of 4 KiB cached after freeing 40",
         grown / 4096);
  for (int i = 39; i >= 0; i--) {
    q[i] = hakmem_malloc(4096);
    CHECKF(q[i] == p[i], "malloc %d of 40 gave %p, not the block freed last (%p)", 40 - i, q[i], p[i]);
  }
  CHECKF(stats().thread_cached == grown - 40 * 4096, "%zu KiB counted as cached with the 40 popped (%zu before)",
         stats().thread_cached >> 10, grown >> 10);
  for (int i = 0; i < 40; i++) p[i] = q[i];
  for (int i = 40; i < 100; i++) p[i] = hakmem_malloc(4096);
  for (int i = 0; i < 100; i++) hakmem_free(p[i]);
  size_t most = stats().thread_cached;
  CHECKF(most >= TC_MAX_BLOCKS / 2 * 4096 && most <= TC_MAX_BLOCKS * 4096,
         "%zu blocks of 4 KiB cached after freeing 100 (at most %d)", most / 4096, TC_MAX_BLOCKS);
  void *top = hakmem_malloc(4096);
  CHECKF(top == p[99], "malloc gave %p, not the block freed last (%p)", top, p[99]);
  hakmem_free(top);
  hakmem_malloc_trim(0);
}

/* The 4.5 KiB class's blocks are 512-byte multiples from their page's start,
 * odd and even ones: a batch of them comes back last freed first. */
#define HALF_KIB_BATCH (TC_MAX_BLOCKS / 2)
TEST(half_kib_class_caches_its_batch) {
  hakmem_malloc_trim(0);
  void *p[HALF_KIB_BATCH], *q[HALF_KIB_BATCH];
  for (int r = 0; r < 3; r++) {
    for (int i = 0; i < HALF_KIB_BATCH; i++) { p[i] = hakmem_malloc(4200); memset(p[i], i, 4200); }
    for (int i = 0; i < HALF_KIB_BATCH; i++) hakmem_free(p[i]);
  }
  if (!test_thread_caches_possible()) { CHECK(stats().thread_cached == 0); return; }
  CHECKF(stats().thread_cached >= HALF_KIB_BATCH * 4608, "%zu bytes cached after freeing %d blocks of 4.5 KiB",
         stats().thread_cached, HALF_KIB_BATCH);
  int odd = 0;
  for (int i = HALF_KIB_BATCH - 1; i >= 0; i--) {
    q[i] = hakmem_malloc(4608);
    odd += ((uintptr_t)q[i] >> 9) & 1;
    CHECKF(q[i] == p[i], "malloc %d gave %p, not the block freed last (%p)", HALF_KIB_BATCH - i, q[i], p[i]);
  }
  CHECKF(odd > 0, "no block at an odd multiple of 512 bytes among %d", HALF_KIB_BATCH);
  for (int i = 0; i < HALF_KIB_BATCH; i++) hakmem_free(q[i]);
  hakmem_malloc_trim(0);
}

TEST(malloc_trim_empties_the_cache) {
  churn(20);
  size_t committed = stats().committed;
  CHECK(hakmem_malloc_trim(0) == 1);
  hakmem_stats_t st = stats();
  CHECK(st.thread_cached == 0);
  CHECKF(st.committed < committed, "committed %zu -> %zu KiB", committed >> 10, st.committed >> 10);
}

static void *churn_and_exit(void *arg) { (void)arg; churn(20); return NULL; }

TEST(thread_exit_empties_its_cache) {
  hakmem_malloc_trim(0);
  pthread_t t;
  pthread_create(&t, NULL, churn_and_exit, NULL);
  pthread_join(t, NULL);
  CHECK(stats().thread_cached == 0);
}

/* A thread fills its caches and waits, calling nothing: the purger must take
 * them, all but the first block of each (a pop of the owner's may have begun:
 * tcache_take).  Then it allocates again, from its caches and pages. */
static pthread_barrier_t bar;
static void *fill_and_wait(void *arg) {
  (void)arg;
  churn(20);
  pthread_barrier_wait(&bar);               /* filled */
  pthread_barrier_wait(&bar);               /* main saw them emptied (or gave up) */
  void *p[16];
  int bad = 0;
  for (size_t s = 0; s < NSIZES; s++) {
    for (int i = 0; i < 16; i++) { p[i] = hakmem_malloc(sizes[s]); memset(p[i], i + 1, sizes[s]); }
    for (int i = 0; i < 16; i++) {
      unsigned char *b = p[i];
      bad += b[0] != i + 1 || b[sizes[s] - 1] != i + 1;
      hakmem_free(p[i]);
    }
  }
  return (void *)(intptr_t)bad;
}

TEST(purger_empties_a_quiet_threads_cache) {
  test_companion_start();                   /* the purger runs */
  hakmem_malloc_trim(0);
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, fill_and_wait, NULL);
  pthread_barrier_wait(&bar);
  size_t full = stats().thread_cached;
  uint64_t t0 = test_now_ms();
  size_t now = full;
  size_t one = 0;                           /* one block of each class */
  for (size_t s = 0; s < NSIZES; s++) one += sizes[s];
  while ((now = stats().thread_cached) > one && test_now_ms() - t0 < 3000) test_sleep_ms(2);
  uint64_t ms = test_now_ms() - t0;
  pthread_barrier_wait(&bar);
  void *bad;
  pthread_join(t, &bad);
  pthread_barrier_destroy(&bar);
  NOTE("%zu KiB cached by the quiet thread, %zu KiB %llu ms later", full >> 10, now >> 10, (unsigned long long)ms);
  if (test_thread_caches_possible()) CHECKF(full > 0, "nothing cached");
  CHECKF(now <= one, "%zu KiB still cached %llu ms after the thread went quiet (one a class: %zu KiB)", now >> 10,
         (unsigned long long)ms, one >> 10);
  CHECKF(bad == NULL, "%d blocks corrupted after the purger took the caches", (int)(intptr_t)bad);
}

/* A thread whose caches the purger parked frees a block of a cached class:
 * the free goes to the slow path, which resumes the caches, and the block
 * waits in its cache.  (Not onto its page: the purger may be giving that
 * page back, a queue's first included, as the thread frees into it.) */
static void *park_then_free(void *arg) {
  (void)arg;
  void *p[8];
  for (int i = 0; i < 8; i++) { p[i] = hakmem_malloc(8192); memset(p[i], i, 8192); }
  for (int i = 1; i < 8; i++) hakmem_free(p[i]);
  pthread_barrier_wait(&bar);               /* cached */
  pthread_barrier_wait(&bar);               /* parked (or main gave up) */
  size_t before = stats().thread_cached;
  hakmem_free(p[0]);
  size_t after = stats().thread_cached;
  return (void *)(uintptr_t)(after > before ? after - before : 0);
}

TEST(free_resumes_parked_caches) {
  if (!test_thread_caches_possible()) {
    SKIP("no membarrier(2): the thread caches are off");
    return;
  }
  test_companion_start();                   /* the purger runs */
  hakmem_malloc_trim(0);
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, park_then_free, NULL);
  pthread_barrier_wait(&bar);
  uint64_t t0 = test_now_ms();
  size_t now;
  while ((now = stats().thread_cached) > 8192 && test_now_ms() - t0 < 3000) test_sleep_ms(2);
  pthread_barrier_wait(&bar);
  void *grew;
  pthread_join(t, &grew);
  pthread_barrier_destroy(&bar);
  CHECKF(now <= 8192, "%zu KiB still cached 3 s after the thread went quiet", now >> 10);
  CHECKF((uintptr_t)grew == 8192, "the free after the purger parked the caches added %zu bytes to them, not 8192",
         (size_t)(uintptr_t)grew);
}

/* malloc_trim in one thread takes the caches of another that pushes and pops
 * them all the time: no block may be handed out twice. */
#define RING 40
static _Atomic int race_stop, race_bad;
static void *cycle(void *arg) {
  uint64_t r = (uint64_t)(intptr_t)arg * 7919 + 3;
  unsigned char *ring[RING] = { 0 };
  size_t len[RING] = { 0 };
  unsigned char tag[RING] = { 0 };
  for (unsigned long i = 0; !atomic_load_explicit(&race_stop, memory_order_relaxed); i++) {
    int k = (int)(i % RING);
    size_t n = 4096 + test_rand(&r) % (arg ? 2048 : 8192);   /* thread 1: few classes, growing caches */
    unsigned char *q = NULL;
    if (ring[k]) {
      if (ring[k][0] != tag[k] || ring[k][len[k] / 2] != tag[k] || ring[k][len[k] - 1] != tag[k]) atomic_fetch_add(&race_bad, 1);
      if (i % 4 == 1) {                       /* realloc frees the old block onto its page */
        if ((q = hakmem_realloc(ring[k], n)) && q[0] != tag[k]) atomic_fetch_add(&race_bad, 1);
      } else {
        hakmem_free(ring[k]);
      }
    }
    len[k] = n;
    tag[k] = (unsigned char)(i * 31 + 1);
    if (!q && !(q = hakmem_malloc(n))) { atomic_fetch_add(&race_bad, 1); ring[k] = NULL; break; }
    ring[k] = q;
    ring[k][0] = ring[k][len[k] / 2] = ring[k][len[k] - 1] = tag[k];
  }
  for (int k = 0; k < RING; k++) hakmem_free(ring[k]);
  return NULL;
}

TEST(trim_races_cache_fast_paths) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, cycle, (void *)(intptr_t)i);
  uint64_t t0 = test_now_ms();
  int trims = 0;
  while (test_now_ms() - t0 < 1500) { hakmem_malloc_trim(0); trims++; }
  atomic_store(&race_stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  NOTE("%d malloc_trim calls against 2 threads cycling 40 blocks of 4-12 KiB and 4-6 KiB (freed or realloc'd)", trims);
  CHECKF(atomic_load(&race_bad) == 0, "%d blocks corrupted or not allocated", atomic_load(&race_bad));
}

TEST_MAIN()
