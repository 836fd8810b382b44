/* The heap profiler's accounting in one process (HAKMEM_PROFILE; the
 * program re-executes itself with it, at a rate of one sample per 4 KiB so
 * that thousands of blocks are sampled): threads allocate and free, half of
 * the blocks freed by another thread, and afterwards hakmem_profile_dump
 * shows no live bytes left and the bytes allocated within 10 % of the truth;
 * blocks kept are live within 10 % of theirs, and leave when freed, or when
 * the first-class heap holding them is destroyed.  Run under TSan too (make
 * test-sanitize): the tables are shared by every thread.  Unsampled
 * mallocs keep off the slow path, a thread takes its heap with a fresh
 * countdown, and a signal handler may free a sampled block while its thread
 * holds the tables' lock.  (Call sites and formats: test_profile.sh.) */
#include "test.h"
#include "hakmem.h"
#include "internal.h"
#include "profile_tables.h"

#include <pthread.h>
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The exit report goes nowhere: the prefix names no directory. */
TEST_ENV("HAKMEM_PROFILE=/nonexistent/hakmem-test-sampling")
__attribute__((constructor(102))) static void rate(int argc, char **argv) {
  (void)argc;
  test_reexec_with("HAKMEM_PROFILE_RATE=4096", argv);
}

#define T 4
#define PER 4000
#define RATE 4096
static void *handed[T][PER / 2];
static pthread_barrier_t bar;
static _Atomic uint64_t asked;

static size_t pick_size(unsigned i) {
  static const size_t sizes[] = { 8, 24, 100, 200, 700, 1500, 5000, 40000 };
  return sizes[i % (sizeof sizes / sizeof sizes[0])];
}

/* Each thread allocates PER blocks, frees half itself, hands the other half
 * to the next thread, which frees them. */
static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  void *mine[PER / 2];
  uint64_t bytes = 0;
  for (unsigned i = 0; i < PER; i++) {
    size_t n = pick_size(i * 7 + (unsigned)id);
    void *p = hakmem_malloc(n);
    if (!p) { CHECK(p != NULL); break; }
    memset(p, id, 8);
    bytes += n;
    if (i & 1) handed[id][i / 2] = p; else mine[i / 2] = p;
  }
  atomic_fetch_add(&asked, bytes);
  for (unsigned i = 0; i < PER / 2; i++) hakmem_free(mine[i]);
  pthread_barrier_wait(&bar);
  int from = (id + T - 1) % T;
  for (unsigned i = 0; i < PER / 2; i++) hakmem_free(handed[from][i]);
  return NULL;
}

/* The bytes of a folded file: the last number of every line. */
static double folded_total(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  double total = 0;
  char line[8192];
  while (fgets(line, sizeof line, f)) {
    char *sp = strrchr(line, ' ');
    if (sp) total += strtod(sp + 1, NULL);
  }
  fclose(f);
  return total;
}

static char dir[64];

static double dumped(const char *view) {
  char path[128];
  snprintf(path, sizeof path, "%s/p.%s.folded", dir, view);
  return folded_total(path);
}

static void dump_now(void) {
  char path[96];
  snprintf(path, sizeof path, "%s/p", dir);
  CHECKF(hakmem_profile_dump(path) == 0, "hakmem_profile_dump(%s) failed", path);
}

/* The live heap's bytes in a dump taken now. */
static double live_now(void) {
  dump_now();
  return dumped("live");
}

static void remove_dump(void) {
  const char *views[] = { "live", "peak", "alloc" }, *exts[] = { "folded", "svg" };
  char path[128];
  for (int v = 0; v < 3; v++)
    for (int e = 0; e < 2; e++) {
      snprintf(path, sizeof path, "%s/p.%s.%s", dir, views[v], exts[e]);
      unlink(path);
    }
}

TEST(freed_blocks_leave_the_live_heap) {
  snprintf(dir, sizeof dir, "/tmp/hakmem-sampling-XXXXXX");
  if (!mkdtemp(dir)) { CHECKF(0, "mkdtemp failed"); return; }
  dump_now();
  double before_alloc = dumped("alloc"), before_live = dumped("live");
  pthread_barrier_init(&bar, NULL, T);
  pthread_t th[T];
  for (int i = 0; i < T; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&bar);
  dump_now();
  double alloc = dumped("alloc") - before_alloc, live = dumped("live") - before_live, truth = (double)asked;
  CHECKF(alloc > 0.9 * truth && alloc < 1.1 * truth, "estimated %.0f bytes allocated, %.0f asked", alloc, truth);
  CHECKF(live < 4 * RATE, "%.0f bytes still live after every block was freed", live);
  CHECKF(dumped("peak") >= 0.5 * truth / T, "peak %.0f, under the %.0f bytes one thread held", dumped("peak"), truth / T);
  remove_dump();
}

