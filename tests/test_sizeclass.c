/* Unit tests of hakmem's internals: size classes, pointer -> page lookup for
 * every class, free's block-start test, malloc's size -> page table, slice carving and release, the segment map, huge blocks,
 * aligned OS mappings. */
#include "test.h"
#include "internal.h"
#include "hakmem.h"
#include "stats.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

TEST(class_round_trip) {
  CHECK(class_size(CLASSES - 1) == MEDIUM_MAX);
  for (size_t c = 0; c < CLASSES; c++) {
    CHECKF(class_size(c) % 16 == 0, "class %zu size %zu not a multiple of 16", c, class_size(c));
    CHECKF(size_class(class_size(c)) == c, "class %zu does not map back", c);
    if (c) CHECKF(class_size(c) > class_size(c - 1), "class %zu not increasing", c);
  }
  for (size_t n = 0; n <= MEDIUM_MAX; n++) {
    size_t c = size_class(n);
    if (c >= CLASSES || class_size(c) < n || (c && class_size(c - 1) >= n)) {
      CHECKF(0, "size %zu maps to class %zu (size %zu): not the smallest fitting class", n, c,
             c < CLASSES ? class_size(c) : 0);
      break;
    }
    /* 16-byte steps up to 128 B, then waste below 25 % of the request, and
     * below 12.5 % for a 4 KiB page with a header of up to 512 bytes */
    size_t w = class_size(c) - n;
    if (n && (n <= 128 ? w >= 16 : w * 4 >= n || (n > 4096 && n <= SIZE_4K5 && w * 8 >= n))) {
      CHECKF(0, "size %zu rounds to %zu: waste %zu", n, class_size(c), class_size(c) - n);
      break;
    }
  }
}

/* The thread caches' classes: from SMALL_MAX (exclusive) to MEDIUM_MAX,
 * multiples of 512 bytes (malloc's direct[] has an entry per 512 bytes above
 * 32 KiB, DIRECT_BIG). */
TEST(thread_cache_classes) {
  CHECK(class_size(TC_MIN - 1) == SMALL_MAX);
  CHECK(class_size(TC_MIN) == 4096);
  CHECK(class_size(CLASS_OVER_32K - 1) == TABLE_MAX);
  CHECK(class_size(TC_MIN + TC_CLASSES - 1) == MEDIUM_MAX);
  CHECK(TC_MIN + TC_CLASSES == CLASSES);
  for (size_t c = TC_MIN; c < TC_MIN + TC_CLASSES; c++)
    CHECKF(class_size(c) % 512 == 0, "class %zu: %zu bytes", c, class_size(c));
}

/* malloc's fast path takes the class of sizes up to MEDIUM_MAX from tables
 * the compiler filled in (16-byte steps to SMALL_MAX, then 512-byte steps):
 * they must agree with size_class for every size. */
TEST(class_tables_match) {
  for (size_t n = 0; n <= MEDIUM_MAX; n++)
    if (class_of(n) != size_class(n)) {
      CHECKF(0, "size %zu: the tables say class %zu, size_class %zu", n, class_of(n), size_class(n));
      break;
    }
}

TEST(page_lookup_every_class) {
  for (size_t c = 0; c < CLASSES; c++) {
    size_t n = class_size(c);
    void *p[3];
    for (int i = 0; i < 3; i++) {
      p[i] = hakmem_malloc(n - (i == 1 ? 15 : 0));
      CHECKF(p[i] != NULL, "class %zu: malloc failed", c);
      if (!p[i]) return;
      segment_t *s = segment_checked(p[i]);
      CHECKF(s != NULL, "class %zu: block %p not in the segment map", c, p[i]);
      if (!s) return;
      page_t *pg = page_of(s, p[i]);
      CHECKF(pg->cls == c, "class %zu: page says class %u", c, pg->cls);
      CHECKF(pg->block_size == n, "class %zu: block size %zu", c, pg->block_size);
      CHECKF(((uintptr_t)p[i] - (uintptr_t)pg->start) % n == 0, "class %zu: %p not a block start", c, p[i]);
      CHECKF(((uintptr_t)p[i] & 15) == 0, "class %zu: %p not 16-byte aligned", c, p[i]);
      CHECKF(hakmem_malloc_usable_size(p[i]) == n, "class %zu: usable %zu", c, hakmem_malloc_usable_size(p[i]));
      CHECKF(atomic_load(&pg->heap) == hm_tls_heap, "class %zu: page not owned by this thread", c);
      memset(p[i], 0x5a, n);
    }
    for (int i = 0; i < 3; i++) hakmem_free(p[i]);
  }
}

