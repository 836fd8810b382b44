/* First-class heaps (hakmem_heap_*): blocks of every kind from a heap, freed
 * from any thread; destroy gives back every block at once; delete keeps them
 * in the thread's own heap, as a thread's exit does for the heaps it made;
 * misuse is reported.  Memory is judged by hakmem's own in_use figure. */
#include "test.h"
#include "hakmem.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>

static size_t in_use(void) {
  hakmem_stats_t st;
  hakmem_stats_get(&st);
  return st.in_use;
}

/* The sizes of every kind of block: small classes, thread-cached classes,
 * large (a run of slices) and huge (a mapping of its own). */
static const size_t sizes[] = {8, 16, 100, 1000, 3500, 5000, 40000, 200000, 300000, 2 << 20, 5 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void fill(unsigned char *p, size_t n, unsigned tag) {
  p[0] = (unsigned char)tag;
  p[n / 2] = (unsigned char)(tag + 1);
  p[n - 1] = (unsigned char)(tag + 2);
}
static bool intact(const unsigned char *p, size_t n, unsigned tag) {
  return p[0] == (unsigned char)tag && p[n / 2] == (unsigned char)(tag + 1) && p[n - 1] == (unsigned char)(tag + 2);
}

TEST(blocks_of_every_kind) {
  hakmem_heap_t *h = hakmem_heap_new();
  CHECK(h != NULL);
  unsigned char *p[NSIZES];
  for (size_t i = 0; i < NSIZES; i++) {
    p[i] = hakmem_heap_malloc(h, sizes[i]);
    CHECKF(p[i] && hakmem_malloc_usable_size(p[i]) >= sizes[i], "size %zu", sizes[i]);
    if (p[i]) fill(p[i], sizes[i], (unsigned)i);
  }
  for (size_t i = 0; i < NSIZES; i++) CHECKF(p[i] && intact(p[i], sizes[i], (unsigned)i), "size %zu", sizes[i]);
  for (size_t i = 0; i < NSIZES; i += 2) hakmem_free(p[i]);   /* plain free of a heap's block */
  hakmem_heap_destroy(h);                                     /* and the rest at once */
}

TEST(calloc_aligned_realloc) {
  hakmem_heap_t *h = hakmem_heap_new();
  size_t base = in_use();
  unsigned char *z = hakmem_heap_calloc(h, 1000, 40);
  bool zero = z != NULL;
  for (size_t i = 0; z && i < 40000; i++) zero &= z[i] == 0;
  CHECK(zero);
  CHECK(hakmem_heap_calloc(h, SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
  for (size_t a = 32; a <= ((size_t)4 << 20); a <<= 3) {
    void *q = hakmem_heap_aligned_alloc(h, a, 100);
    CHECKF(q && (uintptr_t)q % a == 0, "alignment %zu: %p", a, q);
  }
  CHECK(hakmem_heap_aligned_alloc(h, 48, 100) == NULL && errno == EINVAL);
  unsigned char *r = hakmem_heap_realloc(h, NULL, 10);
  memcpy(r, "0123456789", 10);
  for (size_t n = 20; n < ((size_t)8 << 20); n *= 3) {
    r = hakmem_heap_realloc(h, r, n);
    CHECKF(r && memcmp(r, "0123456789", 10) == 0, "realloc to %zu", n);
  }
  void *outside = hakmem_malloc(100);                         /* a block of the thread's own heap */
  void *moved = hakmem_heap_realloc(h, outside, 200000);      /* moves into the heap */
  CHECK(moved != NULL);
  CHECKF(in_use() > base + (4 << 20), "in_use %zu, before %zu", in_use(), base);
  hakmem_heap_destroy(h);                                     /* frees z, the aligned blocks, r, moved */
  CHECKF(in_use() <= base + 4096, "in_use %zu after destroy, %zu before", in_use(), base);
}

/* A huge block aligned to a segment or more has its header a segment below
 * it: hakmem_heap_realloc finds it there, as free does, and moves the block
 * with its bytes. */
TEST(realloc_of_a_segment_aligned_block) {
  hakmem_heap_t *h = hakmem_heap_new();
  size_t align = (size_t)4 << 20, n = (size_t)5 << 20;
  unsigned char *p = hakmem_heap_aligned_alloc(h, align, n);
  CHECKF(p && (uintptr_t)p % align == 0, "%p", (void *)p);
  memset(p, 0xab, n);
  unsigned char *q = hakmem_heap_realloc(h, p, 2 * n);
  CHECK(q != NULL);
  bool kept = true;
  for (size_t i = 0; q && i < n; i += 4096) kept &= q[i] == 0xab;
  CHECK(kept);
  q = hakmem_heap_realloc(h, q, n / 2);                       /* fits: stays */
  CHECK(q && q[0] == 0xab);
  hakmem_heap_destroy(h);
}

/* ---- destroy and delete -------------------------------------------------------- */

#define MANY 100000
static unsigned char *many[MANY];

TEST(destroy_gives_back_every_block) {
  size_t base = in_use();
  hakmem_heap_t *h = hakmem_heap_new();
  for (int i = 0; i < MANY; i++) many[i] = hakmem_heap_malloc(h, 16 + (size_t)(i % 50) * 16);
  for (size_t i = 0; i < NSIZES; i++) hakmem_heap_malloc(h, sizes[i]);
  size_t full = in_use();
  hakmem_heap_destroy(h);
  size_t after = in_use();
  NOTE("in_use %zu before, %zu with the heap's blocks, %zu after destroy", base, full, after);
  CHECKF(full > base + 40 * 1000 * 1000, "the heap's blocks are not in in_use (%zu, %zu)", full, base);
  CHECKF(after <= base + 4096, "destroy left %zu bytes in use", after - base);
  /* the memory serves the next allocations */
  void *p = hakmem_malloc(1000);
  CHECK(p != NULL);
  hakmem_free(p);
}

/* Threads exit holding blocks of plain malloc, more at once than exited
 * threads' heaps are kept whole for the next threads (PARK_MAX, thread.c):
 * the segments of the rest are abandoned.  A first-class heap must not
 * adopt them (its destroy frees every page it has, in use or not): the
 * blocks stay the program's. */
#define DEAD_THREADS 24
#define DEAD_EACH 200
static unsigned char *dead[DEAD_THREADS][DEAD_EACH];
static pthread_barrier_t dead_bar;
static void *leave_blocks(void *arg) {
  unsigned char **mine = arg;
  for (int i = 0; i < DEAD_EACH; i++) {
    mine[i] = hakmem_malloc(64);
    if (mine[i]) fill(mine[i], 64, (unsigned)i);
  }
  pthread_barrier_wait(&dead_bar);                             /* (all alive at once: each has a heap of its own) */
  return NULL;
}

TEST(destroy_keeps_dead_threads_blocks) {
  pthread_t t[DEAD_THREADS];
  pthread_barrier_init(&dead_bar, NULL, DEAD_THREADS);
  for (int k = 0; k < DEAD_THREADS; k++) CHECK(pthread_create(&t[k], NULL, leave_blocks, dead[k]) == 0);
  for (int k = 0; k < DEAD_THREADS; k++) pthread_join(t[k], NULL);
  pthread_barrier_destroy(&dead_bar);
  for (int round = 0; round < 8; round++) {                   /* (heaps enough to take every abandoned segment) */
    hakmem_heap_t *h = hakmem_heap_new();
    for (int i = 0; i < 4000; i++) hakmem_heap_malloc(h, 64);
    hakmem_heap_destroy(h);
  }
  int bad = 0;
  for (int k = 0; k < DEAD_THREADS; k++)
    for (int i = 0; i < DEAD_EACH; i++) bad += !dead[k][i] || !intact(dead[k][i], 64, (unsigned)i);
  CHECKF(bad == 0, "%d of %d blocks of exited threads changed by heaps' destroy", bad, DEAD_THREADS * DEAD_EACH);
  for (int k = 0; k < DEAD_THREADS; k++)
    for (int i = 0; i < DEAD_EACH; i++) hakmem_free(dead[k][i]);
}

TEST(delete_keeps_the_blocks) {
  size_t base = in_use();
  hakmem_heap_t *h = hakmem_heap_new();
  unsigned char *p[NSIZES];
  for (size_t i = 0; i < NSIZES; i++) {
    p[i] = hakmem_heap_malloc(h, sizes[i]);
    fill(p[i], sizes[i], (unsigned)i + 7);
  }
  for (int i = 0; i < 1000; i++) many[i] = hakmem_heap_malloc(h, 48);
  hakmem_heap_delete(h);
  for (size_t i = 0; i < NSIZES; i++) CHECKF(intact(p[i], sizes[i], (unsigned)i + 7), "size %zu", sizes[i]);
  unsigned char *q = hakmem_realloc(p[2], 5000);              /* the thread's own heap's now */
  CHECK(q && intact(q, 100, 9));
  p[2] = q;
  for (size_t i = 0; i < NSIZES; i++) hakmem_free(p[i]);
  for (int i = 0; i < 1000; i++) hakmem_free(many[i]);
  hakmem_malloc_trim(0);                                      /* (HAKMEM_SECURE: the quarantine) */
  CHECKF(in_use() <= base + 4096, "in_use %zu after freeing a deleted heap's blocks, %zu before", in_use(), base);
}

TEST(heaps_come_and_go) {
  hakmem_stats_t before, after;
  hakmem_stats_get(&before);
  void *kept[50];
  for (int r = 0; r < 2000; r++) {
    hakmem_heap_t *h = hakmem_heap_new();
    for (int i = 0; i < 50; i++) kept[i] = hakmem_heap_malloc(h, 16 + (size_t)(i * 37 % 2000));
    if (r % 2) {
      hakmem_heap_destroy(h);
    } else {
      hakmem_heap_delete(h);
      for (int i = 0; i < 50; i++) hakmem_free(kept[i]);
    }
  }
  hakmem_malloc_trim(0);                                      /* (HAKMEM_SECURE: the quarantine) */
  hakmem_stats_get(&after);
  NOTE("2000 heaps: in_use %zu -> %zu, mapped %zu -> %zu", before.in_use, after.in_use, before.mapped, after.mapped);
  CHECKF(after.in_use <= before.in_use + 4096, "in_use grew by %zu bytes", after.in_use - before.in_use);
  CHECKF(after.mapped <= before.mapped + (64 << 20), "mapped grew by %zu bytes", after.mapped - before.mapped);
}

/* ---- other threads ----------------------------------------------------------------- */

#define SHARED 20000
static unsigned char *shared[SHARED];

static void *free_odd(void *arg) {
  (void)arg;
  for (int i = 1; i < SHARED; i += 2) hakmem_free(shared[i]);
  return NULL;
}

TEST(other_threads_free_its_blocks) {
  size_t base = in_use();
  hakmem_heap_t *h = hakmem_heap_new();
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < SHARED; i++) {
      shared[i] = hakmem_heap_malloc(h, 16 + (size_t)(i % 300) * 8);
      fill(shared[i], 16 + (size_t)(i % 300) * 8, (unsigned)i);
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_odd, NULL) == 0);
    pthread_join(t, NULL);
    bool ok = true;
    for (int i = 0; i < SHARED; i += 2) ok &= intact(shared[i], 16 + (size_t)(i % 300) * 8, (unsigned)i);
    CHECKF(ok, "round %d: a block changed while other blocks were freed", round);
    for (int i = 0; i < SHARED; i += 2) hakmem_free(shared[i]);
  }
  hakmem_malloc_trim(0);                                      /* (collects what they freed) */
  size_t end = in_use();
  hakmem_heap_destroy(h);
  NOTE("in_use %zu before, %zu with every block freed, %zu after destroy", base, end, in_use());
  CHECKF(end < base + (4 << 20), "freed blocks stayed in use: %zu bytes", end - base);
}

