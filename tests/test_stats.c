/* Observability and memory return: the HAKMEM_STATS counters add up across
 * threads, the census (hakmem_stats_*, mallinfo2, malloc_info, malloc_stats)
 * reports real figures, and RSS falls back after frees without malloc_trim.
 *
 * The program runs with HAKMEM_STATS=1 (slow mode, every call counted): if it
 * is not set, it re-executes itself with it before anything is allocated. */
#include "test.h"
#include "hakmem.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

TEST_ENV("HAKMEM_STATS=1")

/* ---- counters add up ------------------------------------------------------------ */
#define T 4
#define PER 20000
static void *handed[T][PER / 2];
static pthread_barrier_t bar;

static size_t pick_size(unsigned i) {
  static const size_t sizes[] = { 8, 24, 100, 200, 700, 1500, 5000, 40000 };
  if (i % 101 == 0) return 300000;                          /* a large block now and then */
  return sizes[i % (sizeof sizes / sizeof sizes[0])];
}

/* Each thread allocates PER blocks, frees half itself, hands the other half
 * to the next thread, which frees them (remote frees), then exits. */
static void *counter_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  void *mine[PER / 2];
  for (unsigned i = 0; i < PER; i++) {
    void *p = hakmem_malloc(pick_size(i * 7 + (unsigned)id));
    if (!p) { CHECK(p != NULL); break; }
    memset(p, id, 8);
    if (i & 1) handed[id][i / 2] = p; else mine[i / 2] = p;
  }
  for (unsigned i = 0; i < PER / 2; i++) hakmem_free(mine[i]);
  pthread_barrier_wait(&bar);
  int from = (id + T - 1) % T;
  for (unsigned i = 0; i < PER / 2; i++) hakmem_free(handed[from][i]);
  pthread_barrier_wait(&bar);
  return NULL;
}

TEST(counters_add_up_across_threads) {
  hakmem_stats_t a, b;
  hakmem_stats_get(&a);
  pthread_barrier_init(&bar, NULL, T);
  pthread_t th[T];
  for (int i = 0; i < T; i++) pthread_create(&th[i], NULL, counter_worker, (void *)(intptr_t)i);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&bar);
  hakmem_stats_get(&b);
  size_t mallocs = b.mallocs - a.mallocs, frees = b.frees - a.frees;
  (void)frees;
  NOTE("%d threads: %zu mallocs, %zu frees, %zu remote frees counted", T, mallocs, frees, b.remote_frees - a.remote_frees);
  CHECKF(mallocs >= (size_t)T * PER, "%zu mallocs counted, at least %d made", mallocs, T * PER);
  CHECKF(b.remote_frees - a.remote_frees >= (size_t)T * PER / 2, "%zu remote frees counted, %d made",
         b.remote_frees - a.remote_frees, T * PER / 2);
  CHECKF(b.requested > a.requested, "requested bytes did not grow");
  /* Every thread has exited, so every remote free was collected: per class,
   * allocations - frees = blocks the census finds in use. */
  size_t live_total = 0;
  for (unsigned k = 0;; k++) {
    hakmem_class_stats_t c;
    if (hakmem_stats_class(k, &c) != 0) { CHECKF(k > 50, "only %u classes", k); break; }
    CHECKF(c.mallocs - c.frees == c.in_use, "class %u (%zu B): %zu mallocs - %zu frees != %zu in use",
           k, c.block_size, c.mallocs, c.frees, c.in_use);
    CHECKF(c.peak >= c.in_use, "class %u: peak %zu < in use %zu", k, c.peak, c.in_use);
    CHECKF(c.in_use <= c.capacity || c.block_size == 0, "class %u: %zu in use > capacity %zu", k, c.in_use, c.capacity);
    live_total += c.mallocs - c.frees;
  }
  hakmem_stats_get(&b);          /* (the NOTE above may have allocated stdout's buffer) */
  CHECKF(b.mallocs - b.frees == live_total, "totals: %zu - %zu != %zu", b.mallocs, b.frees, live_total);
}

TEST(class_table) {
  hakmem_class_stats_t c;
  size_t prev = 0;
  unsigned k = 0;
  for (; hakmem_stats_class(k, &c) == 0; k++) {
    if (c.block_size == 0) break;                           /* large, huge */
    CHECKF(c.block_size > prev, "class %u: size %zu after %zu", k, c.block_size, prev);
    prev = c.block_size;
  }
  CHECKF(prev == 256 * 1024, "largest class %zu", prev);
  CHECK(hakmem_stats_class(k + 2, &c) == -1);
  /* a block of 300 B shows in the 320 B class */
  hakmem_class_stats_t before, after;
  unsigned k320 = 0;
  while (hakmem_stats_class(k320, &c) == 0 && c.block_size != 320) k320++;
  hakmem_stats_class(k320, &before);
  void *p = hakmem_malloc(300);
  hakmem_stats_class(k320, &after);
  CHECKF(after.in_use == before.in_use + 1 && after.mallocs == before.mallocs + 1,
         "320 B class: in use %zu -> %zu, mallocs %zu -> %zu", before.in_use, after.in_use, before.mallocs, after.mallocs);
  hakmem_free(p);
  hakmem_stats_class(k320, &after);
  CHECK(after.in_use == before.in_use && after.frees == before.frees + 1);
}

