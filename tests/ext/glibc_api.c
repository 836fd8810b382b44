/* glibc_api.c — our versions of glibc's malloc/tst-*.c tests of the public
 * API's single-threaded contract: results and errno of malloc, calloc,
 * realloc, reallocarray, memalign, posix_memalign, aligned_alloc, valloc,
 * pvalloc and malloc_usable_size, as glibc's own tests check them (each case
 * is named after the glibc test it follows; tests/ext/README.md lists them).
 * Written from what those tests check, not from their code. */
#include "ext.h"

#include <gnu/libc-version.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Evaluate an allocation and report whether it failed with NULL and errno e. */
#define FAILS_WITH(call, e) ({ errno = 0; void *r_ = (call); int er_ = errno; free(r_); r_ == NULL && er_ == (e); })

/* First, as in glibc's test: glibc counts the blocks in its thread cache as
 * in use, so blocks freed by earlier cases would come back uncounted. */
TEST(tst_mallinfo2) {
  struct mallinfo2 mi1 = mallinfo2(), mi2;
  CHECK(sizeof mi1.arena == sizeof(size_t));
  static void *volatile keep[20];
  size_t total = 0;
  for (int i = 1; i < 20; i++) { keep[i] = malloc(160 * (size_t)i); total += 160 * (size_t)i; }
  mi2 = mallinfo2();
  CHECKF(mi2.uordblks >= mi1.uordblks + total, "uordblks %zu -> %zu after %zu bytes", mi1.uordblks, mi2.uordblks, total);
  for (int i = 1; i < 20; i++) free(keep[i]);
}

TEST(tst_malloc) {
  CHECK(FAILS_WITH(malloc(SIZE_MAX), ENOMEM));
  CHECK(FAILS_WITH(malloc((size_t)-512 * 1024), ENOMEM));
  CHECK(FAILS_WITH(malloc((size_t)PTRDIFF_MAX + 1), ENOMEM));
  void *p = malloc(10);
  CHECK(p != NULL);
  CHECK(realloc(p, 0) == NULL);          /* glibc: realloc(p, 0) frees p */
  p = malloc(0);
  CHECK(p != NULL);
  CHECK(realloc(p, 0) == NULL);
  p = malloc(513 * 1024);
  CHECK(p != NULL);
  free(p);
}

/* Blocks of one size, all zero when handed out, dirtied before they are
 * freed so the next round's calloc must clear reused memory. */
static void calloc_round(size_t n, size_t size, int count) {
  char **ptrs = malloc(sizeof *ptrs * (size_t)count);
  for (int round = 0; round < 2; round++) {
    int i;
    for (i = 0; i < count; i++) {
      ptrs[i] = calloc(n, size);
      if (!ptrs[i]) break;
      CHECKF(ext_zero(ptrs[i], n * size), "calloc(%zu, %zu) #%d not zeroed", n, size, i);
      memset(ptrs[i], 0xff, n * size);
    }
    CHECKF(i == count, "calloc(%zu, %zu) failed", n, size);
    while (i-- > 0) free(ptrs[i]);
  }
  free(ptrs);
}

TEST(tst_calloc) {
  static const size_t sizes[] = {15, 5, 17, 6, 31, 96};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) calloc_round(1, sizes[k], 50000);
  uint64_t r = 42;
  for (int i = 0; i < 2000; i++) calloc_round(1 + test_rand(&r) % 10, 1 + test_rand(&r) % 100, 5);
  /* large blocks, where a reused block may come from a cache of mappings */
  for (size_t size = 64 << 10; size <= (32u << 20); size *= 4) calloc_round(1, size + 24, 3);
  /* zero-sized requests: implementation-defined result, but no crash */
  free(calloc(0, 0));
  free(calloc(0, UINT_MAX));
  free(calloc(UINT_MAX, 0));
  free(calloc(0, SIZE_MAX));
  free(calloc(SIZE_MAX, 0));
  CHECK(FAILS_WITH(calloc(SIZE_MAX / 2 + 2, 2), ENOMEM));    /* n * size overflows */
}

