/* glibc_trim.c — malloc_trim, after glibc's tst-trim1: trimming keeps every
 * live block intact; and (not in glibc's test) it gives the free memory back
 * to the system at once, the calling thread's and another thread's alike.
 * hakmem runs with a purge delay of a minute, so what is given back is
 * malloc_trim's doing, not the background purger's. */
#include "ext.h"

#include <malloc.h>
#include <pthread.h>

TEST_ENV("HAKMEM_PURGE_DELAY_MS=60000")

TEST(tst_trim1) {
  enum { N = 10000 };
  static void *blocks[N];
  static size_t sizes[N];
  uint64_t r = 1;
  for (int i = 0; i < N; i++) {
    sizes[i] = test_rand(&r) % 16384;
    blocks[i] = malloc(sizes[i]);
    if (!blocks[i]) { CHECK(!"malloc failed"); return; }
    ext_fill(blocks[i], sizes[i], (uintptr_t)blocks[i]);
  }
  unsigned char *p = malloc(256);
  memset(p, 1, 256);
  for (int i = 0; i < N; i++) if (i % 13) free(blocks[i]);
  int rc = malloc_trim(0);
  CHECKF(rc == 0 || rc == 1, "malloc_trim returned %d", rc);
  for (int i = 0; i < N; i += 13)
    CHECKF(ext_intact(blocks[i], sizes[i], (uintptr_t)blocks[i]), "block %d (%zu bytes) changed by malloc_trim", i, sizes[i]);
  for (int i = 0; i < 256; i++) CHECK(p[i] == 1);
  for (int i = 0; i < N; i += 13) free(blocks[i]);
  free(p);
}

/* Ten 300 KiB blocks, written; nine freed; the tenth stays. */
enum { BLOCKS = 10, BLOCK = 300 << 10 };
static void *keep_one(void) {
  void *b[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) { b[i] = malloc(BLOCK); if (b[i]) memset(b[i], 1, BLOCK); }
  for (int i = 1; i < BLOCKS; i++) free(b[i]);
  return b[0];
}

/* After the nine frees and malloc_trim(0), the process holds at most the
 * live block and 1 MiB more than before the ten were allocated. */
static void check_given_back(long before_kib, long freed_kib, const char *whose) {
  long trimmed_kib = test_rss_kib();
  NOTE("%s: resident %ld KiB before, %ld after the frees, %ld after malloc_trim(0)", whose, before_kib, freed_kib, trimmed_kib);
  CHECKF(trimmed_kib <= before_kib + BLOCK / 1024 + 1024,
         "%s: %ld KiB resident after malloc_trim(0), %ld before the blocks were allocated", whose, trimmed_kib, before_kib);
}

TEST(trim_own_free_memory) {
  malloc_trim(0);                        /* what earlier cases left */
  long before = test_rss_kib();
  void *kept = keep_one();
  long freed = test_rss_kib();
  malloc_trim(0);
  check_given_back(before, freed, "this thread's blocks");
  free(kept);
}

static pthread_barrier_t trim_barrier;
static void *allocate_and_wait(void *unused) {
  void *kept = keep_one();
  pthread_barrier_wait(&trim_barrier);   /* blocks allocated and freed */
  pthread_barrier_wait(&trim_barrier);   /* main has trimmed */
  free(kept);
  return NULL;
}

/* The free memory of a thread that is alive but idle (issue 35 item 5). */
TEST(trim_other_threads_free_memory) {
  pthread_barrier_init(&trim_barrier, NULL, 2);
  pthread_t t;
  malloc_trim(0);
  long before = test_rss_kib();
  pthread_create(&t, NULL, allocate_and_wait, NULL);
  pthread_barrier_wait(&trim_barrier);
  long freed = test_rss_kib();
  malloc_trim(0);
  check_given_back(before, freed, "another thread's blocks");
  pthread_barrier_wait(&trim_barrier);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&trim_barrier);
}

TEST_MAIN()
