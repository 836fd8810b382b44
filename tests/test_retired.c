/* Segments emptied beyond the segment cache (segcache.c): they are retired,
 * each waits one delay, still mapped, and the purger then unmaps those whose
 * delay has passed; a thread that needs a segment takes a waiting one back
 * before it maps fresh address space.
 *
 *  - a burst of 300 emptied segments unmaps nothing, the burst right after
 *    takes them back without mapping, and the purger unmaps them all later;
 *  - while the program takes retired segments back, those retired at
 *    different times go at different times: the ones retired first go
 *    while the later ones still wait;
 *  - when nothing takes them back, the whole list goes at the first
 *    deadline, in runs of adjacent segments (few munmap calls); so do the
 *    segments four threads empty together as they finish, the cache
 *    keeping the lowest of them so as not to split the runs.
 *
 * A companion thread that has allocated keeps the program multi-threaded,
 * and so the purger running, throughout.
 *
 * One program of its own, with HAKMEM_PURGE_DELAY_MS=1000: the purger must
 * not unmap the waiting segments within the bursts, whose timing the
 * sanitizer builds stretch.  (With test_purge's 2 ms, a loaded machine
 * spread the four threads' frees over several deadlines, and so their
 * segments over several passes: 24 segments with 13-16 munmap calls.) */
#include "test.h"
#include "companion.h"
#include "hakmem.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TEST_ENV("HAKMEM_PURGE_DELAY_MS=1000")

enum { BLOCKS = 900 };                          /* of 1 MiB, three to a segment: 300 segments */
static void *blk[BLOCKS];

static void fill(int from, int to) {
  for (int i = from; i < to; i++) {
    blk[i] = hakmem_malloc(1 << 20);
    CHECK(blk[i] != NULL);
  }
}
static void drop(int from, int to) {
  for (int i = from; i < to; i++) hakmem_free(blk[i]);
}

/* Wait (up to 5 s) for the purger to leave at most keep segments mapped. */
static size_t wait_for(size_t keep) {
  hakmem_stats_t now;
  hakmem_stats_get(&now);
  for (int ms = 0; ms < 5000 && now.segments > keep; ms += 10) {
    test_sleep_ms(10);
    hakmem_stats_get(&now);
  }
  return now.segments;
}

TEST(a_burst_waits_and_is_taken_back) {
  test_companion_start();
  hakmem_stats_t base, a, b, c;
  hakmem_stats_get(&base);
  fill(0, BLOCKS);
  hakmem_stats_get(&a);
  drop(0, BLOCKS);
  hakmem_stats_get(&b);
  fill(0, BLOCKS);
  hakmem_stats_get(&c);
  NOTE("%zu segments emptied with %zu munmap calls; the next burst mapped %zu segments", a.segments - base.segments,
       b.munmap_calls - a.munmap_calls, c.segments - a.segments);
  CHECKF(a.segments - base.segments >= 290, "only %zu segments for 900 blocks of 1 MiB", a.segments - base.segments);
  CHECKF(b.munmap_calls == a.munmap_calls, "%zu munmap calls as 300 segments emptied", b.munmap_calls - a.munmap_calls);
  CHECKF(c.segments <= a.segments && c.mmap_calls == b.mmap_calls, "the burst right after mapped %zu segments anew",
         c.segments - b.segments);
  drop(0, BLOCKS);
  /* and what waits still goes (8 stay cached, and the heap keeps one) */
  size_t keep = base.segments + 8 + 1, left = wait_for(keep);
  CHECKF(left <= keep, "%zu segments still mapped 5 s after the bursts", left - base.segments);
}

TEST(retired_segments_go_by_age_while_reused) {
  test_companion_start();
  enum { HALF = 90, SOME = 36 };                /* 30 segments each; 12 */
  hakmem_stats_t base, full, now;
  hakmem_stats_get(&base);
  fill(0, 2 * HALF);                            /* (the 8 cached ones first) */
  hakmem_stats_get(&full);
  drop(0, HALF);                                /* 22 retired now, 8 cached */
  test_sleep_ms(500);
  drop(HALF, 2 * HALF);                         /* 22 more retired 500 ms later, and the first 8 */
  uint64_t later = test_now_ms();
  /* The program keeps taking retired segments back (12 segments: the one
   * its heap kept, the 8 cached and the 3 newest retired ones), so the ones
   * retired first go 1 s after their frees and the others wait 500 ms more. */
  size_t left = full.segments;
  for (int ms = 0; ms < 5000 && left > full.segments - 10; ms += 10) {
    fill(2 * HALF, 2 * HALF + SOME);
    drop(2 * HALF, 2 * HALF + SOME);
    test_sleep_ms(10);
    hakmem_stats_get(&now);
    left = now.segments;
  }
  /* (seen only after the later ones' delay too, on a machine too slow for
   * the window, the test cannot tell) */
  bool late = test_now_ms() - later >= 1000;
  NOTE("%zu of %zu segments left once the first ones went%s", left - base.segments, full.segments - base.segments,
       late ? " (seen too late to tell)" : "");
  CHECKF(left <= full.segments - 10, "the first ones still mapped 5 s after their frees (%zu of %zu left)",
         left - base.segments, full.segments - base.segments);
  CHECKF(late || left + 30 >= full.segments, "the later ones went with the first (%zu of %zu left)",
         left - base.segments, full.segments - base.segments);
  left = wait_for(base.segments + 9);
  CHECKF(left <= base.segments + 9, "%zu segments still mapped 5 s after the frees", left - base.segments);
}

