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

#ifdef __cplusplus
}
#endif

#endif
