/* secure.c — the hardened mode (HAKMEM_SECURE=1, or 2 to also zero freed
 * blocks).  It runs on the slow paths: in this mode malloc and free skip
 * their fast paths (slow mode, as for statistics), so none of this costs the
 * default mode anything.
 *
 *  - Every block of a size class has a bit in its segment's allocation bitmap
 *    (the upper half of the header slice), set and cleared atomically: a
 *    second free from any thread, a free of a block never handed out, and a
 *    realloc of a freed block are caught exactly, not by their look.
 *  - Free-list links are encoded as always (link_enc) and every link is
 *    checked in full when a block is handed out: it must lead to a block of
 *    the same page, so an overwritten link is reported, not followed.
 *  - Freed blocks wait in a per-thread quarantine before they can be reused,
 *    their first 256 bytes filled with a pattern (the whole block with zeros
 *    at level 2); the fill is checked when they leave it and again when they
 *    are handed out, so a write through a dangling pointer is reported.
 *  - Every page and every large or huge block ends in a guard page
 *    (PROT_NONE), so a linear overflow faults instead of reaching the next
 *    page.  Each guard costs a mapping of its own: beyond vm.max_map_count
 *    (65530 by default, about 2 GiB of small pages) the rest go unguarded.
 *  - Blocks of a freshly carved run are linked in random order. */
#include "internal.h"
#include "options.h"

#include <string.h>

bool hm_secure;
int hm_secure_level;

#define FILL        0xdf                      /* a freed block's bytes (level 1) */
#define CHECKED     256                       /* bytes of a block the pattern covers (level 1) */
#define BITMAP_OFF  (SLICE_SIZE / 2)          /* the bitmaps: upper half of slice 0 */
#define QUARANTINE_BLOCKS 1024
#define QUARANTINE_BYTES  ((size_t)4 << 20)

_Static_assert(sizeof(segment_t) <= BITMAP_OFF, "the bitmaps share slice 0 with the header");
_Static_assert(SLICE_SIZE / 16 / 8 * SLICES <= SLICE_SIZE - BITMAP_OFF, "a bit per 16 B of every slice");

/* ---- the allocation bitmap ------------------------------------------------ */

/* The word holding block p's bit, and the bit: a page's bits start at the
 * bitmap slot of its descriptor (a page of n blocks needs n bits, and n is
 * at most one slice's worth of 16-byte blocks). */
static _Atomic uint64_t *bit_of(page_t *pg, const void *p, uint64_t *bit) {
  segment_t *s = segment_of(pg);
  size_t i = (size_t)((const uint8_t *)p - pg->start) / pg->block_size;
  _Atomic uint64_t *words = (_Atomic uint64_t *)((uint8_t *)s + BITMAP_OFF) + (size_t)(pg - s->pages) * (SLICE_SIZE / 16 / 64);
  *bit = 1ull << (i % 64);
  return &words[i / 64];
}

static bool bit_test(page_t *pg, const void *p) {
  uint64_t bit;
  return atomic_load_explicit(bit_of(pg, p, &bit), memory_order_relaxed) & bit;
}

bool secure_is_free(page_t *pg, const void *p) { return pg->cls < CLASSES && !bit_test(pg, p); }

void secure_page_init(page_t *pg) {
  segment_t *s = segment_of(pg);
  memset((uint8_t *)s + BITMAP_OFF + (size_t)(pg - s->pages) * (SLICE_SIZE / 16 / 8), 0, SLICE_SIZE / 16 / 8);
}

/* ---- fill patterns ----------------------------------------------------------- */

/* Level 1 fills and checks a block's first CHECKED bytes; level 2 zeroes
 * and checks all of it. */
static size_t checked(const page_t *pg) {
  return hm_secure_level >= 2 || pg->block_size < CHECKED ? pg->block_size : CHECKED;
}

static bool all_zero(const uint8_t *p, size_t n) {
  for (; n && ((uintptr_t)p & 7); n--) if (*p++) return false;
  for (; n >= 8; n -= 8, p += 8) if (*(const uint64_t *)p) return false;
  for (; n; n--) if (*p++) return false;
  return true;
}

static void fill(page_t *pg, uint8_t *b) {
  memset(b, hm_secure_level >= 2 ? 0 : FILL, checked(pg));
}

/* Report if bytes [from, checked) of freed block b no longer hold the fill. */
static void check_fill(page_t *pg, const uint8_t *b, size_t from) {
  static const uint8_t pattern[CHECKED] = {[0 ... CHECKED - 1] = FILL};
  size_t n = checked(pg);
  if (from < n && (hm_secure_level >= 2 ? !all_zero(b + from, n - from) : memcmp(b + from, pattern + from, n - from)))
    hm_fatal("use after free: a freed block was written to", b, pg);
}

/* page_extend in secure mode: fill the n blocks just carved at first and
 * link them, in random order, in front of the page's free list. */
void secure_carve(page_t *pg, uint8_t *first, size_t n) {
  heap_t *h = atomic_load_explicit(&pg->heap, memory_order_relaxed);
  uint16_t order[n];
  for (size_t i = 0; i < n; i++) {
    order[i] = (uint16_t)i;
    fill(pg, first + i * pg->block_size);
  }
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = heap_rand(h) % (i + 1);
    uint16_t t = order[i]; order[i] = order[j]; order[j] = t;
  }
  uintptr_t next = pg->free;
  for (size_t i = n; i-- > 0;) {
    block_t *b = (block_t *)(first + order[i] * pg->block_size);
    block_set_free(pg, b, next);
    next = (uintptr_t)b;
  }
  pg->free = next;
}

