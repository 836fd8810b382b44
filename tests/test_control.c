/* Run-time control: hakmem_option_get and hakmem_option_set by name, their
 * errors, what a change does (the purge delay, the purger thread), and
 * hakmem_collect.  The program runs with a purge delay of a minute, so memory
 * freed stays resident unless something here gives it back. */
#include "test.h"
#include "hakmem.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

TEST_ENV("HAKMEM_PURGE_DELAY_MS=60000")

static long get(const char *name) {
  long v = -1;
  return hakmem_option_get(name, &v) == 0 ? v : -2;
}

TEST(get_by_either_name_in_any_case) {
  CHECK(get("purge_delay_ms") == 60000);
  CHECK(get("HAKMEM_PURGE_DELAY_MS") == 60000);
  CHECK(get("Purge_Delay_Ms") == 60000);
  CHECK(get("segment_cache") == 8);                 /* the default */
  CHECK(get("background") == 1);
  CHECK(get("secure") == 0);
}

TEST(bad_names_and_values_are_refused) {
  long v = 5;
  CHECK(hakmem_option_get("purge_delay", &v) == EINVAL && v == 5);
  CHECK(hakmem_option_get("HAKMEM_", &v) == EINVAL && v == 5);
  CHECK(hakmem_option_get(NULL, &v) == EINVAL);
  CHECK(hakmem_option_get("purge_delay_ms", NULL) == EINVAL);
  CHECK(hakmem_option_set("no_such_option", 1) == EINVAL);
  CHECK(hakmem_option_set(NULL, 1) == EINVAL);
  CHECK(hakmem_option_set("purge_delay_ms", -1) == EINVAL);
  CHECK(hakmem_option_set("purge_delay_ms", 60001) == EINVAL);
  CHECK(hakmem_option_set("background", 2) == EINVAL);
  CHECK(get("purge_delay_ms") == 60000 && get("background") == 1);
}

TEST(fixed_options_refuse_a_change) {
  CHECK(hakmem_option_set("secure", 1) == EPERM);
  CHECK(hakmem_option_set("HAKMEM_STATS", 1) == EPERM);
  CHECK(hakmem_option_set("thread_cache_kb", 1024) == EPERM);
  CHECK(get("secure") == 0 && get("stats") == 0 && get("thread_cache_kb") == 32768);
  CHECK(hakmem_option_set("secure", 0) == 0);       /* the value it has */
}

TEST(set_then_get) {
  CHECK(hakmem_option_set("segment_cache", 3) == 0);
  CHECK(get("segment_cache") == 3);
  CHECK(hakmem_option_set("HAKMEM_SEGMENT_CACHE", 8) == 0);
  CHECK(get("segment_cache") == 8);
}

/* ---- what a change does ------------------------------------------------------ */

#define BLOCKS 200000                               /* of 200 bytes: about 40 MB */
#define KEEP 10000                                  /* every 10000th block (2 MB apart) stays */
static void *blk[BLOCKS];

/* Allocate and touch BLOCKS blocks, then free all but every KEEP-th: most
 * pages empty, but every segment still in use, so their memory is what the
 * purge delay keeps resident.  RSS after, and in *peak at the peak. */
static long fill_and_free(long *peak) {
  for (int i = 0; i < BLOCKS; i++) {
    blk[i] = hakmem_malloc(200);
    if (blk[i]) memset(blk[i], 7, 200);
  }
  *peak = test_rss_kib();
  for (int i = 0; i < BLOCKS; i++)
    if (i % KEEP) hakmem_free(blk[i]);
  return test_rss_kib();
}
static void free_kept(void) {
  for (int i = 0; i < BLOCKS; i += KEEP) hakmem_free(blk[i]);
}

TEST(collect_gives_back_this_threads_memory) {
  long peak, base = test_rss_kib(), freed = fill_and_free(&peak);
  test_sleep_ms(50);
  long waited = test_rss_kib();
  hakmem_collect(0);
  long collected = test_rss_kib();
  free_kept();
  NOTE("RSS %ld KiB before, %ld at the peak, %ld after the frees, %ld 50 ms later, %ld after hakmem_collect(0)",
       base, peak, freed, waited, collected);
  if (test_sanitized()) return;
  CHECKF(waited - base > 30 * 1024, "with a delay of a minute, only %ld KiB stayed resident", waited - base);
  CHECKF(waited - collected > 30 * 1024, "hakmem_collect(0) gave back only %ld KiB of ~40 MB", waited - collected);
}

TEST(purge_delay_change_takes_effect) {
  CHECK(hakmem_option_set("purge_delay_ms", 0) == 0);
  long peak, base = test_rss_kib(), now = fill_and_free(&peak);
  long half = (peak - base) / 2;                   /* (with a delay of a minute, all of it stays) */
  for (int i = 0; i < 200 && now - base > half; i++) {   /* (slow paths look at what is due) */
    hakmem_free(hakmem_malloc(300 << 10));
    test_sleep_ms(10);
    now = test_rss_kib();
  }
  CHECK(hakmem_option_set("purge_delay_ms", 60000) == 0);
  free_kept();
  NOTE("RSS %ld KiB before, %ld at the peak, %ld after the frees with a delay of 0", base, peak, now);
  if (test_sanitized()) return;
  CHECKF(now - base <= half, "with the delay set to 0, %ld of %ld KiB stayed resident after 2 s", now - base, peak - base);
}

/* ---- the purger thread ------------------------------------------------------- */

static atomic_int worker_stop;
static void *worker(void *arg) {
  (void)arg;
  while (!atomic_load(&worker_stop)) {              /* large blocks: every malloc a slow path */
    hakmem_free(hakmem_malloc(300 << 10));
    test_sleep_ms(1);
  }
  return NULL;
}

/* Until the purger is there (want) or gone, for up to 3 s; the main thread
 * allocates too, so that two threads have heaps. */
static bool wait_purgers(int want) {
  for (int i = 0; i < 300; i++) {
    if ((test_purger_threads() > 0) == (want > 0)) return true;
    hakmem_free(hakmem_malloc(300 << 10));
    test_sleep_ms(10);
  }
  return false;
}

TEST(background_stops_and_starts_the_purger) {
  pthread_t t;
  atomic_store(&worker_stop, 0);
  CHECK(pthread_create(&t, NULL, worker, NULL) == 0);
  CHECKF(wait_purgers(1), "no purger thread with two threads allocating");
  CHECK(hakmem_option_set("background", 0) == 0);
  /* (joined: the kernel takes its task out of /proc a moment after) */
  CHECKF(wait_purgers(0), "the purger is still there once background is set to 0");
  test_sleep_ms(100);
  CHECKF(test_purger_threads() == 0, "a purger came back with background 0");
  CHECK(hakmem_option_set("background", 1) == 0);
  CHECKF(wait_purgers(1), "no purger thread again after background is set to 1");
  atomic_store(&worker_stop, 1);
  pthread_join(t, NULL);
}

TEST_MAIN()
