/* HAKMEM_PURGE_DELAY_MS=0: free memory goes back to the OS at once, until
 * the program is seen reusing memory right after its purge; then the delay
 * grows, as it does from the default (decay.c).  The
 * window that tells "right after" was two delays, empty at 0, so the delay
 * never grew and every freed big block was purged and faulted in again.
 *
 *  - 64 blocks of 256 KiB-1 MiB allocated and freed at random, 20000 steps
 *    (the suite's xlarge): a few madvise calls, not one per free.
 *
 * One program of its own, with HAKMEM_PURGE_DELAY_MS=0. */
#include "test.h"
#include "hakmem.h"

TEST_ENV("HAKMEM_PURGE_DELAY_MS=0")

TEST(reused_big_blocks_are_not_purged_every_time) {
  enum { SLOTS = 64, STEPS = 20000 };
  static char *slot[SLOTS];
  uint64_t x = 88172645463325252ull;
  hakmem_stats_t a, b;
  hakmem_stats_get(&a);
  for (int i = 0; i < STEPS; i++) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    size_t k = x % SLOTS, n = (256 << 10) + (x >> 32) % (768 << 10);
    if (slot[k]) {
      hakmem_free(slot[k]);
      slot[k] = NULL;
    } else {
      CHECK((slot[k] = hakmem_malloc(n)) != NULL);
      slot[k][0] = slot[k][n - 1] = 1;
    }
  }
  hakmem_stats_get(&b);
  for (int k = 0; k < SLOTS; k++) hakmem_free(slot[k]);
  NOTE("%zu madvise calls for %d steps", b.madvise_calls - a.madvise_calls, STEPS);
  CHECKF(b.madvise_calls - a.madvise_calls < STEPS / 20, "%zu madvise calls for %d steps of 64 blocks of 256 KiB-1 MiB",
         b.madvise_calls - a.madvise_calls, STEPS);
}

TEST_MAIN()
