/* glibc_threads.c — threads and malloc, after glibc's tst-malloc-thread-exit,
 * tst-malloc-tcache-leak, tst-aligned-alloc-random-thread(-cross) and
 * tst-malloc-stats-cancellation: threads that allocate while others are
 * created and exit, blocks freed by other threads, no memory kept per
 * exited thread, and malloc_stats under a pending cancellation. */
#include "ext.h"

#include <malloc.h>
#include <pthread.h>

/* ---- tst-malloc-thread-exit ---------------------------------------------- */

static volatile int exit_stop;

static void *malloc_then_wait(void *b) {
  void *volatile p = malloc(32);
  pthread_barrier_wait(b);
  free(p);
  return NULL;
}
static void *wait_then_malloc(void *b) {
  pthread_barrier_wait(b);
  void *volatile p = malloc(32);
  free(p);
  return NULL;
}

static void *outer(void *rounds) {
  enum { INNER = 4 };
  while (!exit_stop) {
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, INNER + 1);
    pthread_t t[INNER];
    for (int i = 0; i < INNER; i++)
      if (pthread_create(&t[i], NULL, i % 2 ? wait_then_malloc : malloc_then_wait, &b)) return NULL;
    pthread_barrier_wait(&b);
    for (int i = 0; i < INNER; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&b);
    __atomic_fetch_add((long *)rounds, 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

TEST(tst_malloc_thread_exit) {
  long rounds = 0;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, outer, &rounds);
  test_sleep_ms(1000);                   /* glibc: 3 s */
  exit_stop = 1;
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  CHECKF(rounds > 50, "only %ld rounds of 4 threads in 1 s", rounds);
}

/* ---- tst-malloc-tcache-leak ------------------------------------------------ */

static void *alloc_free_return(void *unused) {
  void *volatile p = malloc(32);
  free(p);
  return malloc(32);                     /* freed by main after the thread is gone */
}

static bool run_threads(int n) {
  for (int i = 0; i < n; i++) {
    pthread_t t;
    void *rv;
    if (pthread_create(&t, NULL, alloc_free_return, NULL)) return false;
    pthread_join(t, &rv);
    free(rv);
  }
  return true;
}

/* The bytes in use once the allocator has settled: malloc_trim(0) has it
 * take in the frees other threads sent it (hakmem counts a block as in use
 * until its owner or the background thread has collected its free). */
static size_t settled_in_use(void) {
  malloc_trim(0);
  return mallinfo2().uordblks;
}

/* Threads that each allocate and exit leave nothing behind: the bytes in use
 * grow by less than one per thread (glibc's bound), measured after a first
 * batch has filled whatever the allocator keeps for reuse (hakmem's
 * hardened mode keeps up to 1024 freed blocks in quarantine). */
TEST(tst_malloc_tcache_leak) {
  enum { WARM_UP = 2000, THREADS = 5000 };
  CHECK(run_threads(WARM_UP));
  size_t before = settled_in_use();
  CHECK(run_threads(THREADS));
  size_t after = settled_in_use();
  CHECKF(after <= before + THREADS, "in use: %zu bytes before %d threads, %zu after", before, THREADS, after);
}

/* ---- tst-aligned-alloc-random-thread(-cross) ------------------------------- */

enum { RT_THREADS = 8, RT_ALLOCS = 2048 };
static void *rt_blocks[RT_THREADS][RT_ALLOCS];
static size_t rt_sizes[RT_THREADS][RT_ALLOCS];
static pthread_barrier_t rt_barrier;
static bool rt_cross;
static volatile int rt_bad;

static void rt_alloc(int set, unsigned *seed) {
  for (int i = 0; i < RT_ALLOCS; i++) {
    size_t msb = (size_t)1 << (rand_r(seed) % 16), size = msb + (size_t)rand_r(seed) % msb;
    size_t align = (size_t)1 << (rand_r(seed) % 13);
    void *p = rand_r(seed) % 2 ? malloc(size) : aligned_alloc(align, size);
    if (!p) { rt_bad = 1; continue; }
    ext_fill(p, size < 64 ? size : 64, (uintptr_t)p);
    rt_blocks[set][i] = p;
    rt_sizes[set][i] = size;
  }
}
static void rt_free(int set) {
  for (int i = 0; i < RT_ALLOCS; i++) {
    void *p = rt_blocks[set][i];
    size_t n = rt_sizes[set][i];
    if (p && !ext_intact(p, n < 64 ? n : 64, (uintptr_t)p)) rt_bad = 2;
    free(p);
    rt_blocks[set][i] = NULL;
  }
}

/* Stage 1: the first half allocates; stage 2: the first half frees its own
 * blocks (or, crossed, allocates the second half's set) while the second
 * half allocates (or, crossed, frees the first half's blocks); stage 3: the
 * second half frees. */
static void *rt_thread(void *arg) {
  int id = (int)(intptr_t)arg, half = RT_THREADS / 2;
  unsigned seed = (unsigned)id * 7919u + 1;
  if (id < half) rt_alloc(id, &seed);
  pthread_barrier_wait(&rt_barrier);
  if (id < half) { if (rt_cross) rt_alloc(id + half, &seed); else rt_free(id); }
  else { if (rt_cross) rt_free(id - half); else rt_alloc(id, &seed); }
  pthread_barrier_wait(&rt_barrier);
  if (id >= half) rt_free(id);
  return NULL;
}

static void random_threads(bool cross) {
  rt_cross = cross;
  rt_bad = 0;
  pthread_barrier_init(&rt_barrier, NULL, RT_THREADS);
  for (int iteration = 0; iteration < 16; iteration++) {
    pthread_t t[RT_THREADS];
    for (int i = 0; i < RT_THREADS; i++) pthread_create(&t[i], NULL, rt_thread, (void *)(intptr_t)i);
    for (int i = 0; i < RT_THREADS; i++) pthread_join(t[i], NULL);
  }
  pthread_barrier_destroy(&rt_barrier);
  CHECKF(rt_bad == 0, "%s", rt_bad == 1 ? "an allocation failed" : "a block changed before it was freed");
}

TEST(tst_aligned_alloc_random_thread) { random_threads(false); }
TEST(tst_aligned_alloc_random_thread_cross) { random_threads(true); }

/* ---- tst-malloc-stats-cancellation ---------------------------------------- */

/* A thread with a cancellation pending calls malloc_stats, which must print
 * its report (it is no cancellation point to the caller) and leave
 * cancellation enabled: the next stdio write cancels the thread. */
static void *stats_then_write(void *gate) {
  pthread_barrier_wait(gate);            /* not a cancellation point */
  malloc_stats();
  fputs("this call should trigger cancellation\n", stderr);
  return NULL;
}

/* Reads a pipe to its end into a string (main cannot: the cancelled thread
 * does not close the pipe, so the reader must live on its own). */
static void *drain(void *fdp) {
  int fd = *(int *)fdp;
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  char block[4096];
  ssize_t n;
  while ((n = read(fd, block, sizeof block)) > 0) fwrite(block, 1, (size_t)n, out);
  fclose(out);
  close(fd);
  return buf;
}

static int stats_cancel_child(void *unused) {
  int fds[2];
  if (pipe(fds)) return 2;
  dup2(fds[1], 2);                       /* malloc_stats writes to stderr */
  close(fds[1]);
  pthread_t reader, worker;
  pthread_create(&reader, NULL, drain, &fds[0]);
  pthread_barrier_t gate;
  pthread_barrier_init(&gate, NULL, 2);
  pthread_create(&worker, NULL, stats_then_write, &gate);
  pthread_cancel(worker);
  pthread_barrier_wait(&gate);
  void *rv;
  pthread_join(worker, &rv);
  fclose(stderr);                        /* ends the reader's loop */
  char *text;
  pthread_join(reader, (void **)&text);
  int bad = 0;
  if (rv != PTHREAD_CANCELED) bad |= 1;
  if (!text || strlen(text) < 20) bad |= 2;
  if (text && strstr(text, "should trigger cancellation")) bad |= 4;
  if (bad) printf("# stderr of the cancelled thread: %.300s\n", text ? text : "(none)");
  free(text);
  return bad;
}

TEST(tst_malloc_stats_cancellation) {
  ext_result_t r = ext_child(stats_cancel_child, NULL, 20000);
  CHECKF(ext_exited(&r, 0), "child: %s (bits: 1 thread not cancelled, 2 malloc_stats printed nothing, 4 the write after it was not cancelled)", r.what);
}

TEST_MAIN()
