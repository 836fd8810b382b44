/* Every API function and its error cases, through the hakmem_* names (so the
 * same tests run in the sanitizer builds, where malloc is the sanitizer's).
 *
 * What is asserted beyond the C standard is what README.md promises:
 *   - 16-byte alignment, malloc(0) unique and freeable;
 *   - usable size >= request, all of it writable, at most ~25 % rounding;
 *   - overflow or impossible size -> NULL + ENOMEM, old block intact;
 *   - realloc(p, 0) frees p and returns NULL (glibc's behaviour; checked
 *     also by the memory not accumulating);
 *   - posix_memalign EINVAL for alignments that are not a power-of-two
 *     multiple of sizeof(void *), *out untouched; aligned_alloc EINVAL for a
 *     non-power of two; memalign rounds the alignment up;
 *   - an invalid free/realloc prints a "hakmem:" line and aborts (checked in
 *     forked children). */
#include "test.h"
#include "hakmem.h"
#include "bad_free.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static int filled(const unsigned char *p, size_t n, unsigned char v) {
  size_t i = 0;
  uint64_t w = 0x0101010101010101ull * v;
  for (; i < n && ((uintptr_t)(p + i) & 7); i++) if (p[i] != v) return 0;
  for (; i + 8 <= n; i += 8) { uint64_t x; memcpy(&x, p + i, 8); if (x != w) return 0; }
  for (; i < n; i++) if (p[i] != v) return 0;
  return 1;
}
static int is_zero(const void *p, size_t n) { return filled(p, n, 0); }

/* A reference pattern: a block "holds the pattern at offset o" when its
 * bytes equal ref[o..o+n); checking is one memcmp. */
#define REF_MAX ((size_t)9 << 20)
static unsigned char ref[REF_MAX + 256];
static void ref_init(void) {
  static int done;
  if (done) return;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < sizeof ref; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; ref[i] = (unsigned char)x; }
  done = 1;
}

/* README: size classes (to 256 KiB) round up by at most 25 %.  Bigger blocks
 * are slice runs or mappings; a cached mapping up to 50 % larger may be
 * reused (huge.c), so allow that much there. */
static size_t max_waste(size_t n) {
  if (n <= 128) return 15;
  if (n <= ((size_t)256 << 10)) return n / 4 + 16;
  return n / 2 + ((size_t)64 << 10);
}

TEST(malloc_zero_unique) {
  enum { N = 1000 };
  static void *p[N];
  for (int i = 0; i < N; i++) {
    p[i] = hakmem_malloc(0);
    CHECKF(p[i] != NULL, "malloc(0) #%d returned NULL", i);
    if (!p[i]) return;
  }
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++)
      if (p[i] == p[j]) { CHECKF(0, "malloc(0) returned %p twice", p[i]); break; }
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
  void *a = hakmem_malloc(0);
  CHECK(a != NULL && ((uintptr_t)a & 15) == 0);
  hakmem_free(a);
}

/* Every size to 4 KiB, sizes around every power of two to 64 MiB and a
 * geometric sample: 16-byte aligned, usable >= size, all of it writable. */
static void check_size(size_t n) {
  unsigned char *p = hakmem_malloc(n);
  CHECKF(p && ((uintptr_t)p & 15) == 0, "malloc(%zu) gave %p", n, (void *)p);
  if (!p) return;
  size_t u = hakmem_malloc_usable_size(p);
  CHECKF(u >= n, "malloc(%zu): usable size %zu", n, u);
  CHECKF(u - n <= max_waste(n), "malloc(%zu): usable size %zu wastes too much", n, u);
  memset(p, 0xA5, u);
  CHECKF(p[0] == 0xA5 && p[u - 1] == 0xA5 && p[u / 2] == 0xA5, "malloc(%zu): usable bytes not kept", n);
  hakmem_free(p);
}
TEST(alignment_and_usable_size) {
  for (size_t n = 1; n <= 4096; n++) check_size(n);
  for (int k = 12; k <= 26; k++) {
    size_t b = (size_t)1 << k;
    check_size(b - 1); check_size(b); check_size(b + 1); check_size(b + b / 2);
  }
  for (size_t n = 4096; n <= ((size_t)64 << 20); n = n * 5 / 4 + 7) check_size(n);
  /* boundaries named in README: 256 KiB (largest class), 2 MiB (slice runs),
   * 4 MiB segments */
  size_t edges[] = {(256 << 10) - 16, (256 << 10) + 16, (2 << 20) - 4096, (2 << 20) + 4096,
                    (4 << 20) - (64 << 10), (4 << 20) - 1, (4 << 20) + 1, (8 << 20) + 12345};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) check_size(edges[i]);
  CHECK(hakmem_malloc_usable_size(NULL) == 0);
}