#ifndef HAKMEM_NO_OVERRIDE      /* the standard names are the sanitizer's in those builds */
TEST(mallinfo2_real_figures) {
  struct mallinfo2 m0 = mallinfo2();
  enum { N = 1000 };
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = malloc(1000);            /* 1024 B class */
  char *volatile big = malloc((size_t)8 << 20);                /* a huge block: its own mapping */
  big[0] = 1;
  struct mallinfo2 m1 = mallinfo2();
  CHECKF(m1.uordblks >= m0.uordblks + N * 1000, "uordblks %zu -> %zu after %d x 1000 B", m0.uordblks, m1.uordblks, N);
  CHECKF(m1.hblks == m0.hblks + 1 && m1.hblkhd >= m0.hblkhd + ((size_t)8 << 20),
         "hblks %zu -> %zu, hblkhd %zu -> %zu", m0.hblks, m1.hblks, m0.hblkhd, m1.hblkhd);
  CHECKF(m1.arena >= m1.uordblks && m1.fordblks == m1.arena - m1.uordblks,
         "arena %zu, uordblks %zu, fordblks %zu", m1.arena, m1.uordblks, m1.fordblks);
  for (int i = 0; i < N; i++) free(p[i]);
  free(big);
  struct mallinfo2 m2 = mallinfo2();
  CHECKF(m2.uordblks + N * 1000 <= m1.uordblks, "uordblks %zu -> %zu after freeing", m1.uordblks, m2.uordblks);
  CHECKF(m2.hblks == m0.hblks, "hblks %zu after freeing the huge block", m2.hblks);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo m = mallinfo();
#pragma GCC diagnostic pop
  CHECK(m.uordblks > 0 && m.arena > 0);
}

TEST(malloc_info_xml) {
  void *keep = malloc(100);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(f != NULL);
  if (!f) return;
  CHECK(malloc_info(0, f) == 0);
  fclose(f);
  CHECKF(buf && strncmp(buf, "<malloc version=\"1\">", 20) == 0, "starts: %.40s", buf ? buf : "(null)");
  CHECKF(buf && strstr(buf, "</malloc>\n") && strstr(buf, "<heap nr=\"0\">") && strstr(buf, "<system type=\"current\""),
         "malloc_info output: %.200s", buf ? buf : "(null)");
  free(buf);
  errno = 0;
  CHECK(malloc_info(1, stderr) == EINVAL && errno == 0);     /* glibc returns the error number */
  free(keep);
}

/* Run fn with stderr going into buf (NUL-terminated). */
static void stderr_of(void (*fn)(void), char *buf, size_t size) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  int saved = dup(2);
  dup2(fds[1], 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fds[1]);
  ssize_t n = read(fds[0], buf, size - 1);
  close(fds[0]);
  buf[n > 0 ? n : 0] = 0;
}

TEST(malloc_stats_report) {
  char buf[16384];
  stderr_of(malloc_stats, buf, sizeof buf);
  CHECKF(strncmp(buf, "hakmem: statistics", 18) == 0, "malloc_stats printed: %.100s", buf);
  CHECKF(strstr(buf, "os calls") && strstr(buf, "mallocs") && strstr(buf, "class"), "report: %.300s", buf);
}

/* malloc_stats is not a cancellation point (glibc's
 * tst-malloc-stats-cancellation): a thread with a cancel pending prints the
 * whole report, and is cancelled at its next cancellation point. */
static pthread_barrier_t cancel_gate;
static void *cancelled_ret;
static void *stats_then_cancel(void *arg) {
  (void)arg;
  pthread_barrier_wait(&cancel_gate);      /* main cancels, then lets us go */
  pthread_barrier_wait(&cancel_gate);
  malloc_stats();
  pthread_testcancel();
  return NULL;                             /* not reached: the cancel acts above */
}
static void stats_in_cancelled_thread(void) {
  pthread_barrier_init(&cancel_gate, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, stats_then_cancel, NULL);
  pthread_barrier_wait(&cancel_gate);
  pthread_cancel(t);
  pthread_barrier_wait(&cancel_gate);
  pthread_join(t, &cancelled_ret);
  pthread_barrier_destroy(&cancel_gate);
}