/* Free's block-start test (hm_block_start: one multiply and one compare)
 * against the arithmetic it stands for: for every class, every offset from
 * two blocks before the page's start to two after its carved blocks, at
 * whole and partial carvings, then offsets across the segment either side;
 * and a page of one block, whose start alone passes. */
static bool is_start(page_t *pg, intptr_t off, size_t carved) {
  return off >= 0 && (size_t)off % pg->block_size == 0 && (size_t)off / pg->block_size < carved;
}
TEST(block_start_test_is_exact) {
  page_t pg;
  memset(&pg, 0, sizeof pg);
  size_t bad = 0;
  for (size_t c = 0; c < CLASSES && !bad; c++) {
    size_t d = class_size(c), cap = (4 * SLICE_SIZE) / d, carve[] = { 0, 1, cap / 2, cap };
    pg.block_size = d;
    page_set_magic(&pg, false);
    for (size_t k = 0; k < sizeof carve / sizeof carve[0] && !bad; k++) {
      page_set_area(&pg, carve[k] * d);
      for (intptr_t off = -(intptr_t)(2 * d); off < (intptr_t)((cap + 2) * d) && !bad; off++)
        if (hm_block_start(&pg, (uintptr_t)off) != is_start(&pg, off, carve[k])) {
          CHECKF(0, "class %zu (%zu B), %zu carved: offset %td judged wrong", c, d, carve[k], off);
          bad++;
        }
      for (intptr_t off = -(intptr_t)SEG_SIZE; off <= (intptr_t)SEG_SIZE && !bad; off += 7)
        if (hm_block_start(&pg, (uintptr_t)off) != is_start(&pg, off, carve[k])) {
          CHECKF(0, "class %zu (%zu B), %zu carved: offset %td judged wrong", c, d, carve[k], off);
          bad++;
        }
    }
  }
  size_t sizes[] = { MEDIUM_MAX + 16, LARGE_MAX, (size_t)5 << 30 };   /* large, huge (above 4 GiB) */
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    pg.block_size = sizes[k];
    page_set_magic(&pg, true);
    page_set_area(&pg, sizes[k]);
    CHECK(hm_block_start(&pg, 0));
    for (uintptr_t off = 1; off < ((uintptr_t)1 << 40); off = off * 3 + 1) CHECK(!hm_block_start(&pg, off));
    CHECK(!hm_block_start(&pg, (uintptr_t)-1) && !hm_block_start(&pg, sizes[k]));
  }
}

/* malloc's fast path finds a small size's page in direct[], which must be
 * the first page of its class's queue (or the empty page), as the pages
 * change. */
