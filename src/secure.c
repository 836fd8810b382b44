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
 *    are handed out, so a write through a dangling pointer is reported.  A
 *    quiet thread's quarantine leaves when the purger trims its heap
 *    (hm_free_quarantine_quiet), so that it pins no pages while it waits.
 *  - Every page and every large or huge block ends in a guard page
 *    (PROT_NONE), so a linear overflow faults instead of reaching the next
 *    page.  Each guard costs a mapping of its own: beyond vm.max_map_count
 *    (65530 by default, about 2 GiB of small pages) the rest go unguarded.
 *  - Blocks of a freshly carved run are linked in random order.
 *  - Canaries: a request of n bytes gets a block of the class of n +
 *    SECURE_TAIL; the block's bytes from n on hold canary bytes, its last 16
 *    a word that records n (with a keyed check) and the guard word of the
 *    block after it.  The first block of a page has its guard word in a pad
 *    before it.  free checks them, and a sized free's size against n: a
 *    write past the n bytes, or before the block, is reported at the latest
 *    when the block is freed.  Large blocks have the same tail.
 *  - A freed large block is PROT_NONE while it waits in the quarantine, and
 *    malloc(0)'s blocks are never accessible: a read or write through such a
 *    pointer faults. */
#include "internal.h"
#include "options.h"

#include <stdio.h>
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

/* ---- canaries ---------------------------------------------------------------
 * A block of a size class, B bytes, handed out for a request of n bytes
 * (n + SECURE_TAIL <= B):
 *     [0, n)          the program's
 *     [n, B - 16)     canary bytes: a zero, then keyed bytes with their top
 *                     bit set, for 32 bytes or so (canary_end); past them
 *                     what was there
 *     [B - 16, B - 8) the size word: n above a zero low byte (the byte after
 *                     the requested ones when n = B - 16), and in its top
 *                     half a keyed check of n and the block's address
 *     [B - 8, B)      the guard word of the block after it: keyed(next block)
 * The guard words are written when blocks are carved and never again, free
 * or in use (the fill of a freed block stops short of them), so any thread
 * may read its neighbour's; the first block's lies in a pad before it (a
 * page starts secure_pad bytes into its run).  A large block has the same
 * tail (n, its canary bytes, a guard word) but no guard word before it: it
 * starts its run, and nothing before it is its own.
 *
 * In a block of a class the byte right after the requested ones is zero,
 * so a string read past the end stops there, as with hardened_malloc's
 * canaries; an overflow is caught unless all it writes is that zero: any
 * other byte there, and any byte of 0x00-0x7f (text, a string's
 * terminator, small numbers) after it, always shows; another byte with
 * probability 127/128.  In a large block that byte is a keyed one as well
 * (a zero written there shows too).  The canaries depend on a per-process
 * secret and on the block's address: copied from another block they do not
 * fit.  They catch overflows and underflows, not an attacker who can read
 * the heap. */
static uint64_t canary_k1, canary_k2;

void secure_init(void) {
  canary_k1 = os_random();
  canary_k2 = os_random();
}

static uint64_t keyed(uintptr_t x) { return key_mix(x ^ canary_k1) ^ canary_k2; }
/* Block b's canary byte at offset i (i > n): byte i % 8 of this word. */
static uint64_t canary_pattern(const uint8_t *b) { return keyed((uintptr_t)b | 1) | 0x8080808080808080ull; }
static uint8_t canary_byte(uint64_t pat, size_t i) { return (uint8_t)(pat >> 8 * (i & 7)); }
/* The byte at offset n, right after the requested ones: zero for a block
 * of a class, the canary byte for a large block. */
static uint8_t first_byte(const page_t *pg, uint64_t pat, size_t n) { return pg->cls < CLASSES ? 0 : canary_byte(pat, n); }
/* The size word: n above its low byte, which is first_byte (the word is
 * 8-aligned), and a keyed check in the top half. */