/* ---- handing out and taking back ------------------------------------------------ */

void *secure_pop(page_t *pg) {
  uint8_t *b = (uint8_t *)pg->free;
  uintptr_t next = block_next(pg, (uintptr_t)b);
  if (!block_looks_free(pg, b) || (next && !hm_block_start(pg, next - (uintptr_t)pg->start)))
    hm_fatal("corrupted free list (a write to a freed block?)", b, pg);
  check_fill(pg, b, 2 * sizeof(block_t));
  uint64_t bit;
  _Atomic uint64_t *w = bit_of(pg, b, &bit);
  if (atomic_fetch_or_explicit(w, bit, memory_order_relaxed) & bit)
    hm_fatal("heap corruption: a block on the free list is in use", b, pg);
  pg->free = next;
  ((block_t *)b)[0].word = ((block_t *)b)[1].word = 0;
  page_set_used(pg, page_used(pg) + 1);
  return b;
}

/* The quarantine: a ring of the heap's most recent frees. */
typedef struct quarantine_s {
  size_t head, count, bytes;
  void *slot[QUARANTINE_BLOCKS];
} quarantine_t;

/* The oldest block of h's quarantine, taken out, or NULL; h's lock held. */
static void *quarantine_take(heap_t *h) {
  quarantine_t *q = h->quarantine;
  if (!q || !q->count) return NULL;
  void *p = q->slot[q->head];
  q->head = (q->head + 1) % QUARANTINE_BLOCKS;
  q->count--;
  q->bytes -= page_of(segment_of(p), p)->block_size;
  return p;
}

/* free(p) in secure mode, before the block is released: clear its bit (a
 * block whose bit is clear was not allocated), fill it, and queue it.  Returns
 * the block to release now (the oldest one leaving the quarantine), or NULL. */
void *secure_free(page_t *pg, void *p) {
  if (pg->cls < CLASSES) {
    uint64_t bit;
    _Atomic uint64_t *w = bit_of(pg, p, &bit);
    if (!(atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed) & bit))
      hm_fatal("double free (or free of a block never handed out)", p, pg);
  }
  fill(pg, p);
  heap_t *owner = atomic_load_explicit(&pg->heap, memory_order_relaxed);
  if (owner && owner->user) return p;          /* (its heap's destruction must find it freed) */
  heap_t *h = hm_tls_heap;
  if (h == &hm_heap_empty && !(h = heap_get())) return p;
  heap_enter(h);                               /* (malloc_trim may be flushing it: purge.c) */
  quarantine_t *q = h->quarantine;
  if (!q && !(q = h->quarantine = os_map(sizeof *q))) {
    heap_leave(h);
    return p;
  }
  void *out = q->count == QUARANTINE_BLOCKS || q->bytes > QUARANTINE_BYTES ? quarantine_take(h) : NULL;
  q->slot[(q->head + q->count) % QUARANTINE_BLOCKS] = p;
  q->count++;
  q->bytes += pg->block_size;
  heap_leave(h);
  if (out) check_fill(page_of(segment_of(out), out), out, 0);
  return out;
}

/* A block leaving the quarantine: checked, then released. */
static void release(void *p) {
  page_t *pg = page_of(segment_of(p), p);
  check_fill(pg, p, 0);
  hm_free_release(segment_of(p), pg, p, false);
}

/* Release every block of h's quarantine: its owner (thread exit,
 * malloc_trim), taking h's lock for each block it takes out, since another
 * thread's malloc_trim may be emptying the same quarantine. */
void secure_flush(heap_t *h) {
  for (;;) {
    heap_enter(h);
    void *p = quarantine_take(h);
    heap_leave(h);
    if (!p) return;
    release(p);
  }
}

/* The same for another thread's malloc_trim, which holds h's lock. */
void secure_flush_held(heap_t *h) {
  for (void *p; (p = quarantine_take(h));) release(p);
}

/* ---- guard pages ------------------------------------------------------------------ */

size_t secure_guard(void) { return hm_secure ? OS_PAGE : 0; }

/* The last OS page of [p, p+size) becomes a guard (huge blocks). */
void secure_guard_set(void *p, size_t size) {
  if (hm_secure) os_protect((uint8_t *)p + size - OS_PAGE, OS_PAGE, false);
}

/* A page (or large block) takes slices [first, first+n) of s: the last OS
 * page of its last slice must be a guard, and none of the others.  Guards
 * stay when pages are freed (segment->guard_slices remembers them), so a page
 * made where one of the same length was costs no mprotect at all. */
void secure_page_guard(segment_t *s, size_t first, size_t n) {
  if (!hm_secure) return;
  uint64_t want = 1ull << (first + n - 1);
  uint64_t inside = slice_run(first, n) & ~want;
  for (uint64_t off = s->guard_slices & inside; off; off &= off - 1)
    os_protect((uint8_t *)s + (size_t)(__builtin_ctzll(off) + 1) * SLICE_SIZE - OS_PAGE, OS_PAGE, true);
  if (!(s->guard_slices & want)) os_protect((uint8_t *)s + (first + n) * SLICE_SIZE - OS_PAGE, OS_PAGE, false);
  s->guard_slices = (s->guard_slices & ~inside) | want;
}