static list_t *first_list(heap_t *h, size_t c) {
  return h->queue[c].first ? &h->queue[c].first->list : &hm_page_empty.list;
}
TEST(direct_pages_follow_the_queues) {
  heap_t *h = hm_tls_heap;
  void *keep[CLASS_4K][40];
  for (int round = 0; round < 40; round++) {
    for (size_t c = 0; c < CLASS_4K; c++) keep[c][round] = hakmem_malloc(class_size(c));
    h = hm_tls_heap;
    for (size_t i = 0; i <= SMALL_MAX / 16; i++) {
      size_t c = size_class(i * 16);
      CHECKF(h->direct[i] == first_list(h, c), "size %zu: direct list %p, first page of class %zu %p", i * 16,
             (void *)h->direct[i], c, (void *)first_list(h, c));
      if (h->direct[i] != first_list(h, c)) return;
    }
  }
  for (size_t c = 0; c < CLASS_4K; c++)
    for (int round = 0; round < 40; round++) hakmem_free(keep[c][round]);
  for (size_t i = 0; i <= SMALL_MAX / 16; i++)
    CHECKF(h->direct[i] == first_list(h, size_class(i * 16)), "size %zu: direct page not the first after the frees",
           i * 16);
  /* above 3.5 KiB: the thread cache of the size's class (its pop line), or
   * with the caches off the class's first page */
  for (size_t i = SMALL_MAX / 16 + 1; i < DIRECT_N; i++) {
    size_t n = direct_size(i), c = size_class(n);
    list_t *want = tcache_fast(c) ? &h->tc[c - TC_MIN].l : first_list(h, c);
    if (h->direct[i] != want) {
      CHECKF(0, "size %zu (entry %zu): list %p, not class %zu's %p", n, i, (void *)h->direct[i], c, (void *)want);
      break;
    }
  }
}

TEST(slices_carved_and_released) {
  /* A large block takes a run of slices; freeing it gives them back. */
  size_t n = 1 << 20;
  void *p = hakmem_malloc(n);
  CHECK(p != NULL);
  if (!p) return;
  segment_t *s = segment_checked(p);
  CHECK(s != NULL);
  page_t *pg = page_of(s, p);
  size_t first = pg->slice, d = (size_t)(pg - s->pages);
  CHECK(pg->cls == CLASS_LARGE);
  CHECK(s->pages_map & (1ull << d));
  CHECKF(pg->slices == n / SLICE_SIZE, "slices %u", pg->slices);
  CHECK(pg->start == (uint8_t *)s + first * SLICE_SIZE);
  for (size_t i = 0; i < pg->slices; i++) CHECK(s->slice_page[first + i] == pg);
  CHECK(s->used_slices & (1ull << first));
  memset(p, 1, n);
  hakmem_free(p);
  for (size_t i = 0; i < n / SLICE_SIZE; i++) CHECK(s->slice_page[first + i] == &hm_page_invalid);
  CHECK(!(s->used_slices & (1ull << first)));
  CHECK(s->dirty_slices & (1ull << first));
  CHECK(!(s->pages_map & (1ull << d)));
}

TEST(descriptors_packed) {
  /* Page descriptors are taken lowest first, whatever slices their pages
   * start at: a segment of few pages touches only the first OS page of its
   * header.  Large blocks in a thread of their own get a fresh segment. */
  enum { N = 6 };
  void *p[N];
  segment_t *s = NULL;
  for (int i = 0; i < N; i++) {
    p[i] = hakmem_malloc((size_t)3 << 17);   /* 384 KiB: a run of 6 slices */
    CHECK(p[i] != NULL);
    if (!p[i]) return;
    page_t *pg = page_of(segment_checked(p[i]), p[i]);
    if (i == 0) s = segment_of(pg);
    if (segment_of(pg) != s) continue;
    CHECKF((size_t)(pg - s->pages) < (size_t)__builtin_popcountll(s->pages_map),
           "block %d: descriptor %zu of %d", i, (size_t)(pg - s->pages), __builtin_popcountll(s->pages_map));
    CHECKF(pg->slice >= 1 && page_run(pg) == p[i], "block %d: run at slice %u", i, pg->slice);
  }
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
}

/* Pages of class c.  (Of one class: under a sanitizer the process has its
 * runtime's thread, hence a purger, which may give back other classes' free
 * pages meanwhile.) */
static int64_t pages_in_use(size_t c) {
  census_t cs;
  registry_census(&cs);
  return (int64_t)cs.cls[c].pages;
}

