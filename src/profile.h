/* profile.h — the sampling heap profiler (HAKMEM_PROFILE, profile.c).
 *
 * Profiling is a slow mode: with it on, malloc's fast path always misses,
 * and the miss goes to profile_malloc, which pops the block the fast path
 * would have and counts its bytes; the slow paths call profile_alloc; every
 * free of a block on a page holding sampled blocks (marked slow, as every
 * page of a first-class heap and of a large block is) calls profile_free
 * (the owner's, through profile_free_local).  With it off they are never
 * called and the fast paths hold no trace of it. */
#ifndef HAKMEM_PROFILE_H
#define HAKMEM_PROFILE_H
#include "internal.h"

extern bool hm_profiling;               /* HAKMEM_PROFILE is set */

void profile_init(void);                /* (options_init) */
void *profile_malloc(heap_t *h, size_t n, size_t c);   /* malloc's misses when profiling (hm_malloc_profiled) */
void profile_alloc(void *p, size_t n);  /* a slow path just allocated p for n bytes */
void profile_heap_taken(heap_t *h);    /* a thread takes heap h: its countdown drawn afresh */
void profile_free(void *p, page_t *pg); /* p, a block of pg, is about to be freed (or moved by realloc: pg NULL) */
bool profile_free_local(void *p, page_t *pg, bool to_cache);   /* free's slow path: the owner's free
                                                   on a page marked for its samples, done */
void profile_heap_destroyed(heap_t *h); /* hakmem_heap_destroy(h) frees every block of h */
void profile_stats(int fd);             /* the stats report's line; nothing when off */
void profile_fork_prepare(void);
void profile_fork_parent(void);
void profile_fork_child(bool locked);
int  hm_profile_dump(const char *prefix);
#endif