static hakmem_heap_t *made_by_exited;
static unsigned char *left[100];
static void *make_and_exit(void *arg) {
  (void)arg;
  hakmem_heap_t *h = made_by_exited = hakmem_heap_new();
  for (int i = 0; i < 100; i++) {
    left[i] = hakmem_heap_malloc(h, (size_t)(i + 1) * 300);
    fill(left[i], (size_t)(i + 1) * 300, (unsigned)i);
  }
  return NULL;                                               /* exits without ending h */
}

TEST(thread_exit_deletes_its_heaps) {
  size_t base = in_use();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, make_and_exit, NULL) == 0);
  pthread_join(t, NULL);
  bool ok = true;
  for (int i = 0; i < 100; i++) ok &= intact(left[i], (size_t)(i + 1) * 300, (unsigned)i);
  CHECK(ok);
  for (int i = 0; i < 100; i++) hakmem_free(left[i]);
  hakmem_malloc_trim(0);                                      /* (collects the parked heap's frees) */
  CHECKF(in_use() <= base + 4096, "in_use %zu, %zu before", in_use(), base);
}

/* ---- misuse ---------------------------------------------------------------------------- */

static hakmem_heap_t *foreign;
static void *malloc_from_foreign(void *arg) {
  (void)arg;
  hakmem_heap_malloc(foreign, 10);
  return NULL;
}
static void other_thread_allocates(void) {
  foreign = hakmem_heap_new();
  pthread_t t;
  pthread_create(&t, NULL, malloc_from_foreign, NULL);
  pthread_join(t, NULL);
}
static void ended_heap_used(void) {
  hakmem_heap_t *h = hakmem_heap_new();
  hakmem_heap_destroy(h);
  hakmem_heap_malloc(h, 10);
}
static void double_free_of_heap_block(void) {
  hakmem_heap_t *h = hakmem_heap_new();
  void *p = hakmem_heap_malloc(h, 32);
  hakmem_free(p);
  hakmem_free(p);
}

static void expect_abort(void (*fn)(void), const char *what, const char *expect) {
  char msg[2048];
  int st = run_in_child(fn, msg, sizeof msg);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(msg, expect),
         "%s: expected SIGABRT and \"...%s...\", got status %#x and \"%.200s\"", what, expect, st, msg);
}

TEST(misuse_is_reported) {
  expect_abort(other_thread_allocates, "another thread allocates from a heap", "not a heap this thread made");
  expect_abort(ended_heap_used, "an ended heap used", "not a heap this thread made");
  expect_abort(double_free_of_heap_block, "a heap's block freed twice", "double free");
}

TEST_MAIN()