TEST(one_gigabyte) {
  size_t g = (size_t)1 << 30;
  unsigned char *p = hakmem_malloc(g);
  CHECK(p != NULL && ((uintptr_t)p & 15) == 0);
  if (!p) return;
  CHECK(hakmem_malloc_usable_size(p) >= g);
  p[0] = 1; p[g / 2] = 2; p[g - 1] = 3;
  unsigned char *q = hakmem_realloc(p, g + g / 2);
  CHECK(q != NULL);
  if (!q) { hakmem_free(p); return; }
  CHECK(q[0] == 1 && q[g / 2] == 2 && q[g - 1] == 3);
  q[g + g / 2 - 1] = 4;
  hakmem_free(q);
}

TEST(calloc_zero_and_reused) {
  for (int round = 0; round < 300; round++) {         /* random small sizes */
    size_t n = 1 + rnd() % 3000;
    unsigned char *p = hakmem_malloc(n);
    memset(p, 0xAA, hakmem_malloc_usable_size(p));
    hakmem_free(p);
    unsigned char *q = hakmem_calloc(1, n);
    CHECKF(q && is_zero(q, n), "calloc(1, %zu) after reuse not zero", n);
    hakmem_free(q);
  }
  /* The same size many times, in every range, with element counts > 1. */
  size_t sizes[] = {16, 48, 256, 1008, 4096, 16384, 65536, 200000, 262144, 262160,
                    1 << 20, (2 << 20) + 16, 3 << 20, 20 << 20};
  int reps = test_sanitized() ? 8 : 40;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (int k = 0; k < (sizes[i] > (4 << 20) ? 4 : reps); k++) {
      unsigned char *p = hakmem_malloc(sizes[i]);
      CHECK(p != NULL);
      if (!p) return;
      memset(p, 0xAA, hakmem_malloc_usable_size(p));
      hakmem_free(p);
      unsigned char *q = k & 1 ? hakmem_calloc(sizes[i] / 16, 16) : hakmem_calloc(sizes[i], 1);
      CHECKF(q && is_zero(q, sizes[i]), "calloc of %zu bytes after reuse not zero (round %d)", sizes[i], k);
      if (q) memset(q, 0xBB, sizes[i]);                 /* dirty it for the next round */
      hakmem_free(q);
    }
  }
  /* Small blocks dirty a region; freed (and trimmed) it is reused by big
   * calloc'd blocks, which must still read zero. */
  enum { N = 3000 };
  static void *v[N];
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < N; i++) { v[i] = hakmem_malloc(3000); if (v[i]) memset(v[i], 0xCC, 3000); }
    for (int i = 0; i < N; i++) hakmem_free(v[i]);
    if (pass) hakmem_malloc_trim(0);
    for (int i = 0; i < 8; i++) {
      size_t n = (size_t)(300 + 150 * i) << 10;
      unsigned char *q = hakmem_calloc(1, n);
      CHECKF(q && is_zero(q, n), "calloc(1, %zu) over reused small pages not zero (pass %d)", n, pass);
      v[i] = q;
    }
    for (int i = 0; i < 8; i++) hakmem_free(v[i]);
  }
  /* A large block grown by realloc, then freed: calloc must not see its bytes. */
  for (int k = 0; k < 4; k++) {
    unsigned char *p = hakmem_malloc(400000);
    memset(p, 0xDD, 400000);
    p = hakmem_realloc(p, 1500000);
    memset(p, 0xDD, 1500000);
    hakmem_free(p);
    unsigned char *q = hakmem_calloc(1500000, 1);
    CHECKF(q && is_zero(q, 1500000), "calloc(1500000) after a realloc'd block not zero");
    hakmem_free(q);
  }
}

TEST(calloc_overflow) {
  errno = 0;
  CHECK(hakmem_calloc(SIZE_MAX / 2 + 1, 3) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_calloc(3, SIZE_MAX / 2 + 1) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_calloc((size_t)1 << 33, (size_t)1 << 33) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_calloc(1, SIZE_MAX) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_calloc(SIZE_MAX, SIZE_MAX) == NULL && errno == ENOMEM);
  void *p = hakmem_calloc(0, 0);
  CHECK(p != NULL);
  hakmem_free(p);
  p = hakmem_calloc(0, SIZE_MAX);                  /* 0 bytes: no overflow */
  CHECK(p != NULL);
  hakmem_free(p);
}