static uint64_t size_word(const page_t *pg, const uint8_t *b, uint64_t pat, size_t n) {
  uint64_t low = (uint64_t)n << 8 | first_byte(pg, pat, 0);
  return low | (keyed(keyed((uintptr_t)b | 2) ^ low) & ~(uint64_t)UINT32_MAX);
}
static uint64_t load(const uint8_t *p) { uint64_t w; memcpy(&w, p, sizeof w); return w; }
static void store(uint8_t *p, uint64_t w) { memcpy(p, &w, sizeof w); }

/* The pad before a page's first block: at least its guard word, and a
 * multiple of the blocks' alignment (the largest power of two dividing their
 * size, up to SECURE_ALIGN_MAX), so that aligned requests still find their
 * alignment in a class whose size is a multiple of it. */
size_t secure_pad(size_t block_size) {
  size_t a = block_size & -block_size;
  return !hm_secure ? 0 : a < SECURE_ALIGN_MAX ? a : SECURE_ALIGN_MAX;
}

/* The class of a request of n bytes with its tail, or CLASS_LARGE: at least
 * 32 bytes (a free block's mark and link must not reach its guard word);
 * class 0 serves malloc(0) alone (zero-size blocks, below). */
size_t secure_class(size_t n) {
  if (n > MEDIUM_MAX - SECURE_TAIL) return CLASS_LARGE;
  if (n == 0) return 0;
  size_t c = class_of(n + SECURE_TAIL);
  return c ? c : 1;
}

/* Block b of pg is handed out for n bytes: its canary bytes, size word and
 * (a large block) guard word. */
/* Where the canary bytes after n requested bytes end: CANARY_SPAN bytes on,
 * at a word boundary, or at the size word if it comes first.  (Bounded: a
 * realloc by a few bytes, or a free, costs the same in any block.) */
#define CANARY_SPAN 32
static size_t canary_end(const page_t *pg, size_t n) {
  size_t end = pg->block_size - SECURE_TAIL, e = (n + CANARY_SPAN + 7) & ~(size_t)7;
  return e < end ? e : end;
}

static void canary_set(const page_t *pg, uint8_t *b, size_t n) {
  size_t end = canary_end(pg, n);
  uint64_t pat = canary_pattern(b);
  size_t i = n;
  for (; i < end && (i & 7); i++) b[i] = canary_byte(pat, i);
  for (; i < end; i += 8) store(b + i, pat);
  if (n < end) b[n] = first_byte(pg, pat, n);
  store(b + pg->block_size - SECURE_TAIL, size_word(pg, b, pat, n));
  if (pg->cls == CLASS_LARGE) store(b + pg->block_size - 8, keyed((uintptr_t)b + pg->block_size));
}

static HM_COLD void overflow(const page_t *pg, const uint8_t *b, size_t n, size_t at) {
  char what[160];
  snprintf(what, sizeof what, "heap overflow: a write %zu bytes past the end of the block's %zu requested bytes",
           at - n + 1, n);
  hm_fatal(what, b, pg);
}

/* The requested size of block b of pg, in use, after checking its canaries
 * and the guard words before and after it; a canary found changed is
 * reported. */
static size_t canary_check(const page_t *pg, const uint8_t *b) {
  uint64_t w = load(b + pg->block_size - SECURE_TAIL), pat = canary_pattern(b);
  size_t n = (uint32_t)w >> 8;
  if (n > pg->block_size - SECURE_TAIL || w != size_word(pg, b, pat, n))
    hm_fatal("heap overflow: the canary after the block's requested size was overwritten", b, pg);
  size_t i = n, end = canary_end(pg, n);
  if (i < end && b[i++] != first_byte(pg, pat, n)) overflow(pg, b, n, n);
  while (i < end && (i & 7) && b[i] == canary_byte(pat, i)) i++;
  if (!(i & 7))
    while (i < end && load(b + i) == pat) i += 8;
  if (i < end) {
    while (b[i] == canary_byte(pat, i)) i++;        /* the first byte changed */
    overflow(pg, b, n, i);
  }
  if (load(b + pg->block_size - 8) != keyed((uintptr_t)b + pg->block_size))
    hm_fatal("heap overflow: a write past the end of the block (its guard word)", b, pg);
  if (pg->cls < CLASSES && load(b - 8) != keyed((uintptr_t)b))
    hm_fatal("heap underflow: a write before the start of the block (the guard word before it)", b, pg);
  return n;
}

