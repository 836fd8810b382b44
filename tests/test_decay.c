/* How a single-threaded program, which has no purger thread, gives memory
 * back from its own slow paths (segment.c):
 *
 *  - a busy thread freeing a big structure over several purge delays: its
 *    segments drain, and the free runs between their live pages are not
 *    purged one madvise each while they do; once the frees stop, the next
 *    checks purge them (RSS falls);
 *  - segments pushed out of the segment cache are unmapped at once, and
 *    adjacent ones emptied together go with one munmap;
 *  - the segments the cache keeps are purged once their delay has passed,
 *    from the thread's next slow paths, not only when another segment empties
 *    (the heap's tick).  (A thread that runs on its fast paths alone takes no
 *    slow path, and purges nothing until it does: as mimalloc's.)
 *
 * One program of its own: the heap's purge delay adapts to what a program
 * did before (test_api's cases would have lengthened it). */
#include "test.h"
#include "hakmem.h"

#include <stdint.h>
#include <string.h>

TEST(draining_segments_not_purged_piecemeal) {
  enum { G = 32, PAGES = 250, N = G * PAGES, ROUNDS = 10 };   /* 2 KiB blocks: one-slice pages of 32 */
  static void *p[N];
  static int order[PAGES];
  hakmem_stats_t a, b, c;
  long full;
  size_t calls;
  uint64_t longest;
  /* A round of frees is meant to take far less than a purge delay; one that
   * took longer (the thread preempted: a loaded machine, a sanitizer) has the
   * heap's checks fall twice inside it, which is not what this tests: then
   * the case runs again, up to three times. */
  for (int attempt = 0;; attempt++) {
    hakmem_malloc_trim(0);
    for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(2048); CHECK(p[i] != NULL); memset(p[i], 1, 2048); }
    /* Every tenth page stays; the others are freed a page's blocks together,
     * pages in random order, over ROUNDS purge delays. */
    int n = 0;
    for (int g = 0; g < PAGES; g++) if (g % 10) order[n++] = g;
    uint64_t r = 0x2545F4914F6CDD1Dull;
    for (int i = n - 1; i > 0; i--) { int j = (int)(test_rand(&r) % (uint64_t)(i + 1)), t = order[i]; order[i] = order[j]; order[j] = t; }
    full = test_rss_kib();
    hakmem_stats_get(&a);
    longest = 0;
    for (int r = 0; r < ROUNDS; r++) {
      uint64_t t0 = test_now_ms();
      for (int k = r * n / ROUNDS; k < (r + 1) * n / ROUNDS; k++)
        for (int i = 0; i < G; i++) hakmem_free(p[order[k] * G + i]);
      uint64_t took = test_now_ms() - t0;
      if (took > longest) longest = took;
      test_sleep_ms(12);                       /* past the purge delay (10 ms) */
    }
    hakmem_stats_get(&b);
    calls = b.madvise_calls - a.madvise_calls;
    NOTE("%zu madvise calls while %zu segments drained (the longest round of frees: %llu ms)", calls, a.segments,
         (unsigned long long)longest);
    if (calls <= 4 || longest < 8 || attempt == 2) break;
    for (int g = 0; g < PAGES; g += 10)
      for (int i = 0; i < G; i++) hakmem_free(p[g * G + i]);
  }
  CHECKF(calls <= 4, "%zu madvise calls while the segments drained (the longest round of frees: %llu ms)", calls,
         (unsigned long long)longest);
  /* The frees have stopped: the thread's next slow paths purge (a block
   * above the classes takes one at each malloc and free). */
  for (int r = 0; r < 6; r++) {
    for (int i = 0; i < 128; i++) {
      void *q = hakmem_malloc(96 << 10), *big = hakmem_malloc(1 << 20);
      CHECK(q != NULL && big != NULL);
      if (q) memset(q, 2, 64);
      hakmem_free(big);
      hakmem_free(q);
    }
    test_sleep_ms(12);
  }
  hakmem_stats_get(&c);
  long now = test_rss_kib();
  NOTE("then %zu madvise calls; RSS %ld KiB with all blocks, %ld KiB after", c.madvise_calls - b.madvise_calls, full, now);
  CHECKF(c.madvise_calls > b.madvise_calls, "nothing purged after the frees stopped");
  if (!test_sanitized()) CHECKF(full - now >= 8 * 1024, "RSS %ld KiB with all blocks, %ld KiB after", full, now);
  for (int g = 0; g < PAGES; g += 10)
    for (int i = 0; i < G; i++) hakmem_free(p[g * G + i]);
}

TEST(emptied_segments_unmapped_in_runs) {
  enum { N = 96 };                             /* 96 x 1 MiB: 32 segments */
  static void *p[N];
  hakmem_malloc_trim(0);                       /* an empty segment cache */
  for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(1 << 20); CHECK(p[i] != NULL); memset(p[i], 1, 64); }
  hakmem_stats_t a, b;
  hakmem_stats_get(&a);
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
  hakmem_stats_get(&b);
  size_t gone = a.segments - b.segments, calls = b.munmap_calls - a.munmap_calls;
  NOTE("%zu segments unmapped with %zu munmap calls", gone, calls);
  CHECKF(gone >= 16, "only %zu of %zu segments unmapped (the cache keeps 8)", gone, a.segments);
  /* (sanitizer builds map without address hints: fewer segments adjoin) */
  if (!test_sanitized()) CHECKF(calls * 3 <= gone, "%zu segments unmapped with %zu munmap calls", gone, calls);
}

TEST(cached_segments_purged_after_delay) {
  enum { N = 12 };                             /* 12 x 1 MiB, written: 4 segments */
  static void *p[N];
  hakmem_malloc_trim(0);
  for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(1 << 20); CHECK(p[i] != NULL); memset(p[i], 1, 1 << 20); }
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
  hakmem_stats_t a, b;
  hakmem_stats_get(&a);
  long full = test_rss_kib();
  CHECKF(a.cached >= (size_t)8 << 20, "%zu bytes of empty segments cached", a.cached);
  /* Work that allocates and frees blocks now and then, long after the
   * cache's delay: one of 96 KiB (it waits in the thread cache) and one above
   * the classes (a slow path each: the heap's tick). */
  for (int r = 0; r < 6; r++) {
    test_sleep_ms(12);
    for (int i = 0; i < 128; i++) {
      void *q = hakmem_malloc(96 << 10), *big = hakmem_malloc(1 << 20);
      CHECK(q != NULL && big != NULL);
      if (q) memset(q, 2, 64);
      hakmem_free(big);
      hakmem_free(q);
    }
  }
  hakmem_stats_get(&b);
  long now = test_rss_kib();
  NOTE("%zu MiB of empty segments cached; committed %zu -> %zu MiB, RSS %ld -> %ld KiB",
       a.cached >> 20, a.committed >> 20, b.committed >> 20, full, now);
  CHECKF(a.committed - b.committed >= a.cached / 2, "committed %zu -> %zu bytes with %zu cached",
         a.committed, b.committed, a.cached);
  if (!test_sanitized()) CHECKF(full - now >= 6 * 1024, "RSS %ld -> %ld KiB", full, now);
}

TEST_MAIN()