TEST(huge_requests_fail_cleanly) {
  size_t bad[] = {SIZE_MAX, SIZE_MAX - 4096, SIZE_MAX - 15, (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX,
                  (size_t)1 << 62, (size_t)1 << 50};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    errno = 0;
    void *p = hakmem_malloc(bad[i]);
    CHECKF(p == NULL && errno == ENOMEM, "malloc(%zu) gave %p errno %d", bad[i], p, errno);
    errno = 0;
    p = hakmem_aligned_alloc(4096, bad[i]);
    CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(4096, %zu) gave %p errno %d", bad[i], p, errno);
    errno = 0;
    p = hakmem_memalign(64, bad[i]);
    CHECKF(p == NULL && errno == ENOMEM, "memalign(64, %zu) gave %p errno %d", bad[i], p, errno);
    errno = 0;
    p = hakmem_valloc(bad[i]);
    CHECKF(p == NULL && errno == ENOMEM, "valloc(%zu) gave %p errno %d", bad[i], p, errno);
    errno = 0;
    p = hakmem_realloc(NULL, bad[i]);
    CHECKF(p == NULL && errno == ENOMEM, "realloc(NULL, %zu) gave %p errno %d", bad[i], p, errno);
    void *out = (void *)0x5678;
    errno = 0;                              /* glibc leaves errno ENOMEM too */
    int rc = hakmem_posix_memalign(&out, 1 << 20, bad[i]);
    CHECKF(rc == ENOMEM && out == (void *)0x5678 && errno == ENOMEM, "posix_memalign(1 MiB, %zu): rc %d out %p errno %d",
           bad[i], rc, out, errno);
  }
  /* the allocator still works afterwards */
  void *p = hakmem_malloc(100);
  CHECK(p != NULL);
  hakmem_free(p);
}

/* A request RAM and swap could never back fails as under glibc (the kernel's
 * overcommit heuristic refuses the mapping), unless overcommit is "always". */
TEST(larger_than_memory_fails) {
  if (test_read_long("/proc/sys/vm/overcommit_memory") == 1) {
    SKIP("vm.overcommit_memory is 1: the kernel grants any mapping");
    return;
  }
  struct sysinfo si;
  CHECK(sysinfo(&si) == 0);
  size_t backing = ((size_t)si.totalram + si.totalswap) * si.mem_unit;
  size_t sizes[] = {4 * backing, 8 * backing + 12345, (size_t)16 << 40};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    errno = 0;
    void *p = hakmem_malloc(n);
    CHECKF(p == NULL && errno == ENOMEM, "malloc(%zu GiB) gave %p errno %d", n >> 30, p, errno);
    hakmem_free(p);
    errno = 0;
    p = hakmem_calloc(n / 64, 64);
    CHECKF(p == NULL && errno == ENOMEM, "calloc of %zu GiB gave %p errno %d", n >> 30, p, errno);
    hakmem_free(p);
    errno = 0;
    p = hakmem_aligned_alloc((size_t)8 << 20, n);
    CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(8 MiB, %zu GiB) gave %p errno %d", n >> 30, p, errno);
    hakmem_free(p);
    unsigned char *q = hakmem_malloc((size_t)8 << 20);   /* a huge block grown past memory */
    CHECK(q != NULL);
    if (!q) continue;
    memset(q, 9, 4096);
    errno = 0;
    p = hakmem_realloc(q, n);
    CHECKF(p == NULL && errno == ENOMEM, "realloc to %zu GiB gave %p errno %d", n >> 30, p, errno);
    CHECK(filled(q, 4096, 9));
    hakmem_free(p ? p : q);
  }
}

/* Alignments up to 64 MiB with size 0: each call returns its own block, which
 * no later block overlaps and which free takes back. */