/* Block p (a new block from malloc's slow path) is handed out for n bytes.
 * (A huge block aligned to SEG_SIZE or more has its segment below it: no
 * segment of p's own, and no canaries.) */
void *secure_arm(void *p, size_t n) {
  segment_t *s = segment_checked(p);
  page_t *pg = s ? page_of(s, p) : NULL;
  if (pg && pg->cls != 0 && pg->cls <= CLASS_LARGE) canary_set(pg, p, n);
  return p;
}

/* The bytes block p of pg, in use, may be written: its requested size, its
 * canaries checked (a huge block: its size; a zero-size block: 0). */
size_t secure_usable(page_t *pg, const void *p) {
  return pg->cls == 0 ? 0 : pg->cls <= CLASS_LARGE ? canary_check(pg, p) : pg->block_size;
}

/* ---- zero-size blocks ---------------------------------------------------------
 * malloc(0) gets a block of class 0 (16 bytes, which no other request gets
 * in this mode) on a page whose blocks are never readable: the page is made
 * PROT_NONE when it is made, blocks are taken and given back by their bits
 * in the allocation bitmap alone (no free list, no canary, no fill,
 * nothing that touches them), so a read or write through the pointer
 * faults.  Such a page holds few bytes of memory and is kept (its count of
 * blocks in use stays 1: never empty, never retired). */
static void *zero_take(page_t *pg, uint64_t r) {
  size_t words = (pg->reserved + 63) / 64;
  for (size_t k = 0; k < words; k++) {
    size_t i = (r + k) % words * 64;
    uint64_t bit;
    _Atomic uint64_t *w = bit_of(pg, pg->start + i * pg->block_size, &bit);
    uint64_t v = atomic_load_explicit(w, memory_order_relaxed);
    if (i + 64 > pg->reserved) v |= ~0ull << (pg->reserved - i);       /* past the last block */
    if (~v == 0) continue;
    unsigned j = (unsigned)__builtin_ctzll(~v);
    atomic_fetch_or_explicit(w, 1ull << j, memory_order_relaxed);      /* (the owner alone sets bits) */
    return pg->start + (i + j) * pg->block_size;
  }
  return NULL;
}

/* (h locked) A zero-size block of h's. */
void *secure_zero_alloc(heap_t *h) {
  uint64_t r = heap_rand(h);
  for (page_t *pg = h->queue[0].first; pg; pg = pg->next) {
    void *p = zero_take(pg, r);
    if (p) return p;
  }
  page_t *pg = segment_page_alloc(h, 1, 0, false);
  if (!pg) return NULL;
  page_init(h, pg, class_size(0), 0);
  os_protect(page_run(pg), SLICE_SIZE - OS_PAGE, false);
  pg->capacity = pg->reserved;
  page_set_area(pg, (size_t)pg->reserved * pg->block_size);
  page_set_used(pg, 1);
  pageq_push_front(&h->queue[0], pg);
  return zero_take(pg, r);
}

/* ---- fill patterns ----------------------------------------------------------- */

/* Level 1 fills and checks a block's first CHECKED bytes; level 2 zeroes
 * and checks all of it but its last word, the guard word of the block after
 * it, which no free or malloc rewrites (canaries below). */
