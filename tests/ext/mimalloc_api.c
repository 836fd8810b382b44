/* mimalloc_api.c — our versions of the cases of mimalloc's test/test-api.c
 * that the standard names can express (malloc, calloc, realloc,
 * reallocarray, posix_memalign, aligned_alloc, memalign, realpath; its
 * mi_heap, mi_urealloc, zalloc and STL cases have no standard equivalent).
 * mimalloc's realloc(p, 0) returns a block; glibc's frees p and returns
 * NULL, which is what is checked here. */
#include "ext.h"

#include <limits.h>
#include <malloc.h>
#include <pthread.h>

static bool aligned(const void *p, size_t a) { return p && ((uintptr_t)p & (a - 1)) == 0; }

TEST(malloc_zero) {
  void *p = malloc(0);
  CHECK(p != NULL);
  free(p);
  free(NULL);                            /* malloc-free-null */
}

TEST(malloc_nomem) {
  CHECK(malloc((size_t)PTRDIFF_MAX + 1) == NULL);
  CHECK(calloc((size_t)&malloc_usable_size, SIZE_MAX / 1000) == NULL);    /* calloc-overflow */
}

TEST(malloc_large) {
  char *p = malloc(67108872);            /* 64 MiB + 8 */
  CHECK(p != NULL);
  if (p) { p[0] = 1; p[67108871] = 2; }
  free(p);
}

TEST(calloc0) {
  void *p = calloc(0, 1000);
  CHECK(p != NULL);
  CHECKF(malloc_usable_size(p) < 1000, "calloc(0, 1000) has %zu usable bytes", malloc_usable_size(p));
  free(p);
}

/* On failure posix_memalign leaves the pointer as it was. */
TEST(posix_memalign_cases) {
  void *p = &p;
  CHECK(posix_memalign(&p, sizeof(void *), 32) == 0 && aligned(p, sizeof(void *)));
  free(p);
  p = &p;
  CHECK(posix_memalign(&p, 3, 32) == EINVAL && p == &p);
  CHECK(posix_memalign(&p, 3 * sizeof(void *), 32) == EINVAL && p == &p);
  CHECK(posix_memalign(&p, sizeof(void *), SIZE_MAX) == ENOMEM && p == &p);
  CHECK(posix_memalign(&p, sizeof(void *), 0) == 0 && p != &p);
  free(p);
}

TEST(aligned_small) {
  void *p = aligned_alloc(32, 32), *q = memalign(32, 48), *r = memalign(32, 48);
  CHECK(aligned(p, 32) && aligned(q, 32) && aligned(r, 32));
  free(r);
  free(q);
  free(p);
  for (int i = 0; i < 8; i++) {
    p = memalign(16, 8);                 /* malloc-aligned4, memalign1 */
    CHECK(aligned(p, 16));
    free(p);
  }
  p = memalign(0x100, 0x100);            /* mimalloc-aligned12 */
  CHECK(aligned(p, 0x100));
  free(p);
}

TEST(aligned_page_plus_one) {
  void *p = memalign(4096, 4097);
  size_t u = malloc_usable_size(p);
  CHECKF(aligned(p, 4096) && u >= 4097 && u < 16000, "memalign(4096, 4097): %p, %zu usable bytes", p, u);
  free(p);
}

TEST(aligned_huge_alignments) {
  for (size_t align = 1 << 20; align <= (16u << 20); align *= 2) {
    void *p = memalign(align, 1024);
    CHECKF(aligned(p, align), "memalign(%zu, 1024) = %p", align, p);
    free(p);
  }
}

/* Every alignment up to 2^27 with eight sizes (0 among them), all eight
 * blocks and a malloc(16) after them live at once: each aligned, none
 * overlapping another (as requested, a block of size 0 counting as one
 * byte), none's first bytes changed by filling the others (a block of size
 * 0 is not written: it may end in a guard page), all freed quietly. */