TEST(tst_realloc) {
  CHECK(FAILS_WITH(realloc(NULL, SIZE_MAX), ENOMEM));
  void *p = realloc(NULL, 10);
  CHECK(p != NULL);
  free(p);
  unsigned char *c = calloc(20, 1);
  CHECK(c != NULL);
  c = realloc(c, 200);                   /* growing keeps the contents */
  CHECK(c != NULL && ext_zero(c, 20));
  free(c);
  c = realloc(NULL, 100);
  memset(c, 0xff, 100);
  c = realloc(c, 16);                    /* shrinking keeps the contents */
  CHECK(c != NULL);
  for (int i = 0; i < 16; i++) CHECK(c[i] == 0xff);
  errno = 0;
  CHECK(realloc(c, SIZE_MAX) == NULL);   /* a failed realloc leaves the block alone */
  CHECK(errno == ENOMEM);
  for (int i = 0; i < 16; i++) CHECK(c[i] == 0xff);
  CHECK(realloc(c, 0) == NULL);          /* frees (glibc) */
  p = realloc(NULL, 0);                  /* malloc(0) (glibc) */
  CHECK(p != NULL);
  free(p);
  /* growing through every size range, then back, contents kept */
  size_t n = 1;
  void *q = malloc(n);
  ext_fill(q, n, 7);
  for (; n < (64u << 20); n = n * 3 / 2 + 1) {
    q = realloc(q, n * 3 / 2 + 1);
    CHECKF(q && ext_intact(q, n, 7), "realloc to %zu lost the first %zu bytes", n * 3 / 2 + 1, n);
    if (!q) return;
    ext_fill(q, n * 3 / 2 + 1, 7);
  }
  for (; n > 1; n /= 3) {
    q = realloc(q, n);
    CHECKF(q && ext_intact(q, n, 7), "realloc down to %zu", n);
    if (!q) return;
  }
  free(q);
}

TEST(tst_reallocarray) {
  const size_t max = SIZE_MAX;
  CHECK(FAILS_WITH(reallocarray(NULL, max, 2), ENOMEM));
  CHECK(FAILS_WITH(reallocarray(NULL, 2, max), ENOMEM));
  CHECK(FAILS_WITH(reallocarray(NULL, 65537, max / 65537 + 1), ENOMEM));
  CHECK(FAILS_WITH(reallocarray(NULL, max / 65537 + 1, 65537), ENOMEM));
  unsigned char *p = reallocarray(NULL, 10, 2);
  CHECK(p && malloc_usable_size(p) >= 20);
  if (!p) return;
  memset(p, 0xaf, 20);
  p = reallocarray(p, 20, 2);
  CHECK(p && malloc_usable_size(p) >= 40);
  for (int i = 0; i < 20; i++) CHECK(p[i] == 0xaf);
  p = reallocarray(p, 5, 3);
  CHECK(p && malloc_usable_size(p) >= 15);
  errno = 0;
  CHECK(reallocarray(p, 2, max) == NULL && errno == ENOMEM);
  for (int i = 0; i < 15; i++) CHECK(p[i] == 0xaf);
  free(p);
}

TEST(tst_memalign) {
  size_t pg = page();
  CHECK(FAILS_WITH(memalign(sizeof(void *), SIZE_MAX), ENOMEM));
  CHECK(FAILS_WITH(memalign(pg, -pg), ENOMEM));
  CHECK(FAILS_WITH(memalign(SIZE_MAX, pg), EINVAL));
  void *p = memalign(sizeof(void *), 0);
  CHECK(p != NULL);
  free(p);
  p = memalign(0x100, 10);
  CHECK(p != NULL && ((uintptr_t)p & 0xff) == 0);
  free(p);
}