TEST(aligned_size_zero_owns_its_block) {
  for (size_t a = 32; a <= ((size_t)64 << 20); a <<= 1) {
    for (int round = 0; round < 3; round++) {
      void *b[6] = {0};
      b[0] = hakmem_aligned_alloc(a, 0);
      b[1] = hakmem_memalign(a, 0);
      CHECKF(hakmem_posix_memalign(&b[2], a, 0) == 0, "posix_memalign(%zu, 0) failed", a);
      b[3] = hakmem_malloc(16);
      b[4] = hakmem_malloc(100);
      b[5] = hakmem_malloc(70000);
      for (int i = 0; i < 6; i++) {
        CHECKF(b[i] != NULL, "alignment %zu: block %d is NULL", a, i);
        if (i < 3) CHECKF(((uintptr_t)b[i] & (a - 1)) == 0, "alignment %zu: %p", a, b[i]);
      }
      for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
          if (i == j || !b[i] || !b[j]) continue;
          uintptr_t lo = (uintptr_t)b[i], hi = lo + (hakmem_malloc_usable_size(b[i]) ? hakmem_malloc_usable_size(b[i]) : 1);
          CHECKF((uintptr_t)b[j] < lo || (uintptr_t)b[j] >= hi, "alignment %zu: block %d (%p) lies in block %d (%p, %zu usable)",
                 a, j, b[j], i, b[i], hakmem_malloc_usable_size(b[i]));
        }
      for (int i = 0; i < 6; i++) hakmem_free(b[i]);
    }
  }
}

