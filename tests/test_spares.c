/* Spare pages (heap.c): a class that keeps emptying pages and carving new
 * ones keeps its emptied pages, behind the page malloc takes from, for its
 * next refill, and gives back those it does not take back within two purge
 * delays.
 *
 *  - a refilling class takes its emptied pages back instead of carving new
 *    ones, and the spares not taken back go to their segments;
 *  - a class that empties pages without refilling them keeps none;
 *  - one-slice pages (blocks up to 8 KiB) are kept as longer ones are, up to
 *    CLASS_SPARES (8) a class;
 *  - two threads swapping 16-64 KiB blocks (their pages emptied by the
 *    other's frees, and refilled: thousands of spares kept and taken back)
 *    while a third calls malloc_trim, which takes the spares of the heaps it
 *    trims: every block keeps its contents, and once the two have exited
 *    (their spares go with their heaps) and the last blocks are freed, no
 *    page of those classes is left.
 *
 * One program of its own, with HAKMEM_THREAD_CACHE_KB=0: the blocks of 4 KiB
 * and more, whose pages are several slices long, then go back to their pages
 * as they are freed. */
#include "test.h"
#include "hakmem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

TEST_ENV("HAKMEM_THREAD_CACHE_KB=0")

enum { BIG = 32 << 10, G = 8 };                 /* 32 KiB blocks: 8 to a page of 4 slices */

static size_t class_pages(size_t size) {
  hakmem_class_stats_t cs;
  for (unsigned k = 0; hakmem_stats_class(k, &cs) == 0; k++)
    if (cs.block_size == size) return cs.pages;
  return (size_t)-1;
}

/* Fill 3 pages of size and free them, rounds times: each round carves two
 * pages right after two emptied. */
static void churn(size_t size, int per_page, int rounds) {
  void *p[3 * 32];
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < 3 * per_page; i++) { p[i] = hakmem_malloc(size); CHECK(p[i] != NULL); }
    for (int i = 0; i < 3 * per_page; i++) hakmem_free(p[i]);
  }
}

/* Slow-path work (blocks above 256 KiB) now and then, until pages of size
 * are down to want or 3 s have passed; the milliseconds it took. */
static int wait_pages(size_t size, size_t want) {
  int ms = 0;
  while (class_pages(size) > want && ms < 3000) {
    test_sleep_ms(12);
    ms += 12;
    for (int i = 0; i < 64; i++) {
      void *q = hakmem_malloc(300 << 10);
      CHECK(q != NULL);
      hakmem_free(q);
    }
  }
  return ms;
}

TEST(refilling_class_reuses_its_emptied_pages) {
  enum { PAGES = 10, N = G * PAGES, KEPT = 8 };
  static void *p[N];
  static char seen[N];
  churn(BIG, G, 20);
  size_t base = class_pages(BIG);
  for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(BIG); CHECK(p[i] != NULL); }
  size_t full = class_pages(BIG);
  CHECKF(full <= base + PAGES, "%zu pages of 32 KiB blocks before, %zu with %d blocks", base, full, N);
  /* The pages filled first are behind the one malloc takes from now: empty
   * them, and fill them again. */
  for (int i = 0; i < KEPT * G; i++) hakmem_free(p[i]);
  CHECKF(class_pages(BIG) == full, "%zu pages after emptying %d, %zu before", class_pages(BIG), KEPT, full);
  for (int i = 0; i < KEPT * G; i++) {
    void *q = hakmem_malloc(BIG);
    CHECK(q != NULL);
    int j = 0;
    while (j < KEPT * G && p[j] != q) j++;
    CHECKF(j < KEPT * G && !seen[j], "block %d of the refill (%p) is not one of the emptied pages'", i, q);
    if (j < KEPT * G) seen[j] = 1;
  }
  CHECKF(class_pages(BIG) == full, "%zu pages after the refill, %zu before", class_pages(BIG), full);
  /* Emptied again and left alone, they go back from the slow paths of other
   * work once their delay has passed.  The last page refilled is the one
   * malloc takes from: it stays. */
  for (int i = 0; i < KEPT * G; i++) hakmem_free(p[i]);
  CHECKF(class_pages(BIG) == full, "%zu pages after emptying them again, %zu before", class_pages(BIG), full);
  int ms = wait_pages(BIG, full - KEPT + 1);
  size_t after = class_pages(BIG);
  NOTE("pages of 32 KiB blocks: %zu, %zu with the blocks, %zu %d ms after the last frees", base, full, after, ms);
  CHECKF(after == full - KEPT + 1, "%zu pages of 32 KiB blocks %d ms after emptying %d of %zu", after, ms, KEPT, full);
  for (int i = KEPT * G; i < N; i++) hakmem_free(p[i]);
}