TEST(tst_posix_memalign) {
  size_t pg = page();
  void *p = NULL;
  errno = 0;
  CHECK(posix_memalign(&p, sizeof(void *), SIZE_MAX) == ENOMEM);
  CHECK(p == NULL);                      /* not written on failure */
  CHECKF(errno == ENOMEM, "errno %d after a failed posix_memalign (glibc: ENOMEM)", errno);
  CHECK(posix_memalign(&p, pg, -pg) == ENOMEM && p == NULL);
  CHECK(posix_memalign(&p, SIZE_MAX, pg) == EINVAL && p == NULL);
  CHECK(posix_memalign(&p, 0x300, 10) == EINVAL && p == NULL);      /* not a power of two */
  CHECK(posix_memalign(&p, 0, 10) == EINVAL && p == NULL);
  CHECK(posix_memalign(&p, sizeof(void *) / 2, 10) == EINVAL && p == NULL);  /* below sizeof(void *) */
  CHECK(posix_memalign(&p, sizeof(void *), 0) == 0 && p != NULL);
  free(p);
  p = NULL;
  CHECK(posix_memalign(&p, 0x100, 10) == 0 && p != NULL && ((uintptr_t)p & 0xff) == 0);
  free(p);
}

TEST(tst_aligned_alloc) {
  void *p1 = aligned_alloc(64, 64), *p2 = aligned_alloc(1, 64);
  CHECK(p1 != NULL && ((uintptr_t)p1 & 63) == 0);
  CHECK(p2 != NULL);
  free(p1);
  free(p2);
  void *p3 = aligned_alloc(SIZE_MAX / 2 + 1, 64);
  CHECK(p3 == NULL);
  /* C17 (DR 460) and glibc since 2.38 reject an alignment that is not a
   * power of two; older glibc rounds it up, as memalign does. */
  if (!ext_under_hakmem() && strverscmp(gnu_get_libc_version(), "2.38") < 0) {
    SKIP("glibc %s's aligned_alloc accepts any alignment (2.38 rejects 0 and 65)", gnu_get_libc_version());
    return;
  }
  CHECK(FAILS_WITH(aligned_alloc(65, 64), EINVAL));
  CHECK(FAILS_WITH(aligned_alloc(0, 64), EINVAL));
}

static void page_aligned_checks(void *(*fn)(size_t), const char *name) {
  size_t pg = page();
  CHECKF(FAILS_WITH(fn(SIZE_MAX), ENOMEM), "%s(SIZE_MAX)", name);
  CHECKF(FAILS_WITH(fn(-pg), ENOMEM), "%s(-pagesize)", name);
  void *p = fn(0);
  CHECKF(p != NULL, "%s(0) failed", name);
  free(p);
  p = fn(32);
  CHECKF(p && ((uintptr_t)p & (pg - 1)) == 0, "%s(32) = %p not page-aligned", name, p);
  free(p);
}

TEST(tst_valloc) { page_aligned_checks(valloc, "valloc"); }

TEST(tst_pvalloc) {
  page_aligned_checks(pvalloc, "pvalloc");
  char *p = pvalloc(5);                  /* pvalloc rounds the size up to pages (tst-pvalloc-fortify) */
  CHECK(p && malloc_usable_size(p) >= page());
  if (p) strcpy(p, "abcdefg");
  free(p);
}

TEST(tst_malloc_usable) {
  CHECK(malloc_usable_size(NULL) == 0);
  for (size_t n = 0; n < 70000; n += n < 4096 ? 1 : 997) {
    unsigned char *p = malloc(n);
    size_t u = malloc_usable_size(p);
    CHECKF(p && u >= n, "malloc_usable_size(malloc(%zu)) = %zu", n, u);
    if (p) memset(p, 0x5a, u);           /* all of it is usable */
    free(p);
  }
}