TEST(kept_blocks_stay_live) {
  enum { N = 5000 };
  static void *keep[N];
  double before = live_now();
  uint64_t bytes = 0;
  for (int i = 0; i < N; i++) {
    size_t n = pick_size((unsigned)i);
    keep[i] = hakmem_malloc(n);
    bytes += n;
  }
  double live = live_now() - before;
  CHECKF(live > 0.9 * (double)bytes && live < 1.1 * (double)bytes, "estimated %.0f bytes live, %llu kept", live,
         (unsigned long long)bytes);
  for (int i = 0; i < N; i++) hakmem_free(keep[i]);
  live = live_now() - before;
  CHECKF(live < 4 * RATE && live > -4 * RATE, "%.0f bytes live after freeing them", live);
  remove_dump();
}

/* With profiling on, a malloc that is not sampled pops its block past the
 * slow path (profile_malloc): the heap's slow-path entries grow with the
 * samples (a sampled block's page is marked, and unmarked at its free), not
 * with the mallocs. */
TEST(unsampled_mallocs_keep_off_the_slow_path) {
  enum { N = 20000 };
  hakmem_free(hakmem_malloc(64));           /* the heap and its page exist */
  heap_t *h = hm_tls_heap;
  uint64_t before = atomic_load(&h->slow_ops);
  for (int i = 0; i < N; i++) hakmem_free(hakmem_malloc(64));
  uint64_t entries = atomic_load(&h->slow_ops) - before;
  CHECKF(entries < N / 4, "%llu slow-path entries for %d malloc+free pairs", (unsigned long long)entries, N);
}

static pthread_barrier_t crowd;
static void *allocate_once(void *arg) {
  hakmem_free(hakmem_malloc(16));
  *(uint64_t *)arg = hm_tls_heap->prof_until;   /* the countdown its heap took */
  pthread_barrier_wait(&crowd);             /* (all alive at once: some take a heap never used) */
  return NULL;
}

/* A thread's heap counts down to its next sample point from a point drawn
 * when the thread takes the heap (an exponential of mean RATE), whether the
 * heap is new, recycled or one another thread left: not from 0, where
 * every thread's first malloc would be sampled, nor from where the last
 * thread left it. */
TEST(a_thread_takes_its_heap_with_a_fresh_countdown) {
  enum { ROUNDS = 4, CROWD = 24 };           /* (more than the 16 heaps parked for reuse) */
  uint64_t left[ROUNDS * CROWD];
  double sum = 0;
  for (int r = 0; r < ROUNDS; r++) {
    pthread_t t[CROWD];
    pthread_barrier_init(&crowd, NULL, CROWD);
    int made = 0;
    while (made < CROWD && pthread_create(&t[made], NULL, allocate_once, &left[r * CROWD + made]) == 0) made++;
    CHECK(made == CROWD);
    if (made < CROWD) exit(1);             /* (the barrier would wait for ever) */
    for (int i = 0; i < made; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&crowd);
  }
  for (int i = 0; i < ROUNDS * CROWD; i++) {
    CHECKF(left[i] < 40 * RATE, "thread %d's countdown after its first malloc: %llu", i, (unsigned long long)left[i]);
    sum += (double)left[i];
  }
  double mean = sum / (ROUNDS * CROWD);     /* (96 draws: within 2x of the rate by a wide margin) */
  CHECKF(mean > RATE / 2 && mean < 2 * RATE, "the mean countdown is %.0f bytes, the rate %d", mean, RATE);
}

/* The owner's frees on a page marked for the samples it holds keep off
 * the heap's lock (profile_free_local): the slow-path entries grow with the
 * samples (each page is unmarked once, locked), not with those frees. */
TEST(frees_on_a_sampled_page_keep_off_the_lock) {
  enum { N = 4000 };
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = hakmem_malloc(64);
  heap_t *h = hm_tls_heap;
  uint64_t before = atomic_load(&h->slow_ops);
  unsigned marked = 0;
  for (int i = 0; i < N; i++) {
    page_t *pg = page_of(segment_of(p[i]), p[i]);
    marked += (pg->flags & PAGE_SLOW) != 0;
    hakmem_free(p[i]);
  }
  uint64_t entries = atomic_load(&h->slow_ops) - before;
  CHECKF(marked >= 100, "only %u of %d frees were on marked pages", marked, N);
  CHECKF(entries < marked / 4, "%llu slow-path entries for %u frees on marked pages", (unsigned long long)entries, marked);
}

