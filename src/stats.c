/* stats.c — process-wide counters and the report printed at exit
 * (HAKMEM_STATS=1). */
#include "internal.h"
#include "options.h"
#include "stats.h"

_Atomic int64_t hm_stat[STAT_COUNT];
_Atomic int64_t hm_stat_peak[STAT_COUNT];

static int64_t get(int i) { return atomic_load_explicit(&hm_stat[i], memory_order_relaxed); }
static int64_t peak(int i) { return atomic_load_explicit(&hm_stat_peak[i], memory_order_relaxed); }

void stats_print(void) {
  hm_print(hm_stats_fd >= 0 ? hm_stats_fd : 2, "hakmem: statistics\n"
          "  mapped         %12lld bytes now, %lld peak\n"
          "  purged         %12lld bytes in total\n"
          "  segments       %12lld now, %lld peak;  huge blocks %lld now, %lld peak, %lld cached\n"
          "  pages          %12lld now, %lld peak\n"
          "  threads        %12lld live, %lld peak;  segments abandoned %lld, reclaimed %lld\n"
          "  os calls       mmap %lld, munmap %lld, madvise %lld, mremap %lld\n",
          (long long)get(STAT_MAPPED), (long long)peak(STAT_MAPPED), (long long)get(STAT_PURGED),
          (long long)get(STAT_SEGMENTS), (long long)peak(STAT_SEGMENTS),
          (long long)get(STAT_HUGE), (long long)peak(STAT_HUGE), (long long)get(STAT_HUGE_CACHED),
          (long long)get(STAT_PAGES), (long long)peak(STAT_PAGES),
          (long long)get(STAT_THREADS), (long long)peak(STAT_THREADS),
          (long long)get(STAT_ABANDONED), (long long)get(STAT_RECLAIMED),
          (long long)get(STAT_OS_MMAP), (long long)get(STAT_OS_MUNMAP),
          (long long)get(STAT_OS_MADVISE), (long long)get(STAT_OS_MREMAP));
}

/* Programs may close stderr before exiting (coreutils do): the report goes to
 * a private duplicate taken when the options were read. */
int hm_stats_fd = -1;

__attribute__((destructor)) static void stats_at_exit(void) {
  if (hm_options.stats) stats_print();
}