TEST(tst_mallocalign1) {
  static const size_t sizes[] = {2, 8, 13, 16, 23, 43, 123, 1000, 5000, 70000, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = malloc(sizes[i]);
    CHECKF(p && ((uintptr_t)p % _Alignof(max_align_t)) == 0, "malloc(%zu) = %p", sizes[i], p);
    free(p);
  }
}

/* glibc's tst-malloc-alternate-path: with the program break blocked by a
 * mapping, malloc still works (from mmap) and leaves the break alone. */
static int blocked_brk(void *unused) {
  char *brk0 = sbrk(0);
  size_t pg = page();
  char *next = (char *)(((uintptr_t)brk0 + pg - 1) & ~(pg - 1));
  if (mmap(next, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != next) return 2;
  if (sbrk((intptr_t)pg) != (void *)-1) return 3;
  for (size_t i = 0; i < pg / 16; i++) if (!malloc(16)) return 4;
  if (!malloc(10 << 20)) return 5;
  return sbrk(0) == brk0 ? 0 : 6;
}

TEST(tst_malloc_alternate_path) {
  ext_result_t r = ext_child(blocked_brk, NULL, 20000);
  CHECKF(ext_exited(&r, 0), "child: %s (2: no room at the break, 3: sbrk grew, 4/5: malloc failed, 6: break moved)", r.what);
}

TEST(tst_mallopt) {
  CHECK(mallopt(M_CHECK_ACTION, 1) == 1);
  CHECK(mallopt(M_MMAP_MAX, 64 * 1024) == 1);
  CHECK(mallopt(M_MMAP_THRESHOLD, 64 * 1024) == 1);
  CHECK(mallopt(M_MXFAST, 0) == 1);
  CHECK(mallopt(M_PERTURB, 0xa5) == 1);
  CHECK(mallopt(M_TOP_PAD, 64 * 1024) == 1);
  CHECK(mallopt(M_TRIM_THRESHOLD, -1) == 1);
  void *p = malloc(100);                 /* and allocation still works */
  CHECK(p != NULL);
  free(p);
}

/* The free blocks of four threads, then none: malloc_info writes glibc's XML
 * both times; an unknown option is EINVAL, returned as glibc returns it. */
static pthread_barrier_t info_barrier;
static void *info_thread(void *arg) {
  struct node { struct node *next; long pad[4]; } *head = NULL;
  for (size_t bytes = 0; bytes < (16u << 20); bytes += sizeof *head) {
    struct node *n = malloc(sizeof *n);
    if (!n) break;
    n->next = head;
    head = n;
  }
  pthread_barrier_wait(&info_barrier);
  pthread_barrier_wait(&info_barrier);
  while (head) { struct node *n = head->next; free(head); head = n; }
  return arg;
}

static void check_info_xml(const char *when) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  int rc = malloc_info(0, f);
  fclose(f);
  CHECKF(rc == 0, "malloc_info %s returned %d", when, rc);
  CHECKF(buf && strncmp(buf, "<malloc version=\"1\">", 20) == 0, "malloc_info %s: %.40s", when, buf ? buf : "(null)");
  CHECKF(buf && len > 10 && strcmp(buf + len - 10, "</malloc>\n") == 0, "malloc_info %s does not end with </malloc>", when);
  free(buf);
}

TEST(tst_malloc_info) {
  pthread_t t[4];
  pthread_barrier_init(&info_barrier, NULL, 5);
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, info_thread, NULL);
  pthread_barrier_wait(&info_barrier);
  check_info_xml("after allocation");
  pthread_barrier_wait(&info_barrier);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  check_info_xml("after deallocation");
  pthread_barrier_destroy(&info_barrier);
  FILE *f = fopen("/dev/null", "w");
  int rc = malloc_info(1, f);
  CHECKF(rc == EINVAL, "malloc_info(1, fp) returned %d (glibc: EINVAL, %d)", rc, EINVAL);
  fclose(f);
}

TEST_MAIN()