/* The same for a class with a thread cache (4 KiB): the owner's frees on
 * marked pages go to the cache, as free's fast path would push them, without
 * the lock; the blocks malloc takes back come from the cache, so the cache
 * does not empty and refill through the slow path either. */
TEST(frees_on_a_sampled_page_keep_to_the_thread_cache) {
  enum { W = 32, N = 4000 };
  static void *p[W];
  if (!tcache_fast(class_of(4096))) { SKIP("no thread cache here (HAKMEM_THREAD_CACHE_KB=0 or no membarrier)"); return; }
  for (int i = 0; i < W; i++) p[i] = hakmem_malloc(4096);
  heap_t *h = hm_tls_heap;
  uint64_t before = atomic_load(&h->slow_ops);
  unsigned marked = 0;
  for (int i = 0; i < N; i++) {
    void *q = p[i % W];
    page_t *pg = page_of(segment_of(q), q);
    marked += (pg->flags & PAGE_SLOW) != 0;
    hakmem_free(q);
    p[i % W] = hakmem_malloc(4096);
  }
  uint64_t entries = atomic_load(&h->slow_ops) - before;
  for (int i = 0; i < W; i++) hakmem_free(p[i]);
  CHECKF(marked >= 100, "only %u of %d frees were on marked pages", marked, N);
  CHECKF(entries < marked / 4, "%llu slow-path entries for %u frees on marked pages", (unsigned long long)entries, marked);
}

/* Another thread's frees, once the profiler has seen them, go into that
 * thread's buffers for the owner (remote.c), as outside slow mode: none
 * reaches a page's remote list block by block.  The owner, waiting in
 * pthread_join, collects nothing meanwhile. */
enum { HANDED = 2000 };
static void *handed_over[HANDED];
static size_t buffered_in(rbuf_t *o) {
  size_t n = 0;
  for (; o && o != INBOX_CLOSED; o = o->next) n += o->n;
  return n;
}
static void *free_handed(void *owner) {
  for (int i = 0; i < HANDED; i++) hakmem_free(handed_over[i]);
  size_t n = buffered_in(atomic_load(&((heap_t *)owner)->inbox));
  heap_t *h = hm_tls_heap;
  for (size_t i = 0; i < RB_SLOTS; i++) {
    rbuf_t *o = atomic_load(&h->out[i]);
    if (o && o->to == owner) n += o->n;
  }
  return (void *)n;
}
TEST(remote_frees_go_through_the_buffers) {
  if (!hm_tcache_on) { SKIP("no remote-free buffers here (HAKMEM_THREAD_CACHE_KB=0 or no membarrier)"); return; }
  for (int i = 0; i < HANDED; i++) handed_over[i] = hakmem_malloc(48);
  heap_t *h = hm_tls_heap;
  remote_collect(h);                        /* (an inbox empty before) */
  pthread_t t;
  void *n = NULL;
  CHECK(pthread_create(&t, NULL, free_handed, h) == 0 && pthread_join(t, &n) == 0);
  CHECKF((size_t)n == HANDED, "%zu of %d blocks freed by another thread went through its buffers", (size_t)n, HANDED);
  hakmem_free(hakmem_malloc(48));           /* (the inbox collected) */
}

/* Another thread's free takes the slow path, where the profiler sees it,
 * only on a page marked slow.  The profiler marks the pages of a thread's
 * own heap that hold samples; a first-class heap's pages and a large
 * block's are slow from the start: their sampled blocks, freed by another
 * thread, leave the live heap too. */
enum { KEPT = 3000 };
static void *kept_for_another[KEPT];
static void *free_kept(void *arg) {
  (void)arg;
  for (int i = 0; i < KEPT; i++) hakmem_free(kept_for_another[i]);
  return NULL;
}
TEST(first_class_heap_and_large_blocks_freed_by_another_thread_leave) {
  double before = live_now();
  hakmem_heap_t *h = hakmem_heap_new();
  CHECK(h != NULL);
  if (!h) return;
  uint64_t bytes = 0;
  for (int i = 0; i < KEPT; i++) {
    size_t n = i % 10 == 0 ? (size_t)300 << 10 : pick_size((unsigned)i);   /* large blocks too */
    kept_for_another[i] = i % 2 ? hakmem_heap_malloc(h, n) : hakmem_malloc(n);
    CHECK(kept_for_another[i] != NULL);
    bytes += n;
  }
  double live = live_now() - before;
  CHECKF(live > 0.9 * (double)bytes && live < 1.1 * (double)bytes, "estimated %.0f bytes live, %llu allocated", live,
         (unsigned long long)bytes);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_kept, NULL) == 0 && pthread_join(t, NULL) == 0);
  live = live_now() - before;
  CHECKF(live < 4 * RATE && live > -4 * RATE, "%.0f bytes live after another thread freed them all", live);
  hakmem_heap_destroy(h);
  remove_dump();
}

