/* Content integrity over hundreds of thousands of live blocks: every block
 * carries a pattern derived from its slot and generation, checked before each
 * free or realloc, through millions of random operations (malloc, calloc,
 * posix_memalign, realloc, free, free_sized); then FIFO and LIFO free orders
 * and interleaved sizes refilling holes.  Deterministic (xorshift, fixed
 * seed); scaled down when SANITIZED=1. */
#include "test.h"
#include "hakmem.h"

#include <stdint.h>

typedef struct { unsigned char *p; size_t n; uint32_t gen; } blk_t;

static uint64_t rs = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

/* Most slots hold small blocks; one in 300 medium ones, one in 10,000 blocks
 * up to 8 MiB (so the live set stays near half a gigabyte). */
static size_t pick_size(size_t slot) {
  uint64_t x = rnd();
  if (slot % 10000 == 0) return 1 + (x >> 10) % (8 << 20);
  if (slot % 300 == 0) return 2049 + (x >> 10) % (256 * 1024);
  return 1 + (x >> 10) % 2048;
}

static unsigned char pat(size_t slot, uint32_t gen, size_t i) { return (unsigned char)(slot * 131 + gen * 7 + i * 13); }

/* Write (check == 0), check (1) the pattern, or check for zeros (2) at the
 * start, the end and a few strides in between; when checking, only positions
 * below limit (what a realloc kept). */
static int touch_upto(blk_t *b, size_t slot, int check, size_t limit) {
  size_t n = b->n, step = n > 128 ? 509 : 1;
  for (size_t i = 0; i < n && i < limit; i += (i < 64 || n - i <= 64) ? 1 : step) {
    if (check == 1) { if (b->p[i] != pat(slot, b->gen, i)) return 0; }
    else if (check == 2) { if (b->p[i] != 0) return 0; }
    else b->p[i] = pat(slot, b->gen, i);
  }
  return 1;
}
static int touch(blk_t *b, size_t slot, int check) { return touch_upto(b, slot, check, SIZE_MAX); }

enum { BAD_CONTENT = 1, BAD_ZERO = 2, BAD_ALIGN = 3, BAD_REALLOC = 4, NO_MEMORY = -1 };

/* A new block for slot i, by one of the allocation functions. */
static int fresh(blk_t *b, size_t i, unsigned how) {
  b->n = pick_size(i);
  b->gen++;
  if (how == 1) {                                   /* calloc: zero */
    b->p = hakmem_calloc(1, b->n);
    if (b->p && !touch(b, i, 2)) return BAD_ZERO;
  } else if (how == 2) {                            /* aligned */
    size_t a = (size_t)32 << (rnd() % 8);
    void *p = NULL;
    if (hakmem_posix_memalign(&p, a, b->n)) p = NULL;
    b->p = p;
    if (p && ((uintptr_t)p & (a - 1))) return BAD_ALIGN;
  } else {
    b->p = hakmem_malloc(b->n);
  }
  if (!b->p) return NO_MEMORY;
  touch(b, i, 0);
  return 0;
}

static int run(size_t live, long ops) {
  blk_t *v = hakmem_calloc(live, sizeof *v);
  int bad = 0;
  if (!v) return NO_MEMORY;
  for (size_t i = 0; i < live && !bad; i++) bad = fresh(&v[i], i, i % 3 ? 0 : (unsigned)(i / 3) % 3);
  for (long k = 0; k < ops && !bad; k++) {
    uint64_t x = rnd();
    size_t i = (size_t)(x % live);
    if (!touch(&v[i], i, 1)) { bad = BAD_CONTENT; break; }
    switch ((x >> 32) % 8) {
    case 0: case 1:                      /* free and allocate anew */
      hakmem_free(v[i].p);
      bad = fresh(&v[i], i, 0);
      break;
    case 2:                              /* sized free, calloc */
      hakmem_free_sized(v[i].p, v[i].n);
      bad = fresh(&v[i], i, 1);
      break;
    case 3:                              /* free, aligned allocation */
      hakmem_free(v[i].p);
      bad = fresh(&v[i], i, 2);
      break;
    case 4: case 5: {                    /* realloc: the common prefix survives */
      size_t n = pick_size(i), keep = n < v[i].n ? n : v[i].n;
      unsigned char *q = hakmem_realloc(v[i].p, n);
      if (!q) { bad = NO_MEMORY; break; }
      v[i].p = q;
      if (!touch_upto(&v[i], i, 1, keep)) { bad = BAD_REALLOC; break; }
      v[i].n = n;
      v[i].gen++;
      touch(&v[i], i, 0);
      break;
    }
    default:                             /* leave it, check a neighbour */
      if (!touch(&v[(i + 1) % live], (i + 1) % live, 1)) bad = BAD_CONTENT;
    }
  }
  for (size_t i = 0; i < live; i++) {
    if (!bad && v[i].p && !touch(&v[i], i, 1)) bad = BAD_CONTENT;
    hakmem_free(v[i].p);
  }
  hakmem_free(v);
  return bad;
}

