/* fuzz_api.c — a libFuzzer harness for hakmem's API (`make fuzz`).
 *
 * The input is a program: each 4-byte instruction picks an operation (malloc,
 * calloc, realloc, aligned allocations, free, free_sized, malloc_trim), a slot
 * of a table of live blocks and a size.  Every block is filled with a pattern
 * derived from its slot and checked before it is freed or reallocated (the
 * kept prefix after realloc), so a block handed out twice, overlapping
 * blocks, a realloc that loses data, a calloc that is not zero or a bad
 * alignment ends the run with a report.  hakmem is linked under its hakmem_*
 * names (HAKMEM_NO_OVERRIDE): ASan and libFuzzer keep the libc malloc. */
#include "hakmem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 64
static struct { unsigned char *p; size_t n; unsigned char tag; } slot[SLOTS];

static void fail(const char *what, size_t n) {
  fprintf(stderr, "fuzz_api: %s (size %zu)\n", what, n);
  abort();
}

static void fill(int k) { memset(slot[k].p, slot[k].tag, slot[k].n); }

static void check(int k, size_t upto) {
  for (size_t i = 0; i < upto && i < slot[k].n; i++)
    if (slot[k].p[i] != slot[k].tag) fail("a live block's bytes changed", slot[k].n);
}

static void release(int k) {
  if (!slot[k].p) return;
  check(k, slot[k].n);
  hakmem_free(slot[k].p);
  slot[k].p = NULL;
}

/* Sizes mostly small, sometimes up to 512 KiB (large blocks), rarely a few
 * MiB (huge blocks). */
static size_t size_of(uint16_t v) {
  unsigned kind = v >> 14, x = v & 0x3fff;
  if (kind == 3 && x % 64 == 0) return (size_t)x * 200;
  return kind == 0 ? x % 64 : kind == 1 ? x % 2048 : kind == 2 ? (size_t)x * 4 : (size_t)x * 32;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  static unsigned char tag;
  for (size_t i = 0; i + 4 <= len; i += 4) {
    unsigned op = data[i] % 10;
    int k = data[i + 1] % SLOTS;
    size_t n = size_of((uint16_t)(data[i + 2] | data[i + 3] << 8));
    size_t align = (size_t)16 << (data[i + 3] % 9);   /* 16 B .. 4 KiB */
    void *q = NULL;
    switch (op) {
    case 0: case 1: case 2:                          /* malloc */
      release(k);
      q = hakmem_malloc(n);
      break;
    case 3:                                          /* calloc */
      release(k);
      q = hakmem_calloc(n / 8 + 1, 8);
      if (q) for (size_t j = 0; j < n / 8 + 1; j++) if (((unsigned char *)q)[j * 8]) fail("calloc not zero", n);
      n = n / 8 * 8 + 8;
      break;
    case 4: {                                        /* realloc, keeps the prefix */
      size_t keep = slot[k].p ? (slot[k].n < n ? slot[k].n : n) : 0;
      if (slot[k].p) check(k, slot[k].n);
      q = hakmem_realloc(slot[k].p, n);
      if (n == 0 && slot[k].p) { slot[k].p = NULL; continue; }   /* realloc(p, 0) freed it */
      if (!q) continue;
      for (size_t j = 0; j < keep; j++) if (((unsigned char *)q)[j] != slot[k].tag) fail("realloc lost data", n);
      slot[k].p = NULL;
      break;
    }
    case 5:                                          /* aligned */
      release(k);
      if (hakmem_posix_memalign(&q, align, n)) q = NULL;
      if (q && (uintptr_t)q % align) fail("misaligned block", n);
      break;
    case 6:
      release(k);
      q = hakmem_aligned_alloc(align, n);
      if (q && (uintptr_t)q % align) fail("misaligned block", n);
      break;
    case 7:                                          /* free_sized */
      if (slot[k].p) { check(k, slot[k].n); hakmem_free_sized(slot[k].p, slot[k].n); slot[k].p = NULL; }
      continue;
    case 8:
      release(k);
      continue;
    case 9:
      if (data[i + 1] == 0) hakmem_malloc_trim(0);
      continue;
    }
    if (!q) { if (n < ((size_t)1 << 30)) fail("allocation failed", n); continue; }
    if (hakmem_malloc_usable_size(q) < n) fail("usable size below the request", n);
    if ((uintptr_t)q % 16) fail("block not 16-byte aligned", n);
    slot[k].p = q;
    slot[k].n = n;
    slot[k].tag = (unsigned char)(++tag | 1);
    fill(k);
  }
  for (int k = 0; k < SLOTS; k++) release(k);
  return 0;
}
