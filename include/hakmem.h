/* hakmem — a general-purpose memory allocator.
 *
 * Linking with -lhakmem (or preloading libhakmem.so) replaces malloc, free and
 * the rest of the C and C++ allocation API.  The hakmem_* functions below are
 * the same allocator under names that never clash with the C library, for
 * programs that want hakmem next to another malloc.
 */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void  *hakmem_malloc(size_t size);
void   hakmem_free(void *p);
void  *hakmem_calloc(size_t n, size_t size);
void  *hakmem_realloc(void *p, size_t size);
void  *hakmem_reallocarray(void *p, size_t n, size_t size);
int    hakmem_posix_memalign(void **out, size_t alignment, size_t size);
void  *hakmem_aligned_alloc(size_t alignment, size_t size);
void  *hakmem_memalign(size_t alignment, size_t size);
void  *hakmem_valloc(size_t size);
void  *hakmem_pvalloc(size_t size);
size_t hakmem_malloc_usable_size(const void *p);
/* free with the size (or alignment) the block was requested with; the size is
 * checked against the block, so a wrong size is reported, not trusted. */
void   hakmem_free_sized(void *p, size_t size);
void   hakmem_free_aligned_sized(void *p, size_t alignment, size_t size);
/* Return free memory to the OS now; 1 if anything was released. */
int    hakmem_malloc_trim(size_t pad);

/* ---- first-class heaps ------------------------------------------------------
 * A heap of its own for a request's or a parse's objects, released at once.
 * hakmem_heap_new makes one (NULL with ENOMEM); only the thread that made it
 * may allocate from it or end it (another thread's call is reported, then
 * abort).  Its blocks are ordinary blocks: free, realloc and
 * malloc_usable_size take them from any thread (realloc may move one into
 * the calling thread's own heap).  hakmem_heap_realloc keeps a block that
 * fits, else moves it into the heap.
 * hakmem_heap_destroy frees every block of the heap at once, in time
 * proportional to its pages, not its blocks; its blocks must no longer be
 * used, nor freed, by any thread.  hakmem_heap_delete ends the heap but
 * keeps its blocks: they go on in the calling thread's own heap.  A thread
 * that exits deletes the heaps it made and did not end. */
typedef struct heap_s hakmem_heap_t;
hakmem_heap_t *hakmem_heap_new(void);
void  *hakmem_heap_malloc(hakmem_heap_t *heap, size_t size);
void  *hakmem_heap_calloc(hakmem_heap_t *heap, size_t n, size_t size);
void  *hakmem_heap_realloc(hakmem_heap_t *heap, void *p, size_t size);
void  *hakmem_heap_aligned_alloc(hakmem_heap_t *heap, size_t alignment, size_t size);
void   hakmem_heap_delete(hakmem_heap_t *heap);
void   hakmem_heap_destroy(hakmem_heap_t *heap);

/* ---- run-time control -------------------------------------------------------
 * hakmem_collect(0): this thread's heap gives back now what it holds free
 * (its caches, its empty pages, the blocks other threads freed to it), its
 * free memory purged whatever the delay; no other thread is disturbed.
 * hakmem_collect(1): every heap, as malloc_trim(0).
 *
 * The options of the HAKMEM_* variables (README: Options), by the variable's
 * name or the rest after HAKMEM_, in any case ("purge_delay_ms"):
 * hakmem_option_get stores the value in *value; hakmem_option_set takes
 * effect from the next decision that reads it (the next purge's delay, the
 * next segment cached; "background" starts or stops the purger at once).
 * Both return 0, or EINVAL for an unknown name or a value out of the
 * option's range; set returns EPERM for an option fixed at start-up
 * (secure, stats, thread_cache_kb, profile_rate, profile_signal) unless the
 * value is the current one; HAKMEM_PROFILE, a path, is no option here. */
void   hakmem_collect(int force);
int    hakmem_option_get(const char *name, long *value);
int    hakmem_option_set(const char *name, long value);

/* ---- statistics -------------------------------------------------------------
 * A snapshot of the whole process (every thread's memory), taken by walking
 * hakmem's segments: cheap enough to call now and then, not per allocation.
 * Blocks other threads are allocating or freeing meanwhile may be off by a few.
 * The fields marked (stats) are counted only when HAKMEM_STATS=1, else 0. */
typedef struct hakmem_stats_s {
  size_t in_use;          /* bytes in blocks handed out and not yet freed (block sizes) */
  size_t committed;       /* bytes of hakmem's memory that may be resident */
  size_t mapped;          /* bytes of address space mapped from the OS */
  size_t peak_mapped;     /* the highest value mapped has had */
  size_t cached;          /* of mapped: empty segments and freed big blocks kept for reuse */
  size_t purged;          /* bytes returned to the OS (madvise) since start */
  size_t segments;        /* 4 MiB segments mapped */
  size_t huge_blocks;     /* live blocks with a mapping of their own (above 4032 KiB, or
                             grown by realloc past 2 MiB) */
  size_t threads;         /* threads that have a heap */
  size_t mmap_calls, munmap_calls, madvise_calls, mremap_calls, mprotect_calls;
  size_t mallocs, frees;  /* (stats) allocations and frees since start */
  size_t requested;       /* (stats) bytes requested since start */
  size_t remote_frees;    /* (stats) frees of blocks another thread allocated */
  size_t thread_cached;   /* bytes in freed blocks that threads keep for reuse (HAKMEM_THREAD_CACHE_KB) */
  size_t thread_cache_hits, thread_cache_misses;  /* (stats) 4-256 KiB mallocs served by it, and not */
  size_t huge_page_resident; /* bytes of the process in transparent huge pages (AnonHugePages;
                             HAKMEM_HUGEPAGES), the whole process's, not only hakmem's */
} hakmem_stats_t;
void hakmem_stats_get(hakmem_stats_t *out);

/* Per size class: k = 0 .. hakmem_stats_class returns -1 past the last one;
 * the last two are "large" (up to 4032 KiB) and "huge" blocks (block_size 0). */
typedef struct hakmem_class_stats_s {
  size_t block_size;      /* bytes per block */
  size_t pages;           /* pages serving the class */
  size_t in_use;          /* blocks handed out and not yet freed */
  size_t capacity;        /* blocks carved in those pages */
  size_t mallocs, frees;  /* (stats) since start */
  size_t peak;            /* (stats) most blocks in use at once */
} hakmem_class_stats_t;
int  hakmem_stats_class(unsigned k, hakmem_class_stats_t *out);

/* The report HAKMEM_STATS=1 prints at exit (and malloc_stats() to stderr). */
void hakmem_stats_print(int fd);

/* ---- heap profile -----------------------------------------------------------
 * With HAKMEM_PROFILE=PREFIX set (see the README), write the heap profile now:
 * PATH.live, PATH.peak and PATH.alloc (the live heap, the live heap at its
 * peak, everything allocated, by call stack), each as .folded (flame graph
 * tools' input) and .svg (a flame graph).  0, or -1 if profiling is off or a
 * file could not be written. */
int hakmem_profile_dump(const char *path);

#ifdef __cplusplus
}
#endif

#endif