TEST(aligned_all_alignments) {
  const size_t A = 1 << 20;
  const size_t sizes[9] = {8, 512, 1 << 20, A, A + 1, 2 * A, 8 * A, 0, 16};
  size_t fill[9], span[9];
  for (int j = 0; j < 9; j++) {
    fill[j] = sizes[j] < 256 ? sizes[j] : 256;
    span[j] = fill[j] ? fill[j] : 1;
  }
  for (int shift = 0; shift <= 27; shift++) {
    size_t align = (size_t)1 << shift;
    char *p[9];
    for (int j = 0; j < 8; j++) {
      p[j] = memalign(align, sizes[j]);
      CHECKF(aligned(p[j], align), "memalign(%zu, %zu) = %p", align, sizes[j], (void *)p[j]);
    }
    p[8] = malloc(16);
    for (int j = 0; j < 9; j++) if (p[j]) ext_fill(p[j], fill[j], (uintptr_t)j << 8);
    for (int j = 0; j < 9; j++) {
      for (int k = j + 1; k < 9; k++)
        CHECKF(!p[j] || !p[k] || p[j] + span[j] <= p[k] || p[k] + span[k] <= p[j],
               "alignment %zu: the blocks of %zu bytes (%p) and of %zu bytes (%p) overlap%s", align, sizes[j],
               (void *)p[j], sizes[k], (void *)p[k], k == 8 ? " (the second is the malloc(16) after them)" : "");
      CHECKF(!p[j] || ext_intact(p[j], fill[j], (uintptr_t)j << 8), "alignment %zu: the block of %zu bytes was overwritten", align, sizes[j]);
    }
    for (int j = 0; j < 9; j++) {
      CONTEXT("free of memalign(%zu, %zu)'s block %p", align, sizes[j], (void *)p[j]);
      free(p[j]);
    }
    CONTEXT_CLEAR();
  }
}

TEST(aligned_growing) {
  void *p[11];
  int j = 0;
  for (size_t align = 1; j <= 10; align *= 2, j++) {
    p[j] = memalign(align, 43 + align);
    CHECKF(aligned(p[j], align), "memalign(%zu, %zu)", align, 43 + align);
  }
  while (j > 0) free(p[--j]);
}

TEST(aligned_every_small_size) {
  for (size_t size = 1; size <= 2048; size++)
    for (size_t align = 1; align <= size; align *= 2) {
      void *p[10];
      for (int i = 0; i < 10; i++) {
        p[i] = memalign(align, size);
        CHECKF(aligned(p[i], align), "memalign(%zu, %zu) = %p", align, size, p[i]);
      }
      for (int i = 0; i < 10; i++) free(p[i]);
    }
}

TEST(realloc_cases) {
  void *p = realloc(NULL, 4);
  CHECK(p != NULL);
  free(p);
  p = realloc(NULL, 0);
  CHECK(p != NULL);
  free(p);
  p = malloc(4);
  CHECK(realloc(p, 0) == NULL);          /* glibc: frees */
  errno = 0;
  p = reallocarray(NULL, 0, 16);
  CHECK(p != NULL && errno == 0);
  free(p);
  void *shared = NULL;                   /* realloc-guarded */
  for (int round = 0; round < 64; round++)
    for (int i = 0; i < 1024; i++) shared = realloc(shared, (size_t)i * 64);
  free(shared);
}

/* umalloc1 in standard names: usable sizes through a realloc. */
TEST(usable_through_realloc) {
  for (size_t size = 1; size <= (32u << 20); size *= 2) {
    char *p = malloc(size);
    CHECK(p && malloc_usable_size(p) >= size);
    if (!p) return;
    ext_fill(p, size, size);
    p = realloc(p, size + 1024);
    CHECKF(p && malloc_usable_size(p) >= size + 1024 && ext_intact(p, size, size), "realloc of %zu to %zu", size, size + 1024);
    free(p);
  }
}

static void *zero_aligned_first(void *ok) {
  void *p = memalign(16, 0);             /* the thread's first allocation */
  void *q = memalign(32, 0);
  *(bool *)ok = aligned(p, 16) && aligned(q, 32) && p != q;
  free(p);
  free(q);
  return NULL;
}

TEST(zero_aligned_first_on_thread) {
  bool ok = false;
  pthread_t t;
  pthread_create(&t, NULL, zero_aligned_first, &ok);
  pthread_join(t, NULL);
  CHECK(ok);
}

TEST(realpath_block) {
  char *s = realpath(".", NULL);
  CHECK(s && s[0] == '/');
  free(s);
}

TEST_MAIN()