TEST(reallocarray) {
  unsigned char *p = hakmem_malloc(100);
  memset(p, 7, 100);
  errno = 0;
  CHECK(hakmem_reallocarray(p, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_reallocarray(p, 8, SIZE_MAX / 4) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_reallocarray(p, (size_t)1 << 40, (size_t)1 << 30) == NULL && errno == ENOMEM);
  CHECK(filled(p, 100, 7));
  unsigned char *q = hakmem_reallocarray(p, 50, 4);
  CHECK(q && filled(q, 100, 7) && hakmem_malloc_usable_size(q) >= 200);
  hakmem_free(q);
  q = hakmem_reallocarray(NULL, 30, 10);            /* = malloc(300) */
  CHECK(q && hakmem_malloc_usable_size(q) >= 300);
  hakmem_free(q);
}

TEST(realloc_null_and_zero) {
  unsigned char *p = hakmem_realloc(NULL, 40);      /* = malloc(40) */
  CHECK(p != NULL && ((uintptr_t)p & 15) == 0 && hakmem_malloc_usable_size(p) >= 40);
  if (p) memset(p, 1, 40);
  /* realloc(p, 0) frees p and returns NULL (README: glibc's behaviour). */
  size_t sizes[] = {40, 3000, 100000, 1 << 20, 5 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *q = hakmem_malloc(sizes[i]);
    void *r = hakmem_realloc(q, 0);
    CHECKF(r == NULL, "realloc(malloc(%zu), 0) returned %p, not NULL", sizes[i], r);
    hakmem_free(r);
  }
  void *r = hakmem_realloc(p, 0);
  CHECK(r == NULL);
  hakmem_free(r);
  /* ...and really frees: repeated, nothing accumulates. */
  if (!test_sanitized()) {
    long before = test_rss_kib();
    for (int i = 0; i < 200000; i++) { void *q = hakmem_malloc(1000); memset(q, 1, 1000); hakmem_free(hakmem_realloc(q, 0)); }
    for (int i = 0; i < 200; i++) { void *q = hakmem_malloc(3 << 20); memset(q, 1, 3 << 20); hakmem_free(hakmem_realloc(q, 0)); }
    long after = test_rss_kib();
    CHECKF(after - before < 64 * 1024, "RSS grew by %ld KiB over 200k realloc(p, 0)", after - before);
  }
}

TEST(realloc_keeps_content_across_sizes) {
  ref_init();
  size_t steps[] = {1, 8, 16, 17, 100, 128, 129, 1000, 1024, 1025, 4000, 9000, 33000, 100000, 262144,
                    262145, 500000, 1 << 20, 2 << 20, (2 << 20) + 1, 4 << 20, 5 << 20, 8 << 20};
  size_t ns = sizeof steps / sizeof steps[0];
  unsigned char *p = NULL;
  for (size_t i = 0; i < ns; i++) {          /* grow */
    size_t have = i ? steps[i - 1] : 0;
    unsigned char *q = hakmem_realloc(p, steps[i]);
    CHECKF(q != NULL, "realloc to %zu failed", steps[i]);
    if (!q) { hakmem_free(p); return; }
    p = q;
    CHECKF(((uintptr_t)p & 15) == 0 && hakmem_malloc_usable_size(p) >= steps[i], "realloc to %zu: %p", steps[i], (void *)p);
    CHECKF(memcmp(p, ref, have) == 0, "grow %zu -> %zu lost content", have, steps[i]);
    memcpy(p + have, ref + have, steps[i] - have);
  }
  for (size_t i = ns; i-- > 0;) {            /* shrink */
    unsigned char *q = hakmem_realloc(p, steps[i]);
    CHECKF(q != NULL, "realloc down to %zu failed", steps[i]);
    if (!q) { hakmem_free(p); return; }
    p = q;
    CHECKF(memcmp(p, ref, steps[i]) == 0, "shrink to %zu lost content", steps[i]);
  }
  hakmem_free(p);
}

/* A buffer grown by small appends is copied O(log n) times above 32 KiB, not
 * at every size class (four per doubling): a block that must move to grow
 * gets 50 % headroom.  From 33 KiB to 256 KiB (where blocks sit in class
 * pages and cannot grow in place) that is about 5 moves, against 12 class
 * steps; the content survives every one. */
TEST(realloc_appends_move_rarely) {
  ref_init();
  size_t len = 33 << 10;
  unsigned char *p = hakmem_malloc(len), *other = hakmem_malloc(64 << 10);
  CHECK(p != NULL && other != NULL);
  memcpy(p, ref, len);
  int moves = 0;
  while (len < (256 << 10) - 64) {
    unsigned char *q = hakmem_realloc(p, len + 64);
    CHECKF(q != NULL, "realloc to %zu failed", len + 64);
    if (!q) break;
    moves += q != p;
    p = q;
    len += 64;
    p[len - 1] = (unsigned char)len;
  }
  NOTE("%d moves growing a buffer from 33 to 256 KiB in 64-byte appends", moves);
  CHECKF(moves <= 7, "%d moves", moves);
  CHECKF(memcmp(p, ref, 33 << 10) == 0, "the first 33 KiB changed");
  for (size_t at = (33 << 10) + 64; at <= len; at += 64) CHECKF(p[at - 1] == (unsigned char)at, "byte %zu lost", at - 1);
  hakmem_free(p);
  hakmem_free(other);
}

/* Two buffers take turns on a random walk of sizes 1 B .. 8 MiB (log-uniform),
 * each realloc keeping the common prefix; a third block sits between them. */
TEST(realloc_random_walk) {
  ref_init();
  unsigned char *b[2] = {NULL, NULL};
  size_t len[2] = {0, 0};
  int steps = test_sanitized() ? 400 : 1500;
  for (int s = 0; s < steps; s++) {
    int k = s & 1;
    size_t n = (size_t)1 << (rnd() % 24);
    n += rnd() % n;
    if (n > REF_MAX) n = REF_MAX;
    unsigned char *q = hakmem_realloc(b[k], n);
    CHECKF(q != NULL, "realloc(%zu) failed", n);
    if (!q) break;
    size_t keep = n < len[k] ? n : len[k];
    CHECKF(memcmp(q, ref + k, keep) == 0, "step %d: realloc %zu -> %zu lost content", s, len[k], n);
    if (n > len[k]) memcpy(q + len[k], ref + k + len[k], n - len[k]);
    b[k] = q; len[k] = n;
    size_t between_size = 1 + rnd() % 5000;
    void *between = hakmem_malloc(between_size);       /* keep neighbours busy */
    if (s % 3) hakmem_free(between); else hakmem_free_sized(between, between_size);
  }
  hakmem_free(b[0]);
  hakmem_free(b[1]);
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
    errno = 0;
    CHECK(hakmem_realloc(p, (size_t)PTRDIFF_MAX + 1) == NULL && errno == ENOMEM);
    CHECK(filled(p, sizes[i], 9));
    unsigned char *q = hakmem_realloc(p, sizes[i] * 2);   /* still a live block */
    CHECK(q && filled(q, sizes[i], 9));
    hakmem_free(q ? q : p);
  }
}

TEST(realloc_aligned_block) {
  ref_init();
  size_t aligns[] = {64, 4096, 1 << 16, 1 << 20};
  for (size_t i = 0; i < 4; i++) {
    void *v = NULL;
    CHECK(hakmem_posix_memalign(&v, aligns[i], 1000) == 0);
    if (!v) continue;
    memcpy(v, ref, 1000);
    unsigned char *q = hakmem_realloc(v, 200000);
    CHECKF(q && memcmp(q, ref, 1000) == 0, "realloc of a %zu-aligned block lost content", aligns[i]);
    if (!q) { hakmem_free(v); continue; }
    q = hakmem_realloc(q, 10);
    CHECK(q && memcmp(q, ref, 10) == 0);
    hakmem_free(q);
  }
}

