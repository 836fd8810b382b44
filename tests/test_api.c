/* Every API function and its error cases, through the hakmem_* names (so the
 * same tests run in the sanitizer builds, where malloc is the sanitizer's). */
#include "test.h"
#include "hakmem.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static int filled(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++) if (p[i] != v) return 0;
  return 1;
}

TEST(malloc_zero_unique) {
  void *a = hakmem_malloc(0), *b = hakmem_malloc(0);
  CHECK(a && b && a != b);
  CHECK(hakmem_malloc_usable_size(a) >= 1);
  hakmem_free(a);
  hakmem_free(b);
}

TEST(alignment_16_every_size) {
  for (size_t n = 1; n <= 4096; n++) {
    void *p = hakmem_malloc(n);
    CHECKF(p && ((uintptr_t)p & 15) == 0, "size %zu gave %p", n, p);
    hakmem_free(p);
  }
  for (size_t n = 4096; n <= ((size_t)64 << 20); n = n * 3 / 2 + 7) {
    void *p = hakmem_malloc(n);
    CHECKF(p && ((uintptr_t)p & 15) == 0, "size %zu gave %p", n, p);
    hakmem_free(p);
  }
}

TEST(usable_size_writable) {
  size_t sizes[] = {1, 15, 16, 17, 100, 129, 1000, 1025, 5000, 40000, 200000, 262145, 700000, 2100000, 5000000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    unsigned char *p = hakmem_malloc(n);
    CHECK(p != NULL);
    if (!p) continue;
    size_t u = hakmem_malloc_usable_size(p);
    CHECKF(u >= n, "size %zu: usable %zu", n, u);
    CHECKF(n <= 128 ? u - n < 16 : (u - n) <= n / 4 + 4096 || u < 2 * n, "size %zu: usable %zu is wasteful", n, u);
    memset(p, 0xA5, u);
    CHECK(filled(p, u, 0xA5));
    hakmem_free(p);
  }
  CHECK(hakmem_malloc_usable_size(NULL) == 0);
}

TEST(calloc_zero_and_reused) {
  for (int round = 0; round < 200; round++) {
    size_t n = 1 + rnd() % 3000;
    unsigned char *p = hakmem_malloc(n);
    memset(p, 0xAA, n);
    hakmem_free(p);
    unsigned char *q = hakmem_calloc(1, n);
    CHECKF(q && filled(q, n, 0), "calloc(1, %zu) not zero", n);
    hakmem_free(q);
  }
  size_t big[] = {300000, 1 << 20, 3 << 20, 20 << 20};
  for (size_t i = 0; i < 4; i++) {
    for (int k = 0; k < 3; k++) {
      unsigned char *p = hakmem_malloc(big[i]);
      memset(p, 0x55, big[i]);
      hakmem_free(p);
      unsigned char *q = hakmem_calloc(big[i], 1);
      CHECKF(q && filled(q, big[i], 0), "calloc(%zu) after reuse not zero", big[i]);
      hakmem_free(q);
    }
  }
}

TEST(calloc_overflow) {
  errno = 0;
  CHECK(hakmem_calloc(SIZE_MAX / 2 + 1, 3) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_calloc(3, SIZE_MAX / 2 + 1) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_calloc((size_t)1 << 33, (size_t)1 << 33) == NULL && errno == ENOMEM);
  void *p = hakmem_calloc(0, 0);
  CHECK(p != NULL);
  hakmem_free(p);
}

TEST(huge_requests_fail_cleanly) {
  size_t bad[] = {SIZE_MAX, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX, (size_t)1 << 62};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    errno = 0;
    void *p = hakmem_malloc(bad[i]);
    CHECKF(p == NULL && errno == ENOMEM, "malloc(%zu) gave %p errno %d", bad[i], p, errno);
    errno = 0;
    p = hakmem_aligned_alloc(4096, bad[i]);
    CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(4096, %zu) gave %p errno %d", bad[i], p, errno);
  }
}