TEST(class_freeing_what_it_built_keeps_none) {
  enum { SIZE = 48 << 10, PER = 4, N = 10 * PER };   /* 48 KiB: 4 to a page of 3 slices */
  static void *p[N];
  size_t base = class_pages(SIZE);
  for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(SIZE); CHECK(p[i] != NULL); }
  size_t full = class_pages(SIZE);
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
  size_t after = class_pages(SIZE);
  CHECKF(after <= base + 1, "pages of 48 KiB blocks: %zu before, %zu with %d blocks, %zu after freeing them",
         base, full, N, after);
}

TEST(one_slice_pages_keep_up_to_8_spares) {
  enum { SIZE = 2048, PER = 32, EMPTIED = 10, N = (EMPTIED + 1) * PER, KEPT = 8 };   /* one-slice pages of 32 */
  static void *p[N];
  churn(SIZE, PER, 20);
  hakmem_malloc_trim(0);                        /* (the churn's spares: gone) */
  size_t base = class_pages(SIZE);
  churn(SIZE, PER, 20);
  for (int i = 0; i < N; i++) { p[i] = hakmem_malloc(SIZE); CHECK(p[i] != NULL); }
  size_t full = class_pages(SIZE);
  for (int i = 0; i < N - PER; i++) hakmem_free(p[i]);
  size_t after = class_pages(SIZE);
  NOTE("pages of 2 KiB blocks: %zu, %zu with %d blocks, %zu with the last page's", base, full, N, after);
  CHECKF(after == full - (EMPTIED - KEPT), "%zu pages of 2 KiB blocks after emptying %d of %zu", after, EMPTIED, full);
  for (int i = N - PER; i < N; i++) hakmem_free(p[i]);
}

/* ---- threads ------------------------------------------------------------- */

enum { SLOTS = 256 };
static _Atomic(unsigned char *) slot[SLOTS];
static _Atomic int swappers_left;

/* A block of n bytes: n in its first word, then tag, and tag in its last byte. */
static void fill(unsigned char *p, size_t n, uint64_t tag) {
  memcpy(p, &n, 8);
  memcpy(p + 8, &tag, 8);
  p[n - 1] = (unsigned char)tag;
}
static void check_and_free(unsigned char *p) {
  size_t n;
  uint64_t tag;
  memcpy(&n, p, 8);
  memcpy(&tag, p + 8, 8);
  CHECKF(n >= (16 << 10) && n <= (64 << 10) && p[n - 1] == (unsigned char)tag,
         "block %p: size %zu, tag %llx, last byte %u", (void *)p, n, (unsigned long long)tag, p[n - 1]);
  hakmem_free(p);
}

static void *swapper(void *arg) {
  uint64_t r = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  int steps = test_sanitized() ? 20000 : 200000;
  for (int i = 0; i < steps; i++) {
    uint64_t x = test_rand(&r);
    size_t n = (16 << 10) + (size_t)(x % (48 << 10));
    unsigned char *p = hakmem_malloc(n);
    CHECK(p != NULL);
    if (!p) break;
    fill(p, n, x);
    unsigned char *old = atomic_exchange(&slot[(x >> 32) % SLOTS], p);
    if (old) check_and_free(old);
  }
  atomic_fetch_sub(&swappers_left, 1);
  return NULL;
}

static void *trimmer(void *arg) {
  (void)arg;
  while (atomic_load(&swappers_left) > 0) {
    hakmem_malloc_trim(0);
    test_sleep_ms(1);
  }
  return NULL;
}

TEST(swapping_threads_with_malloc_trim) {
  atomic_store(&swappers_left, 2);
  pthread_t t[3];
  CHECK(pthread_create(&t[0], NULL, swapper, (void *)1) == 0);
  CHECK(pthread_create(&t[1], NULL, swapper, (void *)2) == 0);
  CHECK(pthread_create(&t[2], NULL, trimmer, NULL) == 0);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < SLOTS; i++) {
    unsigned char *p = atomic_exchange(&slot[i], NULL);
    if (p) check_and_free(p);
  }
  hakmem_malloc_trim(0);
  size_t left = 0;
  hakmem_class_stats_t cs;
  for (unsigned k = 0; hakmem_stats_class(k, &cs) == 0; k++)
    if (cs.block_size >= (16 << 10) && cs.block_size <= (64 << 10)) left += cs.pages;
  CHECKF(left == 0, "%zu pages of 16-64 KiB blocks after every block was freed and malloc_trim", left);
}

TEST_MAIN()