TEST(pages_return_to_segment) {
  /* Fill several pages of one class, free everything: all but the class's
   * current page go back to their segments. */
  enum { N = 20000 };
  static void *p[N];
  size_t c = size_class(200);
  int64_t pages_before = pages_in_use(c);
  for (int i = 0; i < N; i++) p[i] = hakmem_malloc(200);
  int64_t pages_full = pages_in_use(c);
  CHECKF(pages_full - pages_before >= (int64_t)(N * 224 / SLICE_SIZE), "only %lld new pages",
         (long long)(pages_full - pages_before));
  for (int i = 0; i < N; i++) hakmem_free(p[i]);
  int64_t pages_after = pages_in_use(c);
  CHECKF(pages_after <= pages_before + 1, "pages before %lld, full %lld, after %lld", (long long)pages_before,
         (long long)pages_full, (long long)pages_after);
}

/* The segment map's entry for p: SEGMAP_NORMAL, SEGMAP_HUGE, or 0. */
static uint8_t map_kind(const void *p) {
  _Atomic(uint8_t) *e = segmap_entry((uintptr_t)p >> SEG_SHIFT);
  return e ? atomic_load(e) : 0;
}

TEST(segment_map) {
  int local;
  CHECK(segment_checked(&local) == NULL);
  CHECK(segment_checked(NULL) == NULL);
  CHECK(segment_checked((void *)~(uintptr_t)0) == NULL);
  CHECK(segment_checked((void *)((uintptr_t)1 << 60)) == NULL);
  void *p = hakmem_malloc(64);
  CHECK(segment_checked(p) == segment_of(p));
  CHECK(map_kind(p) == SEGMAP_NORMAL);
  CHECK(segment_near(p));                      /* in the window: free's fast path */
  hakmem_free(p);
  /* Aligned to 8 MiB, a huge block is mapped anywhere (not at os.c's hint):
   * out of the window when hinting is on (the window is around the hint
   * region; without hinting, around the first segment), in a far chunk of
   * the map, and the slow paths find it as they find the others. */
  void *far = hakmem_aligned_alloc(8u << 20, 100);
  CHECK(far != NULL);
  if (!far) return;
  segment_t *s = segment_checked((uint8_t *)far - SEG_SIZE);
  CHECKF(s != NULL && map_kind(s) == SEGMAP_HUGE, "%p: header %p, kind %u", far, (void *)s,
         map_kind((uint8_t *)far - SEG_SIZE));
  CHECK(!os_hint_start() || !segment_near(s));
  CHECK(hakmem_malloc_usable_size(far) >= 100);
  hakmem_free(far);
  CHECK(map_kind((uint8_t *)far - SEG_SIZE) == 0);
}

TEST(huge_blocks) {
  size_t n = 9u << 20;
  void *p = hakmem_malloc(n);
  CHECK(p != NULL);
  if (!p) return;
  segment_t *s = segment_checked(p);
  CHECK(s != NULL && map_kind(s) == SEGMAP_HUGE);
  page_t *pg = page_of(s, p);
  CHECK(pg->cls == CLASS_HUGE && pg->start == p && pg->block_size >= n);
  /* after its header's pages, at a random page of the 256 KiB around it (segment.c) */
  size_t at = (size_t)((uint8_t *)p - (uint8_t *)s), header = (sizeof(segment_t) + OS_PAGE - 1) & ~(OS_PAGE - 1);
  CHECKF(at % OS_PAGE == 0 && at >= header && at <= (256 << 10), "huge block at %zu bytes from its header", at);
  memset(p, 7, n);
  /* grow in place or by moving the mapping: contents survive */
  unsigned char *q = hakmem_realloc(p, 3 * n);
  CHECK(q != NULL);
  if (!q) return;
  CHECK(q[0] == 7 && q[n - 1] == 7);
  CHECK(segment_checked(q) != NULL);
  uintptr_t chunk = (uintptr_t)segment_of(q);
  hakmem_free(q);
  CHECK(map_kind((void *)chunk) == 0);

  /* alignment beyond the segment size: header one chunk below the block */
  void *a = hakmem_aligned_alloc(8u << 20, 100);
  CHECK(a != NULL && ((uintptr_t)a & ((8u << 20) - 1)) == 0);
  CHECK(hakmem_malloc_usable_size(a) >= 100);
  hakmem_free(a);
}