static void *volatile freed_by_handler;
static void free_in_handler(int sig) {
  (void)sig;
  hakmem_free(freed_by_handler);
  freed_by_handler = NULL;
}

/* Signals are not blocked while a thread holds the tables' lock: a handler
 * that frees a sampled block then leaves it to the thread, and the block
 * leaves the live heap when the thread lets the lock go. */
TEST(handler_frees_while_the_lock_is_held) {
  double before = live_now();
  freed_by_handler = hakmem_malloc(1 << 20);   /* sampled: the odds are 1 - exp(-256) */
  double live = live_now() - before;
  CHECKF(live > (1 << 19), "%.0f bytes live with a block of 1 MiB sampled", live);
  struct sigaction sa = { .sa_handler = free_in_handler }, old;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, &old);
  profile_lock();
  raise(SIGUSR2);
  bool ran = freed_by_handler == NULL;
  profile_unlock();
  sigaction(SIGUSR2, &old, NULL);
  CHECKF(ran, "the handler did not run while the lock was held");
  live = live_now() - before;
  CHECKF(live < 4 * RATE && live > -4 * RATE, "%.0f bytes live after the handler freed the block", live);
  remove_dump();
}

/* The profiler's stack walk (profile_stack.c: the unwind tables' rules,
 * each read once) finds the frames backtrace() finds, through a chain of
 * calls of one function and another, and needs no backtrace() to. */
static __attribute__((noinline)) int walk_down(int depth, void **walked, int *nwalked, void **traced) {
  int n;
  if (depth == 0) {
    *nwalked = profile_stack(walked, 64);
    n = backtrace(traced, 64);
  } else {
    char pad[depth % 3 ? 40 : 400];         /* frames of several sizes */
    memset(pad, depth, sizeof pad);
    n = walk_down(depth - 1, walked, nwalked, traced) + (pad[depth % 7] == 0x7f);
  }
  __asm__ volatile("" ::: "memory");        /* (no tail call) */
  return n;
}

TEST(stack_walk_matches_backtrace) {
  void *walked[64], *traced[64];
  int nwalked = 0;
  uint64_t slow = atomic_load(&hm_prof.walks_slow);
  int ntraced = walk_down(20, walked, &nwalked, traced);
  CHECKF(atomic_load(&hm_prof.walks_slow) == slow, "the walk fell back to backtrace()");
  /* Both start in walk_down, at different calls; under a sanitizer,
   * backtrace() is intercepted, and its first frame is the interceptor's.
   * The callers' frames are the same. */
  int extra = ntraced - nwalked;
  CHECKF((extra == 0 || extra == 1) && nwalked > 22, "%d frames walked, %d by backtrace()", nwalked, ntraced);
  for (int i = 1; i < nwalked && i + extra < ntraced; i++)
    CHECKF(walked[i] == traced[i + extra], "frame %d: %p walked, %p by backtrace()", i, walked[i], traced[i + extra]);
}

TEST(destroyed_heap_leaves_the_live_heap) {
  enum { N = 5000 };
  double before = live_now();
  hakmem_heap_t *h = hakmem_heap_new();
  CHECK(h != NULL);
  if (!h) return;
  uint64_t bytes = 0;
  for (int i = 0; i < N; i++) {
    size_t n = pick_size((unsigned)i) + (i % 97 == 0 ? (size_t)5 << 20 : 0);   /* and a few huge blocks */
    CHECK(hakmem_heap_malloc(h, n) != NULL);
    bytes += n;
  }
  double live = live_now() - before;
  CHECKF(live > 0.9 * (double)bytes && live < 1.1 * (double)bytes, "estimated %.0f bytes live in the heap, %llu allocated",
         live, (unsigned long long)bytes);
  hakmem_heap_destroy(h);
  live = live_now() - before;
  CHECKF(live < 4 * RATE && live > -4 * RATE, "%.0f bytes live after destroying the heap", live);
  remove_dump();
  rmdir(dir);
}

TEST_MAIN()