TEST(malloc_stats_with_cancel_pending) {
  char buf[16384];
  stderr_of(stats_in_cancelled_thread, buf, sizeof buf);
  CHECKF(strncmp(buf, "hakmem: statistics", 18) == 0 && strstr(buf, "class"), "malloc_stats printed: %.100s", buf);
  CHECK(cancelled_ret == PTHREAD_CANCELED);
}
#endif

/* In stats mode the thread caches work from the slow paths, which count every
 * call: freed 8 KiB blocks wait there, and the report gives the hit rate. */
TEST(thread_cache_counted) {
  void *p[20];
  hakmem_stats_t a, st;
  hakmem_stats_get(&a);
  for (int r = 0; r < 50; r++) {
    for (int i = 0; i < 20; i++) p[i] = hakmem_malloc(8192);
    for (int i = 0; i < 20; i++) hakmem_free(p[i]);
  }
  hakmem_stats_get(&st);
  size_t hits = st.thread_cache_hits - a.thread_cache_hits, misses = st.thread_cache_misses - a.thread_cache_misses;
  int fds[2];
  CHECK(pipe(fds) == 0);
  hakmem_stats_print(fds[1]);
  close(fds[1]);
  char buf[16384];
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  buf[n > 0 ? n : 0] = 0;
  CHECKF(strstr(buf, " % of 4-256 KiB mallocs served by the thread cache") != NULL, "report: %.400s", buf);
  NOTE("%zu KiB cached; %zu of 1000 mallocs of 8 KiB served by the thread cache, %zu not", st.thread_cached >> 10, hits, misses);
  if (!test_thread_caches_possible()) { CHECK(st.thread_cached == 0 && hits == 0 && misses == 0); return; }
  CHECKF(st.thread_cached >= 16 * 8192, "%zu bytes cached after freeing 20 blocks of 8 KiB", st.thread_cached);
  CHECKF(hits + misses == 1000 && hits >= 49 * 16, "%zu hits and %zu misses where 16 of every 20 mallocs find a cached block",
         hits, misses);
}

/* ---- memory return ----------------------------------------------------------------- */

/* Threads build up ~100 MB (a third of it freed by other threads), free
 * everything and exit; the main thread then only does a little work now and
 * then, as a program does, and RSS must fall back within 200 ms without any
 * malloc_trim. */
#define RT 3
#define RBLOCKS 12000
static void *rblocks[RT][RBLOCKS];
static void *rss_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < RBLOCKS; i++) {
    size_t n = (size_t)(i % 16 + 1) * 320;               /* 320 B .. 5 KiB */
    if (i % 97 == 0) n = (size_t)64 << 10;
    if (i % 1009 == 0) n = (size_t)1 << 20;
    rblocks[id][i] = hakmem_malloc(n);
    if (rblocks[id][i]) memset(rblocks[id][i], 0x5a, n);
  }
  pthread_barrier_wait(&bar);          /* main measures the peak */
  pthread_barrier_wait(&bar);
  /* free our own blocks but every third, and every third of the next thread's */
  int next = (id + 1) % RT;
  for (int i = 0; i < RBLOCKS; i++) hakmem_free(i % 3 ? rblocks[id][i] : rblocks[next][i]);
  return NULL;
}

TEST(rss_falls_back_without_trim) {
  hakmem_malloc_trim(0);               /* what earlier cases left still decaying is not this one's */
  long base = test_rss_kib();
  pthread_barrier_init(&bar, NULL, RT + 1);
  pthread_t th[RT];
  for (int i = 0; i < RT; i++) pthread_create(&th[i], NULL, rss_worker, (void *)(intptr_t)i);
  pthread_barrier_wait(&bar);
  long peak = test_rss_kib();
  pthread_barrier_wait(&bar);
  for (int i = 0; i < RT; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&bar);
  long now = test_rss_kib();
  int ms = 0;
  for (; ms < 200; ms += 10) {
    now = test_rss_kib();
    if (now - base < 8 * 1024) break;
    void *p = hakmem_malloc(64);                          /* a little activity */
    hakmem_free(p);
    test_sleep_ms(10);
  }
  hakmem_stats_t st;
  hakmem_stats_get(&st);
  NOTE("RSS %ld KiB before, %ld KiB at the peak, %ld KiB %d ms after the threads freed everything and exited "
       "(hakmem: %zu KiB committed, %zu KiB in use)", base, peak, now, ms, st.committed >> 10, st.in_use >> 10);
  CHECKF(peak - base > 64 * 1024, "the workload should hold > 64 MB at its peak, held %ld KiB", peak - base);
  if (!test_sanitized())
    CHECKF(now - base < 8 * 1024, "%ld KiB above the start still resident %d ms after everything was freed",
           now - base, ms);
}

TEST_MAIN()