/* A block up to a segment less its header is a run of slices: 3 MiB shares
 * a segment, mapped in batches, where it took a mapping of its own.  But
 * where realloc must move a buffer to grow it past 2 MiB, the buffer gets a
 * mapping of its own, which mremap then grows: no copy at each move
 * (heap_malloc_grow, realloc's allocation for a moving buffer). */
static unsigned class_at(void *p) { return page_of(segment_checked(p), p)->cls; }
TEST(blocks_up_to_a_segment_are_large) {
  void *p = hakmem_malloc(3u << 20);
  CHECK(p != NULL);
  if (!p) return;
  CHECKF(class_at(p) == CLASS_LARGE && map_kind(p) == SEGMAP_NORMAL,
         "3 MiB: class %u (large %u)", class_at(p), CLASS_LARGE);
  hakmem_free(p);
  p = hakmem_malloc(LARGE_MAX);
  CHECK(p != NULL && class_at(p) == CLASS_LARGE);
  hakmem_free(p);
  p = hakmem_malloc(LARGE_MAX + 1);
  CHECK(p != NULL && class_at(p) == CLASS_HUGE);
  hakmem_free(p);
  p = large_malloc_grow(hm_tls_heap, GROW_HUGE);
  CHECK(p != NULL && class_at(p) == CLASS_LARGE);
  hakmem_free(p);
  p = large_malloc_grow(hm_tls_heap, GROW_HUGE + 1);
  CHECKF(p != NULL && class_at(p) == CLASS_HUGE, "a moving buffer of 2 MiB + 1: class %u (huge %u)", class_at(p),
         CLASS_HUGE);
  hakmem_free(p);
  hakmem_malloc_trim(0);                       /* the freed huge blocks: not for the next tests */
}

/* A buffer that doubles frees its old copy once it has moved: that copy is
 * purged at once rather than kept resident for the purge delay next to the
 * new one (it would count in the program's peak).  The rule holds while the
 * huge blocks' delay has not grown (no copy was seen reused), and the cases
 * above may have grown it (under valgrind, a block freed and taken again
 * outlives the delay and is purged in between): so the case runs in a fresh
 * process, exec'd for it. */
__attribute__((constructor)) static void old_copy_probe(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--old-copy-probe")) return;
  size_t n = 8u << 20;
  char *a = hakmem_malloc(n), *b = hakmem_malloc(2 * n);
  if (!a || !b) _exit(2);
  memset(a, 1, n);
  memcpy(b, a, n);
  memset(b + n, 2, n);
  long before = test_rss_kib();
  hakmem_free(a);
  long after = test_rss_kib();
  fprintf(stderr, "RSS %ld KiB before freeing the 8 MiB old copy, %ld KiB right after\n", before, after);
  char *c = hakmem_calloc(1, n);                /* the purged mapping again: zeroed */
  if (!c || c[0] || c[n / 2] || c[n - 1] || b[0] != 1 || b[2 * n - 1] != 2) _exit(3);
  _exit(before - after >= 6 * 1024 || test_sanitized() ? 0 : 1);
}
static void exec_old_copy_probe(void) {
  char *argv[] = {"test_sizeclass", "--old-copy-probe", NULL};
  execv(test_self_exe(), argv);
  _exit(4);
}
TEST(growing_buffer_old_copy_purged) {
  char msg[512];
  int st = run_in_child(exec_old_copy_probe, msg, sizeof msg);
  NOTE("%s", msg);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x (1: RSS did not fall by 6 MiB)", st);
}