/* Big blocks aligned to 64 KiB and more start inside their slice run or
 * mapping: realloc (in place or moving, growing or shrinking) and the free
 * after it must still find the block. */
TEST(realloc_big_aligned_blocks) {
  ref_init();
  size_t sizes[] = {16, 100000, 300000, 1 << 20, 1376256, 3 << 20};
  int bad = 0;
  for (size_t a = 65536; a <= ((size_t)4 << 20); a <<= 1)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      size_t n = sizes[i], targets[] = {400000, 1500000, n * 2, n / 3 + 1};
      for (int k = 0; k < 4; k++) {
        size_t m = targets[k];
        void *p = NULL;
        CONTEXT("posix_memalign(%zu, %zu), realloc to %zu, free", a, n, m);
        if (hakmem_posix_memalign(&p, a, n) || ((uintptr_t)p & (a - 1))) { CHECKF(0, "posix_memalign(%zu, %zu)", a, n); continue; }
        memcpy(p, ref, n);
        unsigned char *q = hakmem_realloc(p, m);
        if (!q) { CHECKF(0, "realloc of a %zu-aligned %zu-byte block to %zu failed", a, n, m); hakmem_free(p); continue; }
        size_t u = hakmem_malloc_usable_size(q);
        int lost = memcmp(q, ref, n < m ? n : m) != 0;
        CHECKF(u >= m && !lost, "realloc of a %zu-aligned %zu-byte block to %zu: usable size %zu, content %s", a, n, m, u,
               lost ? "lost" : "kept");
        bad += u < m || lost;
        if (u >= m) memset(q, 0x5A, m);  /* all of it is ours */
        hakmem_free(q);
      }
    }
  CONTEXT_CLEAR();
  CHECK(bad == 0);
}

TEST(posix_memalign_all_alignments) {
  for (size_t a = sizeof(void *); a <= ((size_t)64 << 20); a <<= 1) {
    size_t sizes[] = {1, a / 2 + 1, a, 3 * a + 5, 100000};
    for (size_t i = 0; i < 5; i++) {
      void *p = (void *)1;
      int rc = hakmem_posix_memalign(&p, a, sizes[i]);
      CHECKF(rc == 0 && p && ((uintptr_t)p & (a - 1)) == 0, "align %zu size %zu: rc %d p %p", a, sizes[i], rc, p);
      if (rc) continue;
      size_t u = hakmem_malloc_usable_size(p);
      CHECKF(u >= sizes[i], "align %zu size %zu: usable %zu", a, sizes[i], u);
      if (u <= (1 << 20)) memset(p, 3, u);
      else { memset(p, 3, 1 << 16); memset((char *)p + u - (1 << 16), 3, 1 << 16); }
      hakmem_free(p);
    }
  }
}

TEST(posix_memalign_bad_alignment) {
  size_t bad[] = {0, 1, 2, 3, 4, 24, sizeof(void *) / 2, 12, 48, 4097, (size_t)1 << 63 | 8, SIZE_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    void *p = (void *)0x1234;
    errno = 1234;
    int rc = hakmem_posix_memalign(&p, bad[i], 64);
    CHECKF(rc == EINVAL && p == (void *)0x1234, "alignment %zu: rc %d, out %p", bad[i], rc, p);
    CHECKF(errno == 1234, "alignment %zu: posix_memalign changed errno to %d", bad[i], errno);
  }
  void *p = (void *)0x1234;
  CHECK(hakmem_posix_memalign(&p, 64, SIZE_MAX - 10) == ENOMEM && p == (void *)0x1234);
  p = NULL;                                                   /* size 0: a freeable pointer (or NULL) */
  CHECK(hakmem_posix_memalign(&p, 256, 0) == 0);
  CHECK(((uintptr_t)p & 255) == 0);
  hakmem_free(p);
}

TEST(aligned_alloc) {
  size_t bad[] = {0, 3, 24, 100, 4097, SIZE_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    errno = 0;
    void *p = hakmem_aligned_alloc(bad[i], 64);
    CHECKF(p == NULL && errno == EINVAL, "aligned_alloc(%zu, 64): %p errno %d", bad[i], p, errno);
  }
  for (size_t a = 1; a <= ((size_t)8 << 20); a <<= 1) {      /* any power of two, even below 8 */
    size_t n = 100 + a / 3;                                    /* not a multiple: accepted */
    unsigned char *p = hakmem_aligned_alloc(a, n);
    CHECKF(p && ((uintptr_t)p & (a - 1)) == 0 && ((uintptr_t)p & 15) == 0, "aligned_alloc(%zu, %zu) = %p", a, n, (void *)p);
    if (!p) continue;
    CHECK(hakmem_malloc_usable_size(p) >= n);
    memset(p, 5, n);
    hakmem_free(p);
  }
  void *p = hakmem_aligned_alloc(64, 100);
  CHECK(p && ((uintptr_t)p & 63) == 0);
  hakmem_free(p);
  p = hakmem_aligned_alloc(64, 0);      /* implementation-defined: NULL or freeable */
  hakmem_free(p);
}