TEST(reallocarray_overflow_keeps_block) {
  unsigned char *p = hakmem_malloc(100);
  memset(p, 7, 100);
  errno = 0;
  CHECK(hakmem_reallocarray(p, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
  CHECK(filled(p, 100, 7));
  unsigned char *q = hakmem_reallocarray(p, 50, 4);
  CHECK(q && filled(q, 100, 7));
  hakmem_free(q);
}

TEST(realloc_null_and_zero) {
  unsigned char *p = hakmem_realloc(NULL, 40);
  CHECK(p != NULL);
  memset(p, 1, 40);
  void *r = hakmem_realloc(p, 0);   /* frees; glibc returns NULL */
  CHECK(r == NULL);
}

TEST(realloc_keeps_content_across_sizes) {
  size_t steps[] = {1, 8, 16, 17, 100, 128, 129, 1000, 1024, 1025, 4000, 9000, 33000, 100000, 262144,
                    262145, 500000, 1 << 20, 2 << 20, (2 << 20) + 1, 5 << 20, 9 << 20};
  size_t ns = sizeof steps / sizeof steps[0];
  unsigned char *p = NULL;
  size_t have = 0;
  for (size_t i = 0; i < ns; i++) {          /* grow */
    p = hakmem_realloc(p, steps[i]);
    CHECK(p != NULL);
    if (!p) return;
    for (size_t k = 0; k < have; k++)
      if (p[k] != (unsigned char)(k * 31)) { CHECKF(0, "grow to %zu lost byte %zu", steps[i], k); break; }
    for (size_t k = have; k < steps[i]; k++) p[k] = (unsigned char)(k * 31);
    have = steps[i];
  }
  for (size_t i = ns; i-- > 0;) {            /* shrink */
    p = hakmem_realloc(p, steps[i]);
    CHECK(p != NULL);
    if (!p) return;
    for (size_t k = 0; k < steps[i]; k++)
      if (p[k] != (unsigned char)(k * 31)) { CHECKF(0, "shrink to %zu lost byte %zu", steps[i], k); break; }
  }
  hakmem_free(p);
}

TEST(realloc_failure_keeps_block) {
  size_t sizes[] = {50, 5000, 300000, 3 << 20};
  for (size_t i = 0; i < 4; i++) {
    unsigned char *p = hakmem_malloc(sizes[i]);
    memset(p, 9, sizes[i]);
    errno = 0;
    CHECK(hakmem_realloc(p, SIZE_MAX - 100) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(hakmem_realloc(p, (size_t)1 << 62) == NULL && errno == ENOMEM);
    CHECK(filled(p, sizes[i], 9));
    hakmem_free(p);
  }
}

TEST(posix_memalign_all_alignments) {
  for (size_t a = sizeof(void *); a <= ((size_t)64 << 20); a <<= 1) {
    size_t sizes[] = {1, a / 2 + 1, a, 3 * a + 5, 100000};
    for (size_t i = 0; i < 5; i++) {
      void *p = (void *)1;
      int rc = hakmem_posix_memalign(&p, a, sizes[i]);
      CHECKF(rc == 0 && p && ((uintptr_t)p & (a - 1)) == 0, "align %zu size %zu: rc %d p %p", a, sizes[i], rc, p);
      if (rc) continue;
      CHECK(hakmem_malloc_usable_size(p) >= sizes[i]);
      memset(p, 3, sizes[i]);
      hakmem_free(p);
    }
  }
}

TEST(posix_memalign_bad_alignment) {
  size_t bad[] = {0, 3, 24, sizeof(void *) / 2, 12, (size_t)1 << 63 | 8};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    void *p = (void *)0x1234;
    int rc = hakmem_posix_memalign(&p, bad[i], 64);
    CHECKF(rc == EINVAL && p == (void *)0x1234, "alignment %zu: rc %d, out %p", bad[i], rc, p);
  }
  void *p = (void *)0x1234;
  CHECK(hakmem_posix_memalign(&p, 64, SIZE_MAX - 10) == ENOMEM && p == (void *)0x1234);
}

TEST(aligned_alloc_and_memalign) {
  errno = 0;
  CHECK(hakmem_aligned_alloc(3, 64) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(hakmem_aligned_alloc(0, 64) == NULL && errno == EINVAL);
  void *p = hakmem_aligned_alloc(64, 100);        /* size need not be a multiple */
  CHECK(p && ((uintptr_t)p & 63) == 0);
  hakmem_free(p);
  p = hakmem_memalign(48, 100);                    /* rounded up to 64, like glibc */
  CHECK(p && ((uintptr_t)p & 63) == 0);
  hakmem_free(p);
  p = hakmem_memalign(1 << 20, 10);
  CHECK(p && ((uintptr_t)p & ((1 << 20) - 1)) == 0);
  hakmem_free(p);
  errno = 0;
  CHECK(hakmem_memalign(SIZE_MAX / 2 + 2, 10) == NULL && errno == EINVAL);
}

TEST(valloc_pvalloc) {
  long page = sysconf(_SC_PAGESIZE);
  void *p = hakmem_valloc(10);
  CHECK(p && ((uintptr_t)p % (uintptr_t)page) == 0);
  hakmem_free(p);
  p = hakmem_pvalloc(10);
  CHECK(p && ((uintptr_t)p % (uintptr_t)page) == 0 && hakmem_malloc_usable_size(p) >= (size_t)page);
  memset(p, 1, (size_t)page);
  hakmem_free(p);
  p = hakmem_pvalloc(0);
  CHECK(p && hakmem_malloc_usable_size(p) >= (size_t)page);
  hakmem_free(p);
  p = hakmem_pvalloc((size_t)page + 1);
  CHECK(p && hakmem_malloc_usable_size(p) >= 2 * (size_t)page);
  hakmem_free(p);
  errno = 0;
  CHECK(hakmem_pvalloc(SIZE_MAX - 10) == NULL && errno == ENOMEM);
}

TEST(free_null_and_sized) {
  hakmem_free(NULL);
  hakmem_free_sized(NULL, 10);
  void *p = hakmem_malloc(77);
  hakmem_free_sized(p, 77);
  p = hakmem_aligned_alloc(256, 1000);
  hakmem_free_aligned_sized(p, 256, 1000);
  p = hakmem_malloc(5 << 20);
  hakmem_free_sized(p, 5 << 20);
}

TEST(malloc_trim_releases) {
  enum { N = 4000 };
  static void *p[N];
  for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(4000); memset(p[i], 1, 4000); }
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
  int r = hakmem_malloc_trim(0);
  CHECKF(r == 1, "malloc_trim after freeing 16 MB returned %d", r);
  CHECK(hakmem_malloc_trim(0) == 0 || hakmem_malloc_trim(0) == 1);
}

/* 100k blocks of random sizes: all distinct, none overlapping. */
static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}
TEST(no_overlap) {
  enum { N = 100000 };
  uintptr_t *ptr = hakmem_malloc(N * 2 * sizeof(uintptr_t));
  for (int i = 0; i < N; i++) {
    size_t n = rnd() % 100 < 95 ? 1 + rnd() % 2048 : 1 + rnd() % 400000;
    void *p = hakmem_malloc(n);
    CHECK(p != NULL);
    ptr[2 * i] = (uintptr_t)p;
    ptr[2 * i + 1] = hakmem_malloc_usable_size(p);
  }
  qsort(ptr, N, 2 * sizeof(uintptr_t), cmp_ptr);
  for (int i = 1; i < N; i++)
    if (ptr[2 * (i - 1)] + ptr[2 * (i - 1) + 1] > ptr[2 * i]) {
      CHECKF(0, "block %p (+%zu) overlaps %p", (void *)ptr[2 * (i - 1)], (size_t)ptr[2 * (i - 1) + 1], (void *)ptr[2 * i]);
      break;
    }
  for (int i = 0; i < N; i++) hakmem_free((void *)ptr[2 * i]);
  hakmem_free(ptr);
}

TEST_MAIN()
