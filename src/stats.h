/* stats.h — process-wide counters, the census of memory, and the report.
 *
 * Slow-path events (OS calls, segments, threads) are always counted; pages,
 * which a program of big blocks makes and frees on every call, are counted
 * by the census instead.  Per-call
 * counts (allocations and frees per class, thread-cache hits, remote frees)
 * exist only in slow mode (HAKMEM_STATS=1), where malloc and free bypass their
 * fast paths; with stats off the fast paths contain no counting at all. */
#ifndef HAKMEM_STATS_H
#define HAKMEM_STATS_H
#include <stdatomic.h>
#include <stdint.h>
#include "internal.h"
#include "options.h"
#include "profile.h"

enum {
  STAT_OS_MMAP, STAT_OS_MUNMAP, STAT_OS_MADVISE, STAT_OS_MREMAP, STAT_OS_MPROTECT,
  STAT_MAPPED,        /* bytes currently mapped */
  STAT_PURGED,        /* bytes purged (cumulative) */
  STAT_SEGMENTS,      /* normal segments mapped (in use or cached) */
  STAT_HUGE,          /* huge blocks live */
  STAT_HUGE_CACHED,   /* freed huge mappings kept for reuse */
  STAT_ABANDONED,     /* segments abandoned by exiting threads (cumulative) */
  STAT_RECLAIMED,     /* segments adopted by live threads (cumulative) */
  STAT_TRIMMED,       /* pages the purger took back from quiet threads (cumulative) */
  STAT_THREADS,       /* live heaps */
  /* slow mode only (cumulative) */
  STAT_REQUESTED,     /* bytes asked for by malloc & co. */
  STAT_TC_HITS,       /* 4-256 KiB mallocs served by the thread cache */
  STAT_TC_MISSES,     /* 4-256 KiB mallocs that found it empty */
  STAT_HITS,          /* mallocs served by the class's current page */
  STAT_REFILLS,       /* mallocs that had to collect, carve or find another page */
  STAT_REMOTE_SENT,   /* frees of blocks owned by another thread */
  STAT_REMOTE_RECEIVED, /* such blocks taken back by their owner */
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
/* a cumulative count (no peak) */
static inline void stat_count(int i, int64_t v) { atomic_fetch_add_explicit(&hm_stat[i], v, memory_order_relaxed); }
static inline void stat_os(int i) { stat_count(i, 1); }

/* slow mode: one allocation of requested bytes at p, one free of a block of pg */
void stats_count_alloc(const void *p, size_t requested);
void stats_count_free(const page_t *pg);
/* What the slow paths of malloc and free tell slow mode: the counts, the
 * heap profile (profile.c). */
static inline void slow_mode_alloc(void *p, size_t requested) {
  if (hm_counting) stats_count_alloc(p, requested);
  if (hm_profiling) profile_alloc(p, requested);
}
static inline void slow_mode_free(void *p, page_t *pg) {
  if (hm_counting) stats_count_free(pg);
  if (hm_profiling) profile_free(p, pg);
}

/* A walk over every segment (registry.c): blocks per class and memory. */
typedef struct census_s {
  struct { uint64_t pages, used, capacity; } cls[CLASSES + 2];  /* classes, large, huge */
  uint64_t mapped, committed, cached, in_use, segments;
  uint64_t huge_bytes, huge_mapped;   /* live huge blocks: block bytes, mapping bytes */
  uint64_t purgeable;                 /* resident but free: what malloc_trim returns */
  uint64_t thread_cached;             /* free blocks in thread caches */
} census_t;
void registry_census(census_t *c);           /* (blocks in thread caches count as used) */

#include <malloc.h>
#include <stdio.h>
#include "hakmem.h"
void stats_print(int fd);
void hm_stats_get(hakmem_stats_t *st);
int  hm_stats_class(unsigned k, hakmem_class_stats_t *out);
void hm_stats_print(int fd);
struct mallinfo2 hm_mallinfo2(void);
struct mallinfo hm_mallinfo(void);
int  hm_mallopt(int param, int value);
void hm_malloc_stats(void);
int  hm_malloc_info(int options, FILE *fp);   /* the report: at exit with HAKMEM_STATS=1, and malloc_stats() */
extern int hm_stats_fd;
#endif
