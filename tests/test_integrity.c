/* Content integrity over hundreds of thousands of live blocks: every block
 * carries a pattern derived from its slot and size, checked before each free
 * or realloc, through millions of random operations. */
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

/* Write (or check) the pattern at the start, the end and a few strides in
 * between; when checking, only positions below limit (what a realloc kept). */
static int touch_upto(blk_t *b, size_t slot, int check, size_t limit) {
  size_t n = b->n, step = n > 128 ? 509 : 1;
  for (size_t i = 0; i < n && i < limit; i += (i < 64 || n - i <= 64) ? 1 : step) {
    if (check) { if (b->p[i] != pat(slot, b->gen, i)) return 0; }
    else b->p[i] = pat(slot, b->gen, i);
  }
  return 1;
}
static int touch(blk_t *b, size_t slot, int check) { return touch_upto(b, slot, check, SIZE_MAX); }

static int run(size_t live, long ops) {
  blk_t *v = hakmem_calloc(live, sizeof *v);
  int bad = 0;
  for (size_t i = 0; i < live; i++) {
    v[i].n = pick_size(i);
    v[i].p = hakmem_malloc(v[i].n);
    if (!v[i].p) return -1;
    touch(&v[i], i, 0);
  }
  for (long k = 0; k < ops && !bad; k++) {
    uint64_t x = rnd();
    size_t i = (size_t)(x % live);
    if (!touch(&v[i], i, 1)) { bad = 1; break; }
    switch ((x >> 32) % 4) {
    case 0: case 1:                      /* free and allocate anew */
      hakmem_free(v[i].p);
      v[i].n = pick_size(i);
      v[i].p = hakmem_malloc(v[i].n);
      v[i].gen++;
      if (!v[i].p) return -1;
      touch(&v[i], i, 0);
      break;
    case 2: {                            /* realloc: the common prefix survives */
      size_t n = pick_size(i), keep = n < v[i].n ? n : v[i].n;
      unsigned char *q = hakmem_realloc(v[i].p, n);
      if (!q) return -1;
      v[i].p = q;
      if (!touch_upto(&v[i], i, 1, keep)) { bad = 1; break; }
      v[i].n = n;
      v[i].gen++;
      touch(&v[i], i, 0);
      break;
    }
    default:                             /* leave it, check a neighbour */
      if (!touch(&v[(i + 1) % live], (i + 1) % live, 1)) bad = 1;
    }
  }
  for (size_t i = 0; i < live; i++) {
    if (!bad && !touch(&v[i], i, 1)) bad = 1;
    hakmem_free(v[i].p);
  }
  hakmem_free(v);
  return bad;
}

TEST(random_churn_300k_live) {
  size_t live = test_sanitized() ? 50000 : 300000;
  long ops = test_sanitized() ? 300000 : 3000000;
  int r = run(live, ops);
  CHECKF(r == 0, r < 0 ? "allocation failed" : "a block's content changed while it was live");
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

TEST_MAIN()