TEST(memalign) {
  void *p = hakmem_memalign(48, 100);                  /* rounded up to 64, like glibc */
  CHECK(p && ((uintptr_t)p & 63) == 0);
  hakmem_free(p);
  p = hakmem_memalign(3000, 100);                      /* rounded up to 4096 */
  CHECK(p && ((uintptr_t)p & 4095) == 0);
  hakmem_free(p);
  size_t small[] = {0, 1, 2, 8};                       /* below 16: plain malloc */
  for (int i = 0; i < 4; i++) {
    p = hakmem_memalign(small[i], 10);
    CHECKF(p && ((uintptr_t)p & 15) == 0, "memalign(%zu, 10) = %p", small[i], p);
    hakmem_free(p);
  }
  for (size_t a = 16; a <= ((size_t)16 << 20); a <<= 2) {
    p = hakmem_memalign(a, a + 1);
    CHECKF(p && ((uintptr_t)p & (a - 1)) == 0 && hakmem_malloc_usable_size(p) > a, "memalign(%zu) = %p", a, p);
    if (p) memset(p, 1, a + 1);
    hakmem_free(p);
  }
  errno = 0;
  CHECK(hakmem_memalign(SIZE_MAX / 2 + 2, 10) == NULL && errno == EINVAL);
}

TEST(valloc_pvalloc) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void *p = hakmem_valloc(10);
  CHECK(p && ((uintptr_t)p % page) == 0 && hakmem_malloc_usable_size(p) >= 10);
  hakmem_free(p);
  p = hakmem_valloc(0);
  CHECK(p == NULL || ((uintptr_t)p % page) == 0);
  hakmem_free(p);
  p = hakmem_valloc(3 * page + 1);
  CHECK(p && ((uintptr_t)p % page) == 0 && hakmem_malloc_usable_size(p) >= 3 * page + 1);
  hakmem_free(p);
  p = hakmem_pvalloc(10);
  CHECK(p && ((uintptr_t)p % page) == 0 && hakmem_malloc_usable_size(p) >= page);
  if (p) memset(p, 1, page);
  hakmem_free(p);
  p = hakmem_pvalloc(0);                                 /* one page */
  CHECK(p && ((uintptr_t)p % page) == 0 && hakmem_malloc_usable_size(p) >= page);
  if (p) memset(p, 1, page);
  hakmem_free(p);
  p = hakmem_pvalloc(page + 1);
  CHECK(p && ((uintptr_t)p % page) == 0 && hakmem_malloc_usable_size(p) >= 2 * page);
  if (p) memset(p, 1, 2 * page);
  hakmem_free(p);
  errno = 0;
  CHECK(hakmem_pvalloc(SIZE_MAX - 10) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(hakmem_pvalloc(SIZE_MAX - page / 2) == NULL && errno == ENOMEM);   /* rounding overflows */
}

TEST(free_null_and_sized) {
  hakmem_free(NULL);
  hakmem_free_sized(NULL, 10);
  hakmem_free_aligned_sized(NULL, 64, 10);
  size_t sizes[] = {1, 77, 1000, 40000, 300000, 5 << 20};
  for (int round = 0; round < 3; round++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      void *p = hakmem_malloc(sizes[i]);
      CHECK(p != NULL);
      memset(p, 1, sizes[i]);
      hakmem_free_sized(p, sizes[i]);
      p = hakmem_malloc(sizes[i]);                    /* usable size is a valid size too */
      hakmem_free_sized(p, hakmem_malloc_usable_size(p));
    }
  size_t aligns[] = {32, 256, 4096, 1 << 20, 4 << 20};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    void *p = hakmem_aligned_alloc(aligns[i], 1000);
    CHECK(p && ((uintptr_t)p & (aligns[i] - 1)) == 0);
    hakmem_free_aligned_sized(p, aligns[i], 1000);
  }
  /* The memory comes back: a million sized frees do not accumulate. */
  long before = test_rss_kib();
  for (int i = 0; i < 1000000; i++) { void *p = hakmem_malloc(200 + i % 800); memset(p, 1, 64); hakmem_free_sized(p, 200 + i % 800); }
  if (!test_sanitized()) CHECKF(test_rss_kib() - before < 32 * 1024, "RSS grew %ld KiB", test_rss_kib() - before);
}