TEST(random_churn_300k_live) {
  size_t live = test_sanitized() ? 50000 : 300000;
  long ops = test_sanitized() ? 300000 : 3000000;
  int r = run(live, ops);
  CHECKF(r == 0, "%s", r == NO_MEMORY ? "an allocation failed"
         : r == BAD_ZERO ? "calloc memory was not zero"
         : r == BAD_ALIGN ? "posix_memalign returned a misaligned block"
         : r == BAD_REALLOC ? "realloc lost the content of the kept prefix"
         : "a block's content changed while it was live");
}

TEST(lifo_and_fifo_free_orders) {
  enum { N = 200000 };
  unsigned char **p = hakmem_malloc(N * sizeof *p);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < N; i++) { size_t n = 1 + (size_t)i % 700; p[i] = hakmem_malloc(n); memset(p[i], i & 0xff, n); }
    int bad = 0;
    for (int k = 0; k < N; k++) {
      int i = pass ? N - 1 - k : k;
      size_t n = 1 + (size_t)i % 700;
      if (p[i][0] != (unsigned char)i || p[i][n - 1] != (unsigned char)i) bad++;
      hakmem_free(p[i]);
    }
    CHECKF(bad == 0, "%s order: %d corrupted blocks", pass ? "LIFO" : "FIFO", bad);
  }
  hakmem_free(p);
}

TEST(interleaved_sizes) {
  enum { N = 60000 };
  unsigned char **p = hakmem_malloc(N * sizeof *p);
  size_t sizes[] = {8, 24, 100, 1000, 5000, 40000, 300000};
  for (int i = 0; i < N; i++) { size_t n = sizes[i % 7]; p[i] = hakmem_malloc(n); memset(p[i], i & 0xff, n < 256 ? n : 256); }
  for (int i = 0; i < N; i += 2) hakmem_free(p[i]);          /* holes everywhere */
  for (int i = 0; i < N; i += 2) { size_t n = sizes[(i + 3) % 7]; p[i] = hakmem_malloc(n); memset(p[i], i & 0xff, n < 256 ? n : 256); }
  int bad = 0;
  for (int i = 0; i < N; i++) {
    size_t n = sizes[(i % 2 ? i : i + 3) % 7];
    for (size_t k = 0; k < (n < 256 ? n : 256); k++) if (p[i][k] != (unsigned char)i) { bad++; break; }
    hakmem_free(p[i]);
  }
  hakmem_free(p);
  CHECKF(bad == 0, "%d corrupted blocks", bad);
}

/* Blocks of 256 KiB-1 MiB are runs of slices in dozens of segments, found
 * through the heap's index of free runs (slices.c).  Replacing a block by
 * one no bigger always fits in the run just freed: no new segment is mapped,
 * whichever run the index picks; and no block may overlap another. */
TEST(big_blocks_reuse_freed_runs) {
  enum { N = 240, STEPS = 20000 };
  static blk_t v[N];
  for (size_t i = 0; i < N; i++) {
    v[i].n = (256 << 10) + rnd() % (768 << 10);
    v[i].p = hakmem_malloc(v[i].n);
    CHECK(v[i].p != NULL);
    touch(&v[i], i, 0);
  }
  hakmem_stats_t before, after;
  hakmem_stats_get(&before);
  int bad = 0;
  for (int k = 0; k < STEPS && !bad; k++) {
    size_t i = rnd() % N;
    if (!touch(&v[i], i, 1)) bad = 1;
    hakmem_free(v[i].p);
    v[i].n = (256 << 10) + rnd() % (v[i].n - (256 << 10) + 1);
    v[i].gen++;
    if (!(v[i].p = hakmem_malloc(v[i].n))) { bad = 2; break; }
    touch(&v[i], i, 0);
  }
  hakmem_stats_get(&after);
  for (size_t i = 0; i < N; i++) {
    if (!bad && v[i].p && !touch(&v[i], i, 1)) bad = 1;
    hakmem_free(v[i].p);
  }
  CHECKF(bad == 0, "%s", bad == 2 ? "an allocation failed" : "a block's content changed while it was live");
  CHECKF(after.segments <= before.segments, "segments %zu -> %zu: a freed run was not found", before.segments, after.segments);
}

TEST_MAIN()