TEST(unused_retired_segments_go_together) {
  test_companion_start();
  hakmem_stats_t base, a, b;
  hakmem_stats_get(&base);
  fill(0, 180);                                 /* 60 segments, emptied a group at a time */
  hakmem_stats_get(&a);
  for (int g = 0; g < 6; g++) {
    drop(g * 30, g * 30 + 30);
    test_sleep_ms(50);
  }
  /* Nothing takes them back: when the first group's delay has passed, the
   * whole list goes, in runs of adjacent segments. */
  size_t left = wait_for(base.segments + 9);
  hakmem_stats_get(&b);
  NOTE("%zu segments unmapped with %zu munmap calls", a.segments - left, b.munmap_calls - a.munmap_calls);
  CHECKF(left <= base.segments + 9, "%zu segments still mapped 5 s after the frees", left - base.segments);
  CHECKF(b.munmap_calls - a.munmap_calls <= 8, "%zu munmap calls for %zu segments (one per group and pass)",
         b.munmap_calls - a.munmap_calls, a.segments - left);
}

/* ---- emptied together by threads ------------------------------------------------- */
#define UW 4
#define UBLOCKS 36                              /* of 1 MiB: 12 segments a thread */
#define SEG ((uintptr_t)4 << 20)                /* segment size (internal.h) */
static pthread_barrier_t ubar;
static void *ublk[UW][UBLOCKS];
static void *uworker(void *arg) {
  void **b = ublk[(intptr_t)arg - 1];
  for (int i = 0; i < UBLOCKS; i++) {
    b[i] = hakmem_malloc(1 << 20);
    if (b[i]) memset(b[i], (int)(intptr_t)arg, 1 << 20);
  }
  pthread_barrier_wait(&ubar);                  /* main counts the segments */
  pthread_barrier_wait(&ubar);
  for (int i = 0; i < UBLOCKS; i++) hakmem_free(b[i]);
  return NULL;
}
static int by_address(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

TEST(segments_threads_emptied_go_together) {
  test_companion_start();
  hakmem_malloc_trim(0);                        /* from an empty cache and retired list */
  hakmem_stats_t a, peak, b;
  hakmem_stats_get(&a);
  pthread_t th[UW];
  pthread_barrier_init(&ubar, NULL, UW + 1);
  for (int i = 0; i < UW; i++) CHECK(pthread_create(&th[i], NULL, uworker, (void *)(intptr_t)(i + 1)) == 0);
  pthread_barrier_wait(&ubar);
  hakmem_stats_get(&peak);
  /* the threads' segments, ascending, and the runs of adjacent ones among
   * all but the lowest 8 (the cache keeps the lowest) */
  uintptr_t seg[UW * UBLOCKS];
  size_t nseg = 0, runs = 0;
  for (int t = 0; t < UW; t++)
    for (int i = 0; i < UBLOCKS; i++) {
      CHECK(ublk[t][i] != NULL);
      seg[nseg++] = (uintptr_t)ublk[t][i] & ~(SEG - 1);
    }
  qsort(seg, nseg, sizeof seg[0], by_address);
  size_t u = 0;
  for (size_t i = 0; i < nseg; i++)
    if (!u || seg[i] != seg[u - 1]) seg[u++] = seg[i];
  for (size_t i = 8; i < u; i++) runs += i == 8 || seg[i] != seg[i - 1] + SEG;
  pthread_barrier_wait(&ubar);
  for (int i = 0; i < UW; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&ubar);
  size_t keep = a.segments + 8 + 1, left = wait_for(keep);
  hakmem_stats_get(&b);
  size_t gone = peak.segments - left, calls = b.munmap_calls - a.munmap_calls;
  NOTE("%zu segments at the peak, %zu unmapped with %zu munmap calls (%zu runs)", peak.segments - a.segments, gone, calls,
       runs);
  CHECKF(left <= keep, "%zu segments still mapped 5 s after their threads freed everything", left - a.segments);
  /* One munmap per run: cached segments do not split them.  (Sanitizer
   * builds map without address hints, and trimming each new mapping into
   * alignment costs munmaps of its own.) */
  if (!test_sanitized())
    CHECKF(gone >= 30 && calls <= runs, "%zu segments unmapped with %zu munmap calls, in %zu runs", gone, calls, runs);
}

TEST_MAIN()