/* Freed huge mappings are split and joined again: a cached 24 MiB block
 * serves a 6 MiB one without a new mapping, the rest staying cached for the
 * next; freed again, the pieces are one span that serves 24 MiB once more.
 * Every block is written whole (a span that claims more than is mapped
 * faults), calloc's blocks read as zero, and no two blocks overlap. */
TEST(huge_cache_splits_and_joins) {
  hakmem_malloc_trim(0);
  size_t big = (size_t)24 << 20, small = (size_t)6 << 20;
  char *a = hakmem_malloc(big);
  CHECK(a != NULL);
  if (!a) return;
  memset(a, 1, big);
  hakmem_free(a);
  hakmem_stats_t s0, s1;
  hakmem_stats_get(&s0);
  char *b = hakmem_malloc(small), *c = hakmem_calloc(1, small), *d = hakmem_malloc(small);
  hakmem_stats_get(&s1);
  CHECK(b && c && d);
  if (!b || !c || !d) return;
  CHECKF(s1.mmap_calls == s0.mmap_calls, "three 6 MiB blocks after a freed 24 MiB one took %zu new mappings",
         s1.mmap_calls - s0.mmap_calls);
  char *blk[3] = {b, c, d};
  for (int i = 0; i < 3; i++) {
    size_t u = hakmem_malloc_usable_size(blk[i]);
    CHECK(u >= small);
    /* a huge block's page descriptor: no owner (the block was the freed
     * block's bytes, here all 1s, before the split made it a header) */
    page_t *pg = page_of(segment_checked(blk[i]), blk[i]);
    CHECKF(pg->cls == CLASS_HUGE && !atomic_load(&pg->heap) && !atomic_load(&pg->local) && !pg->flags,
           "block %d: class %u heap %p local %#lx flags %u", i, pg->cls, (void *)atomic_load(&pg->heap),
           (unsigned long)atomic_load(&pg->local), pg->flags);
    for (int j = 0; j < 3; j++)
      if (i != j) CHECK(blk[j] + hakmem_malloc_usable_size(blk[j]) <= blk[i] || blk[i] + u <= blk[j]);
  }
  int nonzero = 0;
  for (size_t i = 0; i < small; i += 4096) nonzero += c[i] != 0;
  CHECKF(nonzero == 0, "calloc from a split mapping: %d pages not zero", nonzero);
  for (int i = 0; i < 3; i++) memset(blk[i], 2 + i, hakmem_malloc_usable_size(blk[i]));
  hakmem_free(b);
  hakmem_free(d);
  hakmem_free(c);
  hakmem_stats_get(&s0);
  char *e = hakmem_calloc(1, big - (1 << 20));
  hakmem_stats_get(&s1);
  CHECK(e != NULL);
  if (!e) return;
  CHECKF(s1.mmap_calls == s0.mmap_calls, "the pieces, freed, did not serve 23 MiB again (%zu new mappings)",
         s1.mmap_calls - s0.mmap_calls);
  nonzero = 0;
  for (size_t i = 0; i < big - (1 << 20); i += 4096) nonzero += e[i] != 0;
  CHECKF(nonzero == 0, "calloc from joined pieces: %d pages not zero", nonzero);
  memset(e, 5, hakmem_malloc_usable_size(e));
  hakmem_free(e);
  hakmem_malloc_trim(0);
}

/* With no purger thread (this program has one thread), a freed huge block
 * stays resident for the delay and is then purged by the next slow path,
 * not only by the next huge free. */
TEST(cached_huge_block_purged_by_slow_paths) {
  hakmem_malloc_trim(0);
  size_t n = 8u << 20;
  char *a = hakmem_malloc(n);
  CHECK(a != NULL);
  if (!a) return;
  memset(a, 1, n);
  hakmem_free(a);
  long cached = test_rss_kib(), now = cached;
  uint64_t t0 = test_now_ms(), ms = 0;
  for (; ms < 2000 && cached - now < 6 * 1024; ms = test_now_ms() - t0) {
    test_sleep_ms(10);
    hakmem_free(hakmem_malloc(300 << 10));     /* a large block: a slow path */
    now = test_rss_kib();
  }
  NOTE("RSS %ld KiB with the 8 MiB block cached, %ld KiB %llu ms later", cached, now, (unsigned long long)ms);
  if (!test_sanitized())
    CHECKF(cached - now >= 6 * 1024, "the cached block still resident %llu ms after its free", (unsigned long long)ms);
}

