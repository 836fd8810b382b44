/* profile_tables.h — the heap profiler's tables, which its sampling
 * (profile.c) fills and its reports (profile_dump.c) read.
 *
 * All in memory from os_map (never from malloc), with fixed bounds: distinct
 * stacks, deduplicated by hash (STACKS of them; more are counted under one
 * overflow entry, 0), their frames, and the sampled blocks still live, by
 * address (SAMPLES; beyond, allocations are not sampled until some are
 * freed).  One lock guards them (profile_lock). */
#ifndef HAKMEM_PROFILE_TABLES_H
#define HAKMEM_PROFILE_TABLES_H
#include "internal.h"

#define FRAMES      128           /* frames kept per stack (the innermost) */
#define STACKS      (1u << 14)    /* distinct stacks (entry 0: the overflow) */
#define FRAME_POOL  (1u << 20)    /* frames of all stacks */
#define SAMPLES     (1u << 17)    /* sampled blocks live at once */
#define FILTER      (1u << 16)    /* counts of live samples by address hash */

typedef struct trace_s {
  uint64_t hash;
  uint32_t first, depth;          /* frames: pool[first .. first+depth), leaf first; a
                                     last frame 0 stands for the frames beyond FRAMES */
  uint64_t alloc_bytes, alloc_count;
  uint64_t live_bytes, live_count;
  uint64_t peak_bytes, peak_count;
} trace_t;

typedef struct sample_s {
  uintptr_t p;                    /* 0: empty slot */
  uint32_t trace;
  bool on_page;                   /* counted in its page's page_filter entry */
  uint64_t weight;
} sample_t;

typedef struct profile_tables_s {
  pthread_mutex_t lock;
  trace_t *traces;                /* [STACKS] */
  uint32_t *index;                /* [2 * STACKS]: trace numbers + 1 by hash, 0 empty */
  uintptr_t *pool;                /* [FRAME_POOL] */
  sample_t *samples;              /* [2 * SAMPLES] by address */
  _Atomic uint32_t *page_filter;  /* [FILTER]: live samples on the pages of each page hash */
  _Atomic uint32_t *filter;       /* [FILTER] */
  size_t map_size;
  uint32_t ntraces, npool, nsamples;
  uint64_t live, peak_copied, dropped;   /* estimated bytes live, at the last peak copy */
  _Atomic uint64_t lost;          /* frees of sampled blocks in signal handlers not recorded */
  _Atomic uint64_t walks, walks_slow;    /* stacks taken, and of them by backtrace() (profile_stack.c) */
  uintptr_t self_lo, self_hi;     /* hakmem's code, when a shared library */
  char prefix[256];
  long rate;
  int err_fd;                     /* stderr, taken at start: a program may close it before exit */
} profile_tables_t;

extern profile_tables_t hm_prof;
extern __thread bool hm_prof_busy;       /* sampling or dumping: allocations here are not sampled */
extern _Atomic int hm_prof_dump_wanted;  /* HAKMEM_PROFILE_SIGNAL arrived */

int  profile_stack(void **pc, int max);  /* (profile_stack.c) return addresses from the caller's, innermost first */
void profile_lock(void);
void profile_unlock(void);
void profile_dump_pending(void);         /* (profile_dump.c) the dump a signal asked for */
void profile_on_signal(int sig);         /* (profile_dump.c) HAKMEM_PROFILE_SIGNAL's handler */

static inline uint64_t hash_ptr(uintptr_t p) {
  uint64_t h = (uint64_t)p * 0x9E3779B97F4A7C15ULL;
  return h ^ (h >> 29);
}
#endif