TEST(malloc_trim_releases) {
  enum { N = 4000 };
  static void *p[N];
  long base = test_rss_kib();
  for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(4000); memset(p[i], 1, 4000); }
  long full = test_rss_kib();
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
  int r = hakmem_malloc_trim(0);
  long trimmed = test_rss_kib();
  CHECKF(r == 1, "malloc_trim after freeing 16 MB returned %d", r);
  if (!test_sanitized())
    CHECKF(full - trimmed >= 8 * 1024, "RSS %ld KiB before, %ld KiB with 16 MB live, %ld KiB after free+trim",
           base, full, trimmed);
  r = hakmem_malloc_trim(0);
  CHECK(r == 0 || r == 1);
  r = hakmem_malloc_trim(1 << 20);
  CHECK(r == 0 || r == 1);
  void *q = hakmem_malloc(4000);                         /* still works after trimming */
  CHECK(q != NULL);
  hakmem_free(q);
}

/* 100k blocks from every allocation function: all distinct, none
 * overlapping, every usable byte writable; freed in random order. */
typedef struct { uintptr_t p; size_t u; size_t req; int kind; } rec_t;
static int cmp_rec(const void *a, const void *b) {
  uintptr_t x = ((const rec_t *)a)->p, y = ((const rec_t *)b)->p;
  return x < y ? -1 : x > y;
}
TEST(no_overlap_many_blocks) {
  enum { N = 100000 };
  rec_t *r = hakmem_malloc(N * sizeof *r);
  CHECK(r != NULL);
  if (!r) return;
  int nulls = 0;
  for (int i = 0; i < N; i++) {
    uint64_t x = rnd();
    int pct = (int)(x % 100);
    size_t n = pct < 87 ? 1 + (x >> 8) % 2048 : pct < 99 ? 1 + (x >> 8) % 40000 : 1 + (x >> 8) % 600000;
    void *p = NULL;
    int kind = (int)((x >> 40) % 10);
    if (kind == 0) p = hakmem_calloc(1, n);
    else if (kind == 1) { if (hakmem_posix_memalign(&p, (size_t)32 << ((x >> 50) % 8), n)) p = NULL; }
    else p = hakmem_malloc(n);
    if (!p) { nulls++; n = 0; }
    r[i].p = (uintptr_t)p;
    r[i].u = p ? hakmem_malloc_usable_size(p) : 0;
    r[i].req = n;
    r[i].kind = kind;
    CHECKF(r[i].u >= n, "usable %zu < %zu", r[i].u, n);
  }
  CHECKF(nulls == 0, "%d allocations returned NULL", nulls);
  qsort(r, N, sizeof *r, cmp_rec);
  for (int i = 1; i < N; i++)
    if (r[i - 1].p && r[i - 1].p + r[i - 1].u > r[i].p) {
      CHECKF(0, "block %p (+%zu usable) overlaps %p", (void *)r[i - 1].p, r[i - 1].u, (void *)r[i].p);
      break;
    }
  for (int i = 0; i < N; i++) if (r[i].p) memset((void *)r[i].p, (unsigned char)(i * 37 + 1), r[i].u);
  int bad = 0;
  for (int i = 0; i < N; i++)
    if (r[i].p && !filled((const unsigned char *)r[i].p, r[i].u, (unsigned char)(i * 37 + 1))) bad++;
  CHECKF(bad == 0, "%d blocks were overwritten by their neighbours' usable bytes", bad);
  for (int i = N - 1; i > 0; i--) { int j = (int)(rnd() % (uint64_t)(i + 1)); rec_t t = r[i]; r[i] = r[j]; r[j] = t; }
  for (int i = 0; i < N; i++) {
    if (r[i].kind == 2) hakmem_free_sized((void *)r[i].p, r[i].req);
    else hakmem_free((void *)r[i].p);
  }
  hakmem_free(r);
}

/* ---- invalid frees: "hakmem: ..." on stderr, then abort ------------------- */
TEST(invalid_free_detected) { run_bad_cases(); }

TEST_MAIN()