static size_t checked(const page_t *pg) {
  size_t body = pg->block_size - sizeof(uint64_t);
  return hm_secure_level >= 2 || body < CHECKED ? body : CHECKED;
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

/* page_extend in secure mode: fill the n blocks just carved at first, write
 * their guard words (and the first block's, in the pad), and link them, in
 * random order, in front of the page's free list. */
void secure_carve(page_t *pg, uint8_t *first, size_t n) {
  heap_t *h = atomic_load_explicit(&pg->heap, memory_order_relaxed);
  hm_assert(n > 0 && n <= UINT16_MAX + 1 && first + n * pg->block_size <= pg->start + (size_t)pg->reserved * pg->block_size);
  uint16_t order[n];
  if (first == pg->start) store(first - 8, keyed((uintptr_t)first));
  for (size_t i = 0; i < n; i++) {
    uint8_t *b = first + i * pg->block_size;
    order[i] = (uint16_t)i;
    fill(pg, b);
    store(b + pg->block_size - 8, keyed((uintptr_t)b + pg->block_size));
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
  hm_assert(b && heap_held(atomic_load_explicit(&pg->heap, memory_order_relaxed)) && page_used(pg) < pg->capacity);
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
void *secure_quarantine_take(heap_t *h) {
  quarantine_t *q = h->quarantine;
  hm_assert(heap_held(h));
  if (!q || !q->count) return NULL;
  void *p = q->slot[q->head];
  hm_assert(q->count <= QUARANTINE_BLOCKS && q->head < QUARANTINE_BLOCKS && segment_known(p));
  q->head = (q->head + 1) % QUARANTINE_BLOCKS;
  q->count--;
  hm_assert(q->bytes >= page_of(segment_of(p), p)->block_size);
  q->bytes -= page_of(segment_of(p), p)->block_size;
  return p;
}

/* A block leaving the quarantine: accessible again (a large one), checked. */
void *secure_unquarantine(void *p) {
  page_t *pg = page_of(segment_of(p), p);
  if (pg->cls == CLASS_LARGE) os_protect(p, pg->block_size, true);
  check_fill(pg, p, 0);
  return p;
}

/* free(p) in secure mode, before the block is released: clear its bit (a
 * block whose bit is clear was not allocated), check its canaries and a
 * sized free's size (0: none given), fill it, and queue it (a large block
 * made inaccessible meanwhile).  Returns the block to release now (the
 * oldest one leaving the quarantine), or NULL. */
void *secure_free(page_t *pg, void *p, size_t size) {
  if (pg->cls < CLASSES) {
    uint64_t bit;
    _Atomic uint64_t *w = bit_of(pg, p, &bit);
    if (!(atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed) & bit))
      hm_fatal("double free (or free of a block never handed out)", p, pg);
  }
  size_t n = secure_usable(pg, p);
  if (size && size != n) {
    char what[160];
    snprintf(what, sizeof what, "sized free or delete of %zu bytes of a block allocated with %zu", size, n);
    hm_fatal(what, p, pg);
  }
  if (pg->cls == 0) return NULL;               /* a zero-size block: its bit was all there was */
  fill(pg, p);
  heap_t *owner = atomic_load_explicit(&pg->heap, memory_order_relaxed);
  if (owner && owner->user) return p;          /* (its heap's destruction must find it freed) */
  bool large = pg->cls == CLASS_LARGE;
  if (large) os_protect(p, pg->block_size, false);
  heap_t *h = hm_tls_heap;
  if (h == &hm_heap_empty) h = heap_get();
  quarantine_t *q = NULL;
  if (h) {
    heap_enter(h);                             /* (malloc_trim may be flushing it: purge.c) */
    if (!(q = h->quarantine)) q = h->quarantine = os_map(sizeof *q);
  }
  if (!q) {
    if (h) heap_leave(h);
    return secure_unquarantine(p);
  }
  void *out = q->count == QUARANTINE_BLOCKS || q->bytes > QUARANTINE_BYTES ? secure_quarantine_take(h) : NULL;
  q->slot[(q->head + q->count) % QUARANTINE_BLOCKS] = p;
  q->count++;
  q->bytes += pg->block_size;
  heap_leave(h);
  return out ? secure_unquarantine(out) : NULL;
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
