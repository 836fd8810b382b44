/* Segments emptied beyond the segment cache (segment.c): they wait, still
 * mapped, for the purger to unmap them together; past a bound of 256
 * waiting, the older half is unmapped at once.  A program that maps fresh
 * segments soon after that happened gets twice the bound (up to 1024), so a
 * burst that repeats does not unmap and refault its segments every time.
 *
 *  - bursts of 300 emptied segments: the first unmaps at the bound, the one
 *    right after it unmaps nothing, and the purger still unmaps them all.
 *
 * One program of its own, with HAKMEM_PURGE_DELAY_MS=500: the purger must
 * not unmap the waiting segments between the bursts, whose timing the
 * sanitizer builds stretch. */
#include "test.h"
#include "hakmem.h"

#include <pthread.h>

TEST_ENV("HAKMEM_PURGE_DELAY_MS=500")

enum { BLOCKS = 900 };                          /* of 1 MiB, three to a segment: 300 segments */
static void *blk[BLOCKS];

/* Allocate the blocks, free them all; the munmap calls the frees made. */
static size_t burst(void) {
  hakmem_stats_t a, b;
  for (int i = 0; i < BLOCKS; i++) {
    blk[i] = hakmem_malloc(1 << 20);
    CHECK(blk[i] != NULL);
  }
  hakmem_stats_get(&a);
  for (int i = 0; i < BLOCKS; i++) hakmem_free(blk[i]);
  hakmem_stats_get(&b);
  return b.munmap_calls - a.munmap_calls;
}

static void *nothing(void *arg) { return arg; }

TEST(retired_bound_doubles_for_repeated_bursts) {
  pthread_t t;                                  /* a second thread starts the purger */
  CHECK(pthread_create(&t, NULL, nothing, NULL) == 0);
  pthread_join(t, NULL);
  hakmem_stats_t base, now;
  hakmem_stats_get(&base);
  size_t first = burst(), second = burst();
  NOTE("munmap calls while 300 segments emptied: %zu, then %zu", first, second);
  CHECKF(first >= 1, "the first burst unmapped nothing at the bound of 256 (%zu calls)", first);
  CHECKF(second == 0, "the burst right after unmapped at the bound again (%zu calls)", second);
  /* and what waits still goes: the purger unmaps the rest (8 stay cached,
   * and the heap keeps one if it had none before) */
  size_t keep = base.segments + 8 + 1;
  hakmem_stats_get(&now);
  for (int ms = 0; ms < 5000 && now.segments > keep; ms += 20) {
    test_sleep_ms(20);
    hakmem_stats_get(&now);
  }
  CHECKF(now.segments <= keep, "%zu segments still mapped 5 s after the bursts", now.segments - base.segments);
}

TEST_MAIN()
