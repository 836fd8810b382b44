/* A multi-threaded program without the purger thread (HAKMEM_BACKGROUND=0):
 * segments emptied beyond the segment cache wait on the retired list, as
 * they do for the purger, and the threads' own slow paths unmap them once
 * their delay has passed (segcache.c).  Unmapping them at once made threads
 * that pass big blocks to each other map and fault in every segment again.
 *
 *  - a burst of 20 emptied segments unmaps nothing, and the next burst
 *    takes them back without mapping more;
 *  - once the delay has passed, the next big malloc unmaps the waiting ones;
 *  - a thread that exits unmaps them at once: no thread may call again.
 *
 * One program of its own, with HAKMEM_BACKGROUND=0 and
 * HAKMEM_PURGE_DELAY_MS=500 (the bursts, stretched by the sanitizer builds,
 * must fall within one delay). */
#include "test.h"
#include "companion.h"
#include "hakmem.h"

#include <pthread.h>

__attribute__((constructor(101))) static void settings(int argc, char **argv) {
  (void)argc;
  test_reexec_with("HAKMEM_BACKGROUND=0", argv);   /* (returns once it is set) */
  test_reexec_with("HAKMEM_PURGE_DELAY_MS=500", argv);
}

enum { BLOCKS = 60 };                           /* of 1 MiB, three to a segment: 20 segments */
static void *blk[BLOCKS];

static void fill(void) {
  for (int i = 0; i < BLOCKS; i++) {
    blk[i] = hakmem_malloc(1 << 20);
    CHECK(blk[i] != NULL);
    ((char *)blk[i])[0] = (char)i;
  }
}

TEST(emptied_segments_wait_for_a_thread_to_unmap_them) {
  test_companion_start();                       /* the process becomes multi-threaded */
  hakmem_stats_t base, a, b, c;
  hakmem_stats_get(&base);
  fill();
  hakmem_stats_get(&a);
  for (int i = 0; i < BLOCKS; i++) hakmem_free(blk[i]);
  hakmem_stats_get(&b);
  /* (nothing printed before the second burst: stdout's first buffer would
   * be a new page among the free runs the first burst left) */
  fill();                                       /* the waiting segments are taken back */
  hakmem_stats_get(&c);
  NOTE("%zu segments mapped for the blocks, %zu munmap calls as they emptied", a.segments - base.segments,
       b.munmap_calls - a.munmap_calls);
  CHECKF(a.segments - base.segments >= 18, "only %zu segments for 60 blocks of 1 MiB", a.segments - base.segments);
  CHECKF(b.munmap_calls == a.munmap_calls, "%zu munmap calls as the segments emptied", b.munmap_calls - a.munmap_calls);
  CHECKF(b.segments == a.segments, "%zu segments unmapped at once", a.segments - b.segments);
  CHECKF(c.segments == a.segments && c.mmap_calls == a.mmap_calls, "the second burst mapped %zu more segments (%zu mmap calls)",
         c.segments - a.segments, c.mmap_calls - a.mmap_calls);
  for (int i = 0; i < BLOCKS; i++) {
    CHECK(((char *)blk[i])[0] == (char)i);
    hakmem_free(blk[i]);
  }
  /* After the delay, this thread's next big malloc unmaps what waits (8 stay
   * cached, and the heap keeps one). */
  size_t keep = base.segments + 8 + 1;
  hakmem_stats_get(&c);
  for (int ms = 0; ms < 5000 && c.segments > keep; ms += 100) {
    test_sleep_ms(100);
    hakmem_free(hakmem_malloc(1 << 20));
    hakmem_stats_get(&c);
  }
  NOTE("%zu segments mapped after the delay, %zu munmap calls", c.segments - base.segments, c.munmap_calls - b.munmap_calls);
  CHECKF(c.segments <= keep, "%zu segments still mapped 5 s after the frees", c.segments - base.segments);
}

static void *fill_free_exit(void *arg) {
  fill();
  for (int i = 0; i < BLOCKS; i++) hakmem_free(blk[i]);
  return arg;
}

TEST(an_exiting_thread_unmaps_the_waiting_segments) {
  hakmem_stats_t base, after;
  hakmem_stats_get(&base);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fill_free_exit, NULL) == 0);
  pthread_join(t, NULL);
  hakmem_stats_get(&after);
  NOTE("%zu segments mapped before the thread, %zu after it exited (%zu munmap calls)", base.segments,
       after.segments, after.munmap_calls - base.munmap_calls);
  CHECKF(after.segments <= base.segments + 9, "%zu segments left mapped by the thread (8 may stay cached)",
         after.segments - base.segments);
}

TEST_MAIN()
