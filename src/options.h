/* options.h — the HAKMEM_* settings, read at start-up and changed at run time
 * through hakmem_option_set (options.c). */
#ifndef HAKMEM_OPTIONS_H
#define HAKMEM_OPTIONS_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Atomic: hakmem_option_set may change one while any thread reads it. */
typedef struct options_s {
  _Atomic long purge_delay_ms;   /* HAKMEM_PURGE_DELAY_MS */
  _Atomic long segment_cache;    /* HAKMEM_SEGMENT_CACHE */
  _Atomic long huge_cache_mb;    /* HAKMEM_HUGE_CACHE_MB */
  _Atomic long hugepages;        /* HAKMEM_HUGEPAGES: 1 huge blocks and a big heap's segments
                                    while the program fills them, 2 all */
  _Atomic long thread_cache_kb;  /* HAKMEM_THREAD_CACHE_KB */
  _Atomic long background;       /* HAKMEM_BACKGROUND */
  _Atomic long secure;           /* HAKMEM_SECURE */
  _Atomic long stats;            /* HAKMEM_STATS */
  const char *profile;           /* HAKMEM_PROFILE: the heap profile's path prefix, or NULL */
  _Atomic long profile_rate;     /* HAKMEM_PROFILE_RATE */
  _Atomic long profile_signal;   /* HAKMEM_PROFILE_SIGNAL */
} options_t;

extern options_t hm_options;
/* Slow mode (stats, secure or profile on): malloc and free skip their fast
 * paths so each call can be counted, checked or sampled.  hm_counting (stats
 * or secure): every call is counted, and every page carries PAGE_SLOW
 * (hm_page_flags) to send free() there; profiling alone sends malloc's
 * misses to the profiler's pop (hm_malloc_profiled), keeps the thread caches
 * and marks only the pages holding sampled blocks (profile.c), besides the
 * pages that are slow from the start (page_start_flags).  Another thread's
 * free takes the slow path on a page with PAGE_SLOW, and only there (hot.h). */
extern bool hm_slow_mode;
extern bool hm_counting;
extern uint8_t hm_page_flags;
void options_init(void);
bool options_stats(void);      /* HAKMEM_STATS, read or not (the report at exit) */
#endif
