/* stats.h — process-wide counters.  Only slow-path events are counted here
 * (OS calls, segments, pages), so the counters cost nothing on the fast path. */
#ifndef HAKMEM_STATS_H
#define HAKMEM_STATS_H
#include <stdatomic.h>
#include <stdint.h>

enum {
  STAT_OS_MMAP, STAT_OS_MUNMAP, STAT_OS_MADVISE, STAT_OS_MREMAP,
  STAT_MAPPED,        /* bytes currently mapped */
  STAT_PURGED,        /* bytes purged (cumulative) */
  STAT_SEGMENTS,      /* normal segments mapped (in use or cached) */
  STAT_HUGE,          /* huge blocks live */
  STAT_HUGE_CACHED,   /* freed huge mappings kept for reuse */
  STAT_PAGES,         /* pages in use */
  STAT_ABANDONED,     /* segments abandoned by exiting threads (cumulative) */
  STAT_RECLAIMED,     /* segments adopted by live threads (cumulative) */
  STAT_THREADS,       /* live heaps */
  STAT_COUNT
};

extern _Atomic int64_t hm_stat[STAT_COUNT];
extern _Atomic int64_t hm_stat_peak[STAT_COUNT];

static inline void stat_add(int i, int64_t v) {
  int64_t now = atomic_fetch_add_explicit(&hm_stat[i], v, memory_order_relaxed) + v;
  int64_t peak = atomic_load_explicit(&hm_stat_peak[i], memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(&hm_stat_peak[i], &peak, now,
                                                               memory_order_relaxed, memory_order_relaxed)) {}
}
static inline void stat_sub(int i, int64_t v) { atomic_fetch_sub_explicit(&hm_stat[i], v, memory_order_relaxed); }
static inline void stat_inc(int i) { stat_add(i, 1); }
static inline void stat_dec(int i) { stat_sub(i, 1); }
static inline void stat_os(int i) { atomic_fetch_add_explicit(&hm_stat[i], 1, memory_order_relaxed); }

void stats_print(void);   /* the report printed at exit with HAKMEM_STATS=1 */
extern int hm_stats_fd;
#endif