/* aligned_alloc's fast path (alloc.c) rounds the size up to the alignment
 * and takes that size's class: the class size must be a multiple of it. */
TEST(aligned_sizes_have_aligned_classes) {
  for (size_t align = 32; align <= TABLE_MAX; align <<= 1)
    for (size_t m = align; m <= TABLE_MAX; m += align)
      CHECKF(class_size(class_of(m)) % align == 0, "size %zu (align %zu) has class size %zu", m,
             align, class_size(class_of(m)));
}

TEST(aligned_uses_classes) {
  /* alignments up to a slice come from size classes that are multiples of it */
  for (size_t align = 32; align <= SLICE_SIZE; align <<= 1) {
    void *p = hakmem_aligned_alloc(align, 24);
    CHECKF(p && ((uintptr_t)p & (align - 1)) == 0, "align %zu gave %p", align, p);
    if (!p) continue;
    page_t *pg = page_of(segment_of(p), p);
    CHECKF(pg->block_size % align == 0 || pg->cls >= CLASSES, "align %zu: block size %zu", align, pg->block_size);
    hakmem_free(p);
  }
}

/* Aligned mappings are asked for at a hint (one mmap, no trimming); a taken
 * hint moves on to the next one, and when hints fail the mapping is made
 * elsewhere and trimmed, aligned all the same.  (Last in this file: it turns
 * hinting off.) */
TEST(aligned_maps_with_hint_taken) {
  size_t sz = 3 * SEG_SIZE;
  uint8_t *a = os_map_aligned(sz, SEG_SIZE);
  CHECK(a && ((uintptr_t)a & (SEG_SIZE - 1)) == 0);
  if (!a) return;
#if defined(__x86_64__) && !defined(HAKMEM_NO_OVERRIDE)   /* (sanitizers own that range) */
  bool hinted = true;
  CHECKF((uintptr_t)a >= (uintptr_t)2 << 40, "%p is not in the hinted region (from 2 TiB)", (void *)a);
#else
  bool hinted = false;
#endif
  /* Hints are only followed where MAP_FIXED_NOREPLACE is (not under valgrind). */
  void *probe = mmap(a, OS_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (probe != MAP_FAILED) { munmap(probe, OS_PAGE); hinted = false; }
  /* Occupy the next two hints, right above a: the third is taken. */
  uint8_t *block = mmap(a + sz, 2 * sz, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(!hinted || block == a + sz);
  uint8_t *b = os_map_aligned(sz, SEG_SIZE);
  CHECK(b && ((uintptr_t)b & (SEG_SIZE - 1)) == 0);
  CHECKF(!hinted || b == a + 3 * sz, "%p, not the third hint %p", (void *)b, (void *)(a + 3 * sz));
  if (b) os_unmap(b, sz);
  /* Occupy the next four: hinting stops, mappings are trimmed into shape. */
  uint8_t *block2 = mmap(a + 4 * sz, 4 * sz, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(!hinted || block2 == a + 4 * sz);
  for (int i = 0; i < 3; i++) {
    uint8_t *c = os_map_aligned(sz, SEG_SIZE);
    CHECK(c && ((uintptr_t)c & (SEG_SIZE - 1)) == 0);
    if (!c) break;
    CHECK(c + sz <= block2 || c >= block2 + 4 * sz);
    memset(c, 0x5a, sz);
    os_unmap(c, sz);
  }
  if (block != MAP_FAILED) munmap(block, 2 * sz);
  if (block2 != MAP_FAILED) munmap(block2, 4 * sz);
  os_unmap(a, sz);
}

TEST_MAIN()
