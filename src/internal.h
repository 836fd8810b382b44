/* hakmem internals: the shapes every module shares.
 *
 * Memory comes in segments: SEG_SIZE-aligned mappings whose first slice holds
 * the segment header (and with it the page descriptors).  The rest of a normal
 * segment is cut into pages, each a run of 64 KiB slices serving one size
 * class.  Any block pointer p finds its metadata in O(1):
 *     segment = p & ~SEG_MASK,  page = segment->slice_page[(p - segment) >> SLICE_SHIFT]
 * and the segment map (one byte per SEG_SIZE of address space) says whether
 * that segment is ours before we touch it.  Blocks have no header.
 *
 * Every page belongs to one thread's heap.  The owner allocates and frees on
 * the page without atomics; other threads push frees onto the page's
 * thread_free list with one CAS and the owner collects them in bulk.
 */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#define HM_EXPORT     __attribute__((visibility("default")))
/* hakmem_name, the exported name of hm_name (defined in the same file) */
#define HM_EXPORT_HAKMEM(name) \
  __typeof__(hm_##name) hakmem_##name __attribute__((alias("hm_" #name), visibility("default")));
#define HM_INLINE     static inline __attribute__((always_inline))
#define HM_NOINLINE   __attribute__((noinline))
#define HM_COLD       __attribute__((cold, noinline))
#define likely(x)     __builtin_expect(!!(x), 1)
#define unlikely(x)   __builtin_expect(!!(x), 0)

/* An invariant the code relies on.  The debug build (make debug, -DHM_DEBUG)
 * checks it and reports a false one as "hakmem: assertion failed: <expr>
 * (file:line)" before it aborts (report.c: no allocation, no lock); the
 * release build compiles it to nothing (the condition is type-checked, never
 * evaluated).  Only for what the calling thread reads consistently: not for
 * what other threads change without a lock (thread_free, the delayed list,
 * another heap's pages). */
#ifdef HM_DEBUG
#define HM_DEBUG_ON 1
__attribute__((noreturn, cold)) void hm_assert_fail(const char *expr, const char *file, int line);
#define hm_assert(cond) (likely(cond) ? (void)0 : hm_assert_fail(#cond, __FILE__, __LINE__))
#else
#define HM_DEBUG_ON 0
#define hm_assert(cond) ((void)sizeof(!(cond)))
#endif

/* Built under a sanitizer (GCC's macros, or clang's __has_feature). */
#if defined(__SANITIZE_ADDRESS__)
#define HM_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define HM_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(HM_ASAN)
#define HM_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(HM_TSAN)
#define HM_TSAN 1
#endif
#endif
#ifndef HM_ASAN
#define HM_ASAN 0
#endif
#ifndef HM_TSAN
#define HM_TSAN 0
#endif

/* A word (racy_byte: a byte) another thread may write, read on free's fast
 * path where GCC may fold the load into the compare or the arithmetic that
 * uses it (it never folds an atomic load, even a relaxed one: one
 * instruction more).  x86-64 and arm64 load an aligned word whole, so the
 * read sees the old value or the new one; under TSan, which cannot know
 * that, an atomic load. */
static inline uint64_t racy_word(const _Atomic uint64_t *w) {
#if HM_TSAN
  return atomic_load_explicit(w, memory_order_relaxed);
#else
  return *(const uint64_t *)w;
#endif
}
static inline uint8_t racy_byte(const _Atomic(uint8_t) *b) {
#if HM_TSAN
  return atomic_load_explicit(b, memory_order_relaxed);
#else
  return *(const uint8_t *)b;
#endif
}

/* ---- geometry ------------------------------------------------------------ */
#define SEG_SHIFT     22                        /* 4 MiB segments */
#define SEG_REGION    ((uintptr_t)1 << 41)      /* segments go up from a random start (os.c), over
                                                   512 GiB at most: one or two aligned 2 TiB regions */
#define SEG_SIZE      ((size_t)1 << SEG_SHIFT)
#define SEG_MASK      (SEG_SIZE - 1)
#define SLICE_SHIFT   16                        /* 64 KiB slices */
#define SLICE_SIZE    ((size_t)1 << SLICE_SHIFT)
#define SLICES        (SEG_SIZE / SLICE_SIZE)   /* 64, slice 0 is the header */
#define OS_PAGE       os_page_size()    /* 4 KiB, or 16/64 KiB on some arm64 kernels */

/* The segment map: one byte per segment of a window of 1 TiB (below), and
 * the rest of a 48-bit address space in chunks of that size as needed. */
#define ADDR_BITS     48
#define SEGMAP_BITS   18
#define SEGMAP_SIZE   ((size_t)1 << SEGMAP_BITS)

/* ---- size classes ---------------------------------------------------------
 * 16-byte steps up to 128 B, then four classes per power of two (waste <= 25%),
 * up to 256 KiB, and one more at 4.5 KiB: buffers of a 4 KiB page and a small
 * header are common (sqlite3's page cache: 4104-4368 bytes), and would waste
 * a fifth of their size in the 5 KiB class.  Bigger blocks are "large" (one
 * block on a run of slices of a segment) up to LARGE_MAX, a segment but its
 * header, then "huge" (a segment of their own).  A buffer that realloc grows
 * past GROW_HUGE becomes huge, which mremap grows without copying (a large
 * one that cannot grow in place is copied). */
#define CLASSES       53
#define CLASS_4K      27                        /* class_size(CLASS_4K) == 4096 */
#define SIZE_4K5      ((size_t)4608)            /* the next class, the one off the grid */
#define MEDIUM_MAX    ((size_t)256 << 10)       /* largest size class */
#define LARGE_MAX     (SEG_SIZE - SLICE_SIZE)
#define GROW_HUGE     (SEG_SIZE / 2)
#define CLASS_LARGE   CLASSES                   /* page kinds beyond the classes */
#define CLASS_HUGE    (CLASSES + 1)
#define MAX_ALIGN_IN_CLASS SLICE_SIZE           /* pages start on slice boundaries */

/* Largest request we accept; above it malloc fails with ENOMEM. */
#define ALLOC_MAX     ((size_t)PTRDIFF_MAX - 2 * SEG_SIZE)

static inline size_t size_class(size_t n) {
  if (n <= 128) return n <= 16 ? 0 : (n - 1) >> 4;
  size_t m = n - 1;
  unsigned b = 63 - (unsigned)__builtin_clzl(m);            /* floor(log2(n-1)) >= 7 */
  return 8 + (b - 7) * 4 + ((m >> (b - 2)) & 3) + (n > SIZE_4K5);
}
/* malloc's class tables: sizes up to 3.5 KiB in 16-byte steps, and above
 * it in 512-byte steps up to MEDIUM_MAX (every class boundary there is a
 * multiple of 512 bytes).  One load, and no branch on the size within each,
 * so a program mixing sizes does not pay mispredicted jumps. */
#define SMALL_MAX     ((size_t)3584)            /* class_size(CLASS_4K - 1): sizes above it have a thread cache */
extern const uint8_t hm_class_small[SMALL_MAX / 16 + 1];
extern const uint8_t hm_class_big[MEDIUM_MAX / 512 + 1];
static inline size_t class_of(size_t n) {         /* n <= MEDIUM_MAX */
  return n <= SMALL_MAX ? hm_class_small[(n + 15) >> 4] : hm_class_big[(n + 511) >> 9];
}
/* Aligned requests up to 32 KiB take malloc's fast path (alloc.c). */
#define TABLE_MAX     ((size_t)32 << 10)
static inline size_t class_size(size_t c) {
  if (c < 8) return (c + 1) * 16;
  if (c == CLASS_4K + 1) return SIZE_4K5;
  if (c > CLASS_4K) c--;
  size_t b = 7 + (c - 8) / 4, k = (c - 8) % 4;
  return ((size_t)1 << b) + (k + 1) * ((size_t)1 << (b - 2));
}

/* A thread cache (tcache.c, tcl_t below): freed blocks of one class from 4
 * KiB up, last freed first, linked as a page's free list is.  A cached
 * block's first word is its page's mark (it looks free), its second the link
 * to the next block, encoded with the heap's tc_key. */
#define TC_MIN      CLASS_4K
#define TC_CLASSES  (CLASSES - TC_MIN)           /* up to 256 KiB (MEDIUM_MAX) */
#define TC_MAX      64                           /* blocks a cache holds at most */
static inline bool class_cached(size_t c) { return c - TC_MIN < TC_CLASSES; }   /* has a thread cache */
#define CLASS_OVER_32K (TC_MIN + 14)             /* the first class above 32 KiB */
extern bool hm_tc_fast[CLASSES];                 /* class c's cache is malloc's and free's list */
static inline bool tcache_fast(size_t c) { return hm_tc_fast[c]; }
extern bool hm_tcache_on;                        /* HAKMEM_THREAD_CACHE_KB > 0, membarrier works, not hardened */

/* ---- blocks and pages ---------------------------------------------------- */
/* A free block (smallest: 16 bytes) holds two words: b[0].word is its page's
 * key, the mark free() tests for "already free", b[1].word the link to the
 * next free block (link_enc: encoded with a key of its list that the mark does
 * not reveal, and with the block's own address).  A live block's first word
 * is the program's data, or 0 from malloc. */
typedef struct block_s { uintptr_t word; } block_t;

struct heap_s;
struct segment_s;

/* Page flags: any set bit sends free() off the fast path. */
#define PAGE_FULL     1   /* parked on the heap's full list */
#define PAGE_SLOW     2   /* stats or secure mode: every free is counted or checked */

/* thread_free low bits: what a remote free must do besides pushing. */
#define TF_NORMAL     0   /* just push onto thread_free */
#define TF_NOTIFY     1   /* page is parked full: hand the block to the owner heap */
#define TF_BUSY       2   /* a remote thread is handing a block to the owner */
#define TF_MASK       3
/* The other bits: the list's head (a block address, below 2^48) and, in the
 * top 16, how many blocks it holds, so that the owner need not count them. */
#define TF_ONE        ((uintptr_t)1 << 48)
#define TF_PTR(tf)    ((tf) & (TF_ONE - 1) & ~(uintptr_t)TF_MASK)
#define TF_COUNT(tf)  ((uint32_t)((tf) >> 48))
/* thread_free after pushing block b onto tf's list */
#define TF_PUSH(tf, b) ((uintptr_t)(b) + ((tf) & ~(TF_ONE - 1)) + TF_ONE + ((tf) & TF_MASK))

/* Three cache lines, by who writes them: free() on any thread reads the
 * first, the owner's malloc and free write the second, other threads' frees
 * the third, so neither kind of traffic drags the other's line along. */
/* A free list as malloc's fast path pops it and free's pushes it (hot.h):
 * a page's, or a thread cache's (tcl_t below).  used: a page's blocks in use,
 * a cache's room left; a push that takes it to 0 empties the page or fills
 * the cache. */
typedef struct list_s {
  uintptr_t free;                /* the first block */
  uintptr_t key;                 /* the links' key (link_enc) */
  uintptr_t check;               /* bits that are 0 in next ^ block for a next block that
                                    needs no closer look (hm_list_take) */
  uint32_t used;                 /* written by the owner alone, read by others: count_*() */
} list_t;

typedef struct page_s {
  /* set when the page is made (area grows as it is carved): read by every free */
  uint8_t *start;                /* first block */
  _Atomic uint64_t limit;        /* blocks carved times e (page_set_area): free's test */
  uint64_t magic;                /* floor(2^64 / block_size) + 1, or 1 for a page of one
                                    block (page_set_magic) */
  uintptr_t key;                 /* a free block's mark (random, high bit set) */
  struct heap_s *_Atomic heap;   /* owner; NULL while the segment is abandoned */
  _Atomic uintptr_t local;       /* the owner's address while flags are clear, else 0: the
                                    one test free's fast path makes (page_set_local; any
                                    thread reads it, hence atomic, relaxed: a plain load) */
  size_t block_size;
  uint8_t cls;                   /* size class, CLASS_LARGE or CLASS_HUGE */
  _Atomic uint8_t rb_slot;       /* the owner's rb_slot, set with heap (any thread reads it) */
  /* the owner's */
  _Alignas(64) union {
    list_t list;                 /* the fast paths' view (hot.h) */
    struct {
      uintptr_t free;            /* the first block of the free list */
      uintptr_t link_key;        /* the links' key, independent of the mark */
      uintptr_t link_check;      /* list_t.check: its run and the blocks' alignment */
      uint32_t used;             /* blocks handed out (including remote-freed, uncollected,
                                    and those in the owner's thread cache); written by the
                                    owner, read by the purger (page_used) */
    };
  };
  uint32_t capacity;             /* blocks carved so far */
  uint32_t reserved;             /* blocks that fit */
  uint8_t flags;
  uint8_t slices;                /* run length in slices; 0 = descriptor unused */
  uint8_t is_zero;               /* carved-but-never-used memory is zero */
  _Atomic uint8_t freed;         /* large pages (one block): its free has begun */
  uint8_t full_once;             /* found full once and sent to the back of its queue */
  uint8_t spare;                 /* empty, kept behind its queue's first page for the next
                                    refill: 1, or 2 once a spare check has seen it (heap.c) */
  uint8_t slice;                 /* its run's first slice */
  struct page_s *next, *prev;    /* in a heap queue */
  /* other threads' */
  _Alignas(64) _Atomic uintptr_t thread_free; /* remote frees: count | block list | TF_* state */
  _Atomic size_t area;           /* bytes carved into blocks (slow paths: a line free does
                                    not read) */
  uintptr_t tf_key;              /* = link_key, for the threads pushing on thread_free */
} page_t;
_Static_assert(sizeof(page_t) == 192, "a page descriptor is three cache lines");

/* A page's owner and flags are set together with local. */
static inline void page_set_local(page_t *pg);
static inline void page_set_flags(page_t *pg, uint8_t f) {
  pg->flags = f;
  page_set_local(pg);
}

/* A list's count (list_t.used): only its owner writes it; the purger reads
 * it (a page's, to tell whether every block handed out is on the
 * thread_free list, then no thread can reach the page and it may be taken
 * back; a cache's, with its head, tcache_take).  Loads are atomic; a store
 * is a release (the head and links written before it are seen with it).
 * The fast paths' update is a plain read-modify-write on x86, whose stores
 * keep their order (a compiler fence is enough): one instruction, where an
 * atomic store of a loaded count takes three; elsewhere, and under TSan,
 * which cannot see that ordering, an atomic load and store. */
static inline uint32_t count_load(const uint32_t *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }
static inline uint32_t count_load_acquire(const uint32_t *c) { return __atomic_load_n(c, __ATOMIC_ACQUIRE); }
static inline void count_store(uint32_t *c, uint32_t n) { __atomic_store_n(c, n, __ATOMIC_RELEASE); }
#if defined(__x86_64__) && !HM_TSAN
static inline void count_inc(uint32_t *c) {
  atomic_signal_fence(memory_order_release);
  ++*c;
}
static inline bool count_dec_to_zero(uint32_t *c) {
  atomic_signal_fence(memory_order_release);
  return --*c == 0;
}
#else
static inline void count_inc(uint32_t *c) { count_store(c, count_load(c) + 1); }
static inline bool count_dec_to_zero(uint32_t *c) {
  uint32_t n = count_load(c) - 1;
  count_store(c, n);
  return n == 0;
}
#endif
static inline uint32_t page_used(const page_t *pg) { return count_load(&pg->used); }
static inline void page_set_used(page_t *pg, uint32_t n) { count_store(&pg->used, n); }

/* area is read by threads freeing into the page while its owner carves more. */
static inline size_t page_area(const page_t *pg) { return atomic_load_explicit(&pg->area, memory_order_relaxed); }
/* Free's test that an offset is a block start (hm_block_start) is one
 * multiply: with magic c = floor(2^64 / d) + 1 for blocks of d bytes, c * d =
 * 2^64 + e (1 <= e <= d), so off * c (mod 2^64) is q * e for off = q * d, and
 * at least c, far above any limit, for any other offset within 2^32 of the
 * start, before it or after (c > 2^46 for d <= 256 KiB).  So off * c <
 * carved blocks * e tests both that off is a block start and that the block
 * was carved.  A page of one block (large, huge) has magic 1 and limit 1:
 * the start only.  Set the magic and block size first. */
static inline void page_set_magic(page_t *pg, bool one_block) {
  size_t d = pg->block_size;
  pg->magic = one_block ? 1 : UINT64_MAX / d + 1 + ((d & (d - 1)) == 0);
}
static inline void page_set_area(page_t *pg, size_t a) {
  atomic_store_explicit(&pg->area, a, memory_order_relaxed);
  uint64_t limit = !a ? 0 : pg->magic == 1 ? 1 : (a / pg->block_size) * (pg->magic * pg->block_size);
  atomic_store_explicit(&pg->limit, limit, memory_order_relaxed);
}

/* A free block's link, b[1].word: the next block (0: the end) XOR its list's
 * key XOR the block's own address.  The key is random and is not the mark, so
 * reading a freed block does not tell how to forge a link, and the address
 * makes a link copied from another block decode elsewhere (glibc's
 * safe-linking mixes in the address, snmalloc a key as well).  Every pop
 * checks the link it follows before the block is handed out (hm_list_take). */
static inline uintptr_t link_enc(uintptr_t key, const void *at, uintptr_t next) { return next ^ key ^ (uintptr_t)at; }
static inline uintptr_t link_dec(uintptr_t key, const void *at, uintptr_t word) { return word ^ key ^ (uintptr_t)at; }

/* The check bits of a list (list_t.check) whose blocks all lie in one
 * aligned region of region bytes, at offsets from a common start that are
 * multiples of align (a power of two): a next block outside the region, or
 * off that grid, shows as a set bit of next ^ block. */
static inline uintptr_t list_check_bits(uintptr_t region, uintptr_t align) { return ~(region - 1) | (align - 1); }

/* pg's mark and link key, two independent values drawn from its heap's
 * generator (page_init), and the links' check: every block of pg lies in its
 * run (one slice, or one segment for a longer page: blocks above 8 KiB) at a
 * multiple of the block size from its start, so at a multiple of the largest
 * power of two dividing the block size. */
static inline uint64_t key_mix(uint64_t x) {
  x ^= x >> 31; x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27; x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}
static inline void page_set_key(page_t *pg, uint64_t mark, uint64_t link) {
  pg->key = key_mix(mark) | (1ull << 63);
  pg->link_key = pg->tf_key = key_mix(link);
  pg->link_check = list_check_bits(pg->slices == 1 ? SLICE_SIZE : SEG_SIZE, pg->block_size & -pg->block_size);
}

/* Is p, at offset off from pg's start, a carved block's start (page_set_area)? */
static inline bool hm_block_start(const page_t *pg, uintptr_t off) {
  return off * pg->magic < racy_word(&pg->limit);
}
/* Does block b (of pg, not known to be live) look free: is its first word
 * the page's key?  The key is random with its top bit set, so a live block
 * looks free by chance with probability 2^-63. */
static inline bool block_looks_free(const page_t *pg, const void *b) {
  return ((const block_t *)b)[0].word == pg->key;
}
/* Give b the mark block_looks_free tests (its link is the caller's). */
static inline void block_mark_free(const page_t *pg, void *b) { ((block_t *)b)[0].word = pg->key; }
/* Make b a free block of pg whose link leads to next (0: the end).  (The
 * link key of the third line: other threads push on thread_free too.) */
static inline void block_set_free(const page_t *pg, void *b, uintptr_t next) {
  block_mark_free(pg, b);
  ((block_t *)b)[1].word = link_enc(pg->tf_key, b, next);
}
/* The block after free block b of pg (0: the end). */
static inline uintptr_t block_next(const page_t *pg, uintptr_t b) {
  return link_dec(pg->tf_key, (const void *)b, ((const block_t *)b)[1].word);
}

/* &base->field[i], as integer arithmetic: in this form GCC folds the field's
 * offset into an atomic load's address; from &base->field[i] it adds it to
 * the index first, one instruction more on malloc's and free's fast paths. */
#define HM_ELEM(base, field, i) \
  ((__typeof__(&(base)->field[0]))((uintptr_t)(base) + offsetof(__typeof__(*(base)), field) + (i) * sizeof((base)->field[0])))

/* ---- segments ------------------------------------------------------------ */
typedef struct segment_s {
  struct segment_s *all_next, *all_prev; /* registry of every mapped segment (census) */
  bool huge_pages;               /* asked for transparent huge pages (HAKMEM_HUGEPAGES=2): kept
                                    when cached, as the mapping keeps the advice */
  /* (a line on: a segment's first line sits in the L1 set that every block at
   * a 4 KiB multiple from its slice falls in, all of a 4 KiB class's for one,
   * and free's lookup here would lose it to them) */
  _Alignas(64) page_t *slice_page[SLICES]; /* slice -> page descriptor (NULL when free) */
  list_t *_Atomic slice_push[SLICES]; /* slice of a class page -> where its owner's free
                                    pushes (page_set_local): the page, or the owner's
                                    thread cache of the class.  Beside slice_page, so that
                                    free knows the push's address as early as the page's
                                    (from the page descriptor, a second load waits for
                                    the cold descriptor's two lines in turn) */
  uint64_t used_slices;          /* bit i: slice i belongs to a page (bit 0: header) */
  uint64_t dirty_slices;         /* free slices that may still be resident */
  uint64_t aged_slices;          /* dirty slices already free at the last purge check */
  uint64_t vacated_slices;       /* free slices where a large block started: pages of the
                                    size classes take them last (segment_page_alloc) */
  unsigned checked_used;         /* slices in use at the last purge check */
  uint64_t purge_ms;             /* next purge check, 0 = none pending */
  uint64_t purged_slices;        /* free slices purged at purged_ms, not reused since */
  uint64_t purged_ms;
  uint64_t guard_slices;         /* secure mode: slices whose last OS page is a guard */
  struct heap_s *heap;           /* owner heap, NULL when abandoned or cached */
  struct segment_s *next, *prev; /* heap's list / abandoned list / cache */
  size_t size;                   /* mapping size */
  size_t huge_offset;            /* huge segments: header sits this far below the block's chunk */
  uint64_t huge_serial;          /* huge segments: huge blocks handed out before this one, + 1 */
  _Atomic int abandoned;
  uint32_t pages_used;
  uint64_t pages_map;            /* bit d: pages[d] describes a page */
  uint8_t origin;                /* where its pages go first (segment.c): a random slice */
  uint8_t fit_run[2];            /* its heap's index (segment.c): longest free run, longest
                                    free and resident run; 0: in no bin */
  struct segment_s *fit_next[2], *fit_prev[2];
  page_t pages[SLICES];          /* page descriptors, lowest free one first: a segment of
                                    few pages touches one OS page of header (huge: pages[1]) */
} segment_t;

_Static_assert(sizeof(segment_t) <= SLICE_SIZE, "segment header must fit in slice 0");

/* The segment map says which SEG_SIZE chunks of address space are segments
 * of ours, and of which kind.  A process's segments lie together (os.c
 * hints them into one run of address space, and ordinary mmaps fill the top
 * of the address space downwards), so the map free's fast path reads is a
 * window of SEGMAP_SIZE segments (1 TiB) centred on the first segment mapped
 * (hm_segmap_lo: its first segment, a segment number, set once before any
 * segment is published); a segment outside it goes into the far map, chunks
 * of the same size mapped as they are needed, which the slow paths read
 * (segment.c).  The window is in .bss: valid before any initialisation
 * (free(NULL) may come first), 256 KiB of address space, and its untouched
 * pages cost no memory. */
/* (hidden: free reads hm_segmap_lo in its subtraction, not through the GOT) */
extern _Atomic uint64_t hm_segmap_lo __attribute__((visibility("hidden")));
extern _Atomic(uint8_t) hm_segmap[SEGMAP_SIZE];
#define SEGMAP_NORMAL 1
#define SEGMAP_HUGE   2
_Atomic(uint8_t) *segmap_far(uintptr_t i);        /* segment i's far entry, or NULL (segment.c) */
/* The map's entry of segment number i (p >> SEG_SHIFT), NULL if none. */
static inline _Atomic(uint8_t) *segmap_entry(uintptr_t i) {
  uintptr_t w = i - racy_word(&hm_segmap_lo);
  return w < SEGMAP_SIZE ? &hm_segmap[w] : segmap_far(i);
}

/* The slice bitmap bits of slices [i, i+n) of a segment. */
static inline uint64_t slice_run(size_t i, size_t n) { return (n >= 64 ? ~0ull : (1ull << n) - 1) << i; }
static inline segment_t *segment_of(const void *p) {
  return (segment_t *)((uintptr_t)p & ~(uintptr_t)SEG_MASK);
}
/* The first byte of pg's run of slices. */
static inline uint8_t *page_run(const page_t *pg) { return (uint8_t *)segment_of(pg) + (size_t)pg->slice * SLICE_SIZE; }
/* Each page of segment s in turn (pg may be given back inside the loop). */
#define for_each_page(s, pg) \
  for (uint64_t m_ = (s)->pages_map; m_ && ((pg) = &(s)->pages[__builtin_ctzll(m_)], 1); m_ &= m_ - 1)
/* Is p in one of our segments of the map's window (free's fast path; the
 * others take the slow path)?  Safe for any pointer value. */
static inline bool segment_near(const void *p) {
  uintptr_t w = ((uintptr_t)p >> SEG_SHIFT) - racy_word(&hm_segmap_lo);
  return w < SEGMAP_SIZE && racy_byte(&hm_segmap[w]);
}
/* Is p in one of our segments?  Safe for any pointer value. */
static inline bool segment_known(const void *p) {
  _Atomic(uint8_t) *e = segmap_entry((uintptr_t)p >> SEG_SHIFT);
  return e && atomic_load_explicit(e, memory_order_relaxed);
}
/* Our segment header for p, or NULL.  Safe for any pointer value. */
static inline segment_t *segment_checked(const void *p) { return segment_known(p) ? segment_of(p) : NULL; }

/* ---- heaps --------------------------------------------------------------- */
typedef struct pageq_s { page_t *first, *last; } pageq_t;

/* Another heap's blocks a thread freed, on their way to that heap (remote.c). */
#define RB_BLOCKS 59
#define RB_BYTES  ((uint32_t)1024 << 10) /* or blocks above 32 KiB of this many bytes: a thread
                                           freeing another's big blocks holds few back */
typedef struct rbuf_s {
  struct rbuf_s *next;           /* in an inbox or a list of spares */
  struct heap_s *home;           /* the heap that made it, which gets it back */
  struct heap_s *to;             /* the heap that owns its blocks */
  uint32_t n;
  _Atomic uint32_t depth;        /* buffers in the inbox from this one down (remote_send) */
  uint32_t bytes;                /* the sizes of its blocks above 32 KiB */
  void *block[RB_BLOCKS];
} rbuf_t;
/* A thread keeps a buffer in each of RB_SLOTS slots, for the owner heaps
 * whose number (rb_slot, given out in turn) falls there: a thread freeing
 * blocks of a few heaps in turn fills a buffer for each. */
#define RB_SLOTS 8
#define RB_MAX   64                  /* buffers in the heap struct (32 KiB); more are made from
                                        the heap's own blocks while all of these are out */

/* A thread cache: a list_t like a page's, so that malloc and free pop and
 * push either alike (hot.h), whose count is the room left: a push that fills
 * the cache takes it to 0 as one that empties a page does. */
typedef struct {
  list_t l;                      /* head, the heap's tc_key, room */
  _Atomic uint32_t taken;        /* (locked; the census reads it) blocks the purger took
                                    since it parked the caches */
  uint32_t room_seen;            /* room at the last decay */
  uint32_t cut_room;             /* (parked) the room, and the first block, when the purger */
  block_t *cut;                  /* cut the cache after that block (tcache_take) */
} tcl_t;
/* direct[]: (n + 15) / 16 up to 32 KiB, then one entry per 512 bytes up to
 * MEDIUM_MAX (the classes from 4 KiB are 512-byte multiples). */
#define DIRECT_16_MAX ((size_t)32 << 10)
#define DIRECT_BIG(n) ((((n) + 511) >> 9) + DIRECT_16_MAX / 16 + 1 - DIRECT_16_MAX / 512 - 1)
#define DIRECT_N      (DIRECT_BIG(MEDIUM_MAX) + 1)
static inline size_t direct_size(size_t i) { return i <= DIRECT_16_MAX / 16 ? i * 16 : (i - DIRECT_BIG(0)) * 512; }

/* A heap belongs to one thread.  Its fast paths take no lock; its slow paths
 * hold heap->lock, which the purger (purge.c) also takes when it returns the
 * memory of a heap whose thread stopped calling the allocator. */
/* decay.c: how long free memory stays before it goes back to the OS */
#define PURGE_DELAY_MAX_MS 1000
typedef struct decay_s {
  uint64_t delay_ms;             /* 0 until first used: then at least HAKMEM_PURGE_DELAY_MS */
} decay_t;
uint64_t decay_delay(decay_t *d);                  /* the delay now */
static inline uint64_t decay_due(decay_t *d, uint64_t now) { return now + decay_delay(d); }
void     decay_reused(decay_t *d, uint64_t gone_ms, uint64_t now);   /* memory gone at gone_ms wanted at now */
void     decay_purged(decay_t *d);                 /* memory went, and no reuse came after the last */
void     decay_reset(decay_t *d);                  /* back to HAKMEM_PURGE_DELAY_MS */
bool     decay_at_base(decay_t *d);

typedef struct heap_s {
  _Atomic uint8_t tc_busy;       /* the owner is appending to a buffer of remote frees */
  _Atomic uint8_t tc_stop;       /* the purger is taking the buffers: keep out */
  bool tc_parked;                /* (locked) the purger cut the caches: malloc and free keep
                                    out of them until the owner's next slow path */
  uintptr_t tc_key;
  _Atomic(rbuf_t *) out[RB_SLOTS]; /* blocks of other heaps this thread freed (atomic: the
                                    purger may take them, as the thread caches; relaxed) */
  tcl_t tc[TC_CLASSES];          /* thread caches of classes TC_MIN.. (the purger may cut
                                    them, tcache_take) */
  pageq_t queue[CLASSES];        /* pages with (possibly) free blocks, per class */
  pageq_t full;                  /* parked pages, all classes */
  _Atomic uintptr_t delayed;     /* blocks remote-freed into parked pages */
  segment_t *segments;           /* segments owned by this heap */
  segment_t *fit[2][SLICES];     /* the same, by longest free run and longest resident free
                                    run: bin k holds those whose run is k slices (segment.c) */
  uint64_t fit_map[2];           /* bit k: bin k not empty */
  uint64_t rand;                 /* per-heap PRNG state (page keys) */
  uint64_t next_purge_ms;        /* earliest pending purge deadline, 0 = none */
  decay_t decay;                 /* of its free slices */
  uint64_t spare_check_ms;       /* when the spare pages are next checked, 0 = none kept */
  uint32_t spare_slices;         /* slices of the spare pages, at most SPARE_SLICES */
  uint64_t freed_classes;        /* bit c: a page of class c emptied since the last spare check */
  uint8_t refills[CLASSES];      /* pages of each class carved or taken from the spares after
                                    one emptied: halved at each spare check, up to 255 */
  struct heap_s *next_free;      /* recycled heap structs, or parked heaps (heap.c) */
  bool live;                     /* a thread owns the heap (false once it exited) */
  _Atomic uint16_t tc_cap[TC_CLASSES]; /* blocks each cache may hold: doubled when full, reset
                                    when emptied (tcache.c); the census reads it */
  uint32_t tc_kb;                /* caps times block sizes, KiB: at most HAKMEM_THREAD_CACHE_KB */
  uint8_t tc_popped[CLASSES];    /* caches popped since the last decay, by class (one store) */
  uint64_t tc_decay_ms;          /* when the decay next drains the unpopped caches */
  uint32_t ticks;                /* slow-path events left before heap_tick */
  uint8_t rb_slot;               /* where other threads keep buffers of its blocks */
  rbuf_t *rb_spare;              /* empty buffers for the next sends */
  uint32_t rb_spares;
  bool rb_growing;               /* making a buffer (remote.c: its malloc may free) */
  /* first-class heaps (userheap.c): */
  bool user;                     /* a heap a program made (hakmem_heap_new), no thread's own */
  struct heap_s *maker;          /* user: the own heap of the thread that made it */
  struct heap_s *users;          /* a thread's heap: the user heaps its thread made; a user
                                    heap: the next of them */
  segment_t *huge;               /* user: the segments of its huge blocks (huge_lock) */
  _Atomic uint8_t huge_lock;
  /* kept when a struct is recycled: */
  _Atomic uint8_t owner_in;      /* the heap lock (heap.c): the owner's slow paths hold it, */
  _Atomic uint8_t other_in;      /* and the purger, or another thread's malloc_trim */
  _Atomic uint32_t lock;         /* the same as a spin lock, without membarrier */
#if HM_DEBUG_ON
  _Atomic(const void *) holder;  /* (debug build) the thread holding the lock (heap_held) */
#endif
  _Atomic uint64_t slow_ops;     /* the owner's slow-path entries: the purger's idleness test */
  _Atomic uint64_t parked_ms;    /* when its thread left it parked, 0 while a thread owns it
                                    (the purger reads it: a parked heap is never busy) */
  list_t *_Atomic direct[DIRECT_N]; /* DIRECT_BIG's index of a size -> the list malloc pops:
                                    the first page of the class's queue for the small classes
                                    (set_current), the thread cache from 4 KiB.  Kept when the struct
                                    is recycled: the cache entries stay the same (20 KiB) */
  struct heap_s *_Atomic next_all; /* registry of every heap ever made (never unlinked) */
  struct quarantine_s *quarantine; /* secure mode: recently freed blocks (secure.c) */
  uint32_t rb_made;              /* of rb[], the buffers in use (remote.c) */
  list_t tc_sink;                /* where the owner's frees of the cached classes go while
                                    the caches are parked: the first calls out (tcache_full) */
  list_t *_Atomic current[CLASSES + 1]; /* slow mode: the list of each class that malloc's
                                    fast path would pop (direct[] stays at the empty page),
                                    and the empty page for CLASS_LARGE: what the profiler
                                    pops instead (profile_malloc) */
  /* read by every thread freeing into this heap: a line of its own */
  _Alignas(64) _Atomic int idle; /* (purger) found idle and trimmed: wake me if that changes */
  uint64_t seen_ops;             /* (purger) slow_ops when it last looked */
  _Atomic(rbuf_t *) inbox;       /* buffers of this heap's blocks other threads freed */
  _Atomic(rbuf_t *) rb_back;     /* buffers this heap made, sent back empty */
  /* its buffers for other heaps' blocks, touched as they are first used */
  _Alignas(64) rbuf_t rb[RB_MAX];
} heap_t;

/* h's generator (xorshift64). */
static inline uint64_t heap_rand(heap_t *h) {
  uint64_t r = h->rand;
  r ^= r << 13; r ^= r >> 7; r ^= r << 17;
  return h->rand = r;
}
/* Give pg its mark and link key (page_set_key): two draws of h's generator,
 * the link's mixed with the heap's secret tc_key. */
static inline void heap_page_keys(heap_t *h, page_t *pg) {
  uint64_t mark = heap_rand(h);
  page_set_key(pg, mark, heap_rand(h) ^ h->tc_key);
}
#define HEAP_RESET_SIZE offsetof(heap_t, owner_in)   /* (the lock is held across the reset) */
#define SPARE_SLICES 64              /* spare pages (heap.c): at most 4 MiB a heap, */
#define CLASS_SPARES 8               /* 8 pages a class, */
#define SPARE_AFTER  16              /* for a class that refilled 16 times in a purge delay */
_Static_assert(CLASSES <= 64, "freed_classes has a bit per class");

static inline void page_set_push(page_t *pg, list_t *to) {
  segment_t *s = segment_of(pg);
  if (pg->cls < CLASSES)
    for (size_t k = 0; k < pg->slices; k++) atomic_store_explicit(&s->slice_push[pg->slice + k], to, memory_order_release);
}
static inline void page_set_local(page_t *pg) {
  heap_t *h = atomic_load_explicit(&pg->heap, memory_order_relaxed);
  if (pg->cls < CLASSES && tcache_fast(pg->cls))      /* (other pages push onto themselves) */
    page_set_push(pg, h && !pg->flags ? &h->tc[pg->cls - TC_MIN].l : &pg->list);
  /* (a user heap's pages have no local owner: all their frees are remote) */
  atomic_store_explicit(&pg->local, pg->flags || !h || h->user ? 0 : (uintptr_t)h, memory_order_relaxed);
}
/* Where the owner's free of p (a block of a page with an owner) pushes.
 * (Acquire: the purger, having cut a cache, points its pages back at it.) */
static inline list_t *slice_push_of(segment_t *s, size_t k) { return atomic_load_explicit(HM_ELEM(s, slice_push, k), memory_order_acquire); }
static inline list_t *hm_push_target(const void *p) {
  return slice_push_of(segment_of(p), ((uintptr_t)p & SEG_MASK) >> SLICE_SHIFT);
}

/* A page's owner (and what goes with it). */
static inline void page_set_owner(page_t *pg, heap_t *h) {
  atomic_store_explicit(&pg->rb_slot, h ? h->rb_slot : 0, memory_order_relaxed);
  atomic_store_explicit(&pg->heap, h, memory_order_release);
  page_set_local(pg);
}

extern __thread heap_t *hm_tls_heap;      /* initial-exec; &hm_heap_empty until first use */
extern heap_t hm_heap_empty;
extern page_t hm_page_empty;
extern page_t hm_page_invalid;

/* ---- module interfaces ---------------------------------------------------- */
/* os.c: the only place that talks to the kernel about memory */
size_t os_page_size(void);
void *os_map(size_t size);                        /* zeroed, NULL on failure */
void *os_map_aligned(size_t size, size_t align);
void  os_unmap(void *p, size_t size);
void  os_purge(void *p, size_t size);             /* drop contents, keep mapping */
void  os_hugepage(void *p, size_t size);          /* back with transparent huge pages */
void  os_protect(void *p, size_t size, bool access); /* access or a guard (PROT_NONE) */
void *os_remap(void *old, size_t old_size, size_t new_size, void *fixed); /* NULL on failure */
bool  os_resize_in_place(void *p, size_t old_size, size_t new_size);
uint64_t os_now_ms(void);
uint64_t os_coarse_ms(void);     /* os_now_ms as of the last timer tick: never ahead, a few ms behind */
uint64_t os_random(void);
bool  os_space_limited(void);                     /* ulimit -v: address space counts */
uintptr_t os_hint_start(void);                    /* where aligned mappings go from, 0: anywhere */
bool  os_membarrier_init(void);                   /* can os_membarrier be used */
bool  os_membarrier(void);                        /* a full fence on every running thread of the process */

/* segment.c */
page_t *segment_page_alloc(heap_t *h, size_t slices, uint8_t cls, bool tight);
void    segment_page_free(page_t *pg);
bool    segment_large_resize(page_t *pg, size_t slices);
page_t *segment_huge_alloc(heap_t *h, size_t size, size_t align);
void    segment_huge_free(segment_t *s);
void   *segment_huge_resize(segment_t *s, page_t *pg, size_t n);   /* NULL: could not, block intact */
bool    segment_huge_cache_purge(bool force, uint64_t *next);
void    segment_caches_tick(uint64_t now);             /* purge the caches' due entries, if any (two loads if none) */
enum purge_mode { PURGE_BUSY, PURGE_IDLE, PURGE_FORCE };   /* the owner's slow path; a quiet or exiting heap; every free slice now */
bool    segment_purge_due(heap_t *h, enum purge_mode mode, segment_t *watch);
void    segment_purge_reset_delay(heap_t *h);
uint64_t segment_abandon(segment_t *s);
void    segment_release_empty(heap_t *h, segment_t *s);
void    segment_unlink(heap_t *h, segment_t *s);
bool    segment_try_reclaim(heap_t *h, segment_t *s);
void    segment_give(heap_t *to, segment_t *s);        /* s, on no list, joins heap to (to locked) */
void    segment_destroy(heap_t *h, segment_t *s);      /* every page of s freed, s released */
segment_t *segment_reclaim_any(heap_t *h);
bool    segment_cache_trim(void);
void    segment_retired_unmap(void);
uint64_t segment_cache_decay(void);                /* next deadline, 0 = none */
uint64_t segment_tidy_abandoned(bool force, size_t *left);  /* next deadline, 0 = none */
void    segment_fork_prepare(void), segment_fork_parent(void), segment_fork_child(void);
static inline page_t *page_of(segment_t *s, const void *p) {
  return s->slice_page[((uintptr_t)p - (uintptr_t)s) >> SLICE_SHIFT];
}

/* page.c */
void  page_init(heap_t *h, page_t *pg, size_t block_size, uint8_t cls);
bool  page_extend(page_t *pg);
void  page_collect(page_t *pg);
void  page_set_tf_state(page_t *pg, uintptr_t st);
bool  page_try_notify(page_t *pg);
void  pageq_push(pageq_t *q, page_t *pg);
void  pageq_push_front(pageq_t *q, page_t *pg);
void  pageq_insert_after(pageq_t *q, page_t *at, page_t *pg);
void  pageq_remove(pageq_t *q, page_t *pg);
void  page_free_local_slow(page_t *pg, block_t *b);
void  page_free_remote(page_t *pg, block_t *b);
bool  page_contains_free(page_t *pg, uintptr_t b);
bool  page_block_free(heap_t *h, page_t *pg, const void *b);   /* (h locked) confirms a block that looks free */
void  page_unpark(heap_t *h, page_t *pg);
bool  page_unreachable(page_t *pg, uint32_t elsewhere);
void  delayed_push(heap_t *h, block_t *first, block_t *last);
/* A block on a delayed list: its page, and the next block. */
static inline uintptr_t delayed_next(uintptr_t b, page_t **pg) {
  *pg = page_of(segment_of((void *)b), (void *)b);
  return block_next(*pg, b);
}

/* heap.c */
heap_t *heap_get(void);                            /* this thread's heap, made on demand */
void    heap_process_ready(void);                  /* the process's set-up done (options read) */
void    heap_enter(heap_t *h);                     /* the owner's slow paths hold h's lock */
void    heap_leave(heap_t *h);
bool    heap_trylock(heap_t *h);                   /* (purger, malloc_trim) another heap's lock */
void    heap_unlock(heap_t *h);
bool    heap_held(const heap_t *h);                /* (debug build: hm_assert) this thread holds h's lock */
void    heap_validate(heap_t *h);                  /* (debug build, h locked) check the whole heap (debug.c) */
#if HM_DEBUG_ON
#define hm_validate(h) heap_validate(h)
#else
#define hm_validate(h) ((void)(h))
#endif
void    heap_page_retire_locked(heap_t *h, page_t *pg);
void    heap_collect_all(heap_t *h);                /* (owner, locked) collect everything, free empty pages */
void    heap_wake_idle(heap_t *h);                 /* a remote free reached a heap the purger trimmed */
/* Did the purger find h idle?  A thread that sent h blocks asks after the
 * push onto h's list (sequentially consistent, as this load), and the purger
 * marks h idle and fences before it looks at those lists (purge.c): so either
 * it sees the blocks, or the sender sees the mark and wakes it. */
static inline bool heap_idle(heap_t *h) { return atomic_load_explicit(&h->idle, memory_order_seq_cst); }
bool    heap_trim_idle(heap_t *h);                 /* (purger, locked) take back unreachable pages */
heap_t *heap_first(void);                          /* the registry of heaps, for the purger */
void   *heap_malloc_slow(heap_t *h, size_t n, size_t c);   /* c: n's class, or CLASS_LARGE above them */
void    heap_tick(heap_t *h);                      /* (owner, locked) every HEAP_TICKS slow-path events */
void   *heap_malloc_aligned(heap_t *h, size_t n, size_t align);
void   *heap_malloc_grow(heap_t *h, size_t n);          /* realloc: a big block that may grow in place */
void    heap_page_retire(heap_t *h, page_t *pg);
void    heap_collect_delayed(heap_t *h);
heap_t *heap_made(void);                           /* a new heap, of no thread yet */
void    heap_drain(heap_t *h);                     /* (h locked, as owner) collect all, free empty pages */
void    heap_gone(heap_t *h);                      /* (h locked) holds nothing: the purger passes it by */
void    heap_recycle(heap_t *h);                   /* a heap given back: its struct for the next */

/* userheap.c: first-class heaps */
void    userheap_huge_add(heap_t *h, segment_t *s);
void    userheap_huge_remove(segment_t *s);          /* a huge segment's block freed */
void    userheap_thread_done(heap_t *self);          /* the user heaps of an exiting thread */
bool    heap_adopt_page(heap_t *h, page_t *pg);
void    heap_free_local(heap_t *h, page_t *pg, block_t *b);
void    heap_route_caches(heap_t *h, bool to_caches);     /* (purger, locked) tcache_take */
uint64_t heap_parked_tidy(uint64_t now);           /* (purger) release long-parked heaps; next deadline */

/* tcache.c */
void tcache_process_init(bool fence);
void tcache_init(heap_t *h);                       /* a new heap's caches, on or off */
void tcache_flush(heap_t *h);                      /* (owner, locked) every cached block back to its page */
void tcache_take(heap_t *h);                       /* (purger, locked) the same while the owner runs */
void tcache_resume(heap_t *h);                     /* (owner, locked) the caches again, after a take */
bool tcache_put(heap_t *h, page_t *pg, block_t *b);        /* (owner, locked: stats mode) push b */
void *tcache_pop(heap_t *h, size_t c);             /* (owner, locked: stats mode) pop one */
void *tcache_refill(heap_t *h, page_t *pg);         /* (owner, locked) an empty cache from pg */
bool tcache_held(heap_t *h);                       /* (owner, locked) blocks wait in the caches */
void tcache_decay(heap_t *h, uint64_t now);        /* (owner, locked) empty the caches left unpopped */
bool tcache_contains(heap_t *h, size_t c, uintptr_t p);   /* (locked) is p in h's cache of class c */
void tcache_census(uint64_t *blocks);              /* cached blocks per class, every heap (a snapshot) */

/* remote.c: other heaps' blocks, freed in batches */
extern bool hm_remote_on;                          /* buffers in use (the purger can take them) */
void remote_process_init(bool fence);
void remote_free(heap_t *h, page_t *pg, block_t *b, heap_t *to);   /* free's fast path: no room in h->out[] */
void remote_send(rbuf_t *o);                       /* (no lock of this thread's heap held) */
void remote_collect(heap_t *h);                    /* (owner, no lock held) free the blocks of h's inbox */
bool remote_held(heap_t *h);                       /* h->out[] holds blocks */
void remote_flush(heap_t *h);                      /* (owner, no lock held) send h->out[] now */
void remote_open(heap_t *h), remote_close(heap_t *h);   /* a thread's start and exit */
void remote_take(heap_t *h);                       /* (purger, locked) h's inbox onto thread_free lists */

/* purge.c: the background thread that returns the memory of idle heaps */
void purge_arm(uint64_t when_ms);                  /* look at the heaps again by then */
void purge_want(void);                             /* multi-threaded: the thread should run */
void purge_watch(void);                            /* a new heap: the purger must look at it */
void purge_thread_exit(void);                      /* a thread with a heap exits (no lock held): the
                                                      purger goes first if it was the last one */
void purge_exit(void);                             /* (atexit) stop it before the process ends */
void purge_start_now(void);                        /* a heap was parked: start it (no lock held) */
bool purge_running(void);                          /* it runs: it keeps deadlines armed */
bool multi_threaded(void);                         /* the process has had a second thread */
bool heaps_several(void);                          /* two threads have heaps now: the purger may run */
extern _Atomic int hm_purge_wanted;                /* start it at the next safe point */
/* The safe point is the way out of malloc's slow path (no heap locked; it
 * allocates), never free: glibc frees a dead thread's TLS while holding the
 * lock pthread_create takes, so starting a thread there deadlocks. */
void purge_start(void);
static inline void purge_start_if_wanted(void) {
  if (unlikely(atomic_load_explicit(&hm_purge_wanted, memory_order_relaxed))) purge_start();
}
void purge_idle_heaps(heap_t *except);             /* malloc_trim: trim every idle heap now */
void purge_background_changed(void);               /* hakmem_option_set of HAKMEM_BACKGROUND */
void purge_fork_prepare(void), purge_fork_parent(void), purge_fork_child(bool locked);

/* secure.c: the hardened mode (HAKMEM_SECURE); all of it on slow paths */
extern bool hm_secure;
extern int hm_secure_level;
#define SECURE_ALIGN_MAX ((size_t)4096)             /* the largest alignment a class page gives */
#define SECURE_TAIL   16                           /* a block's canary tail: its size word, a guard word */
void  secure_init(void);                           /* the canaries' secret */
void  secure_page_init(page_t *pg);
size_t secure_pad(size_t block_size);              /* bytes before a class page's first block */
size_t secure_class(size_t n);                     /* the class of a request with its canaries */
void *secure_arm(void *p, size_t n);               /* a new block's canaries for n bytes */
void *secure_zero_alloc(heap_t *h);                /* (h locked) malloc(0) */
size_t secure_usable(page_t *pg, const void *p);   /* the requested size, canaries checked */
void  secure_carve(page_t *pg, uint8_t *first, size_t n);
void *secure_pop(page_t *pg);
void *secure_free(page_t *pg, void *p, size_t size); /* the block to release now, or NULL */
void  secure_flush(heap_t *h);                     /* by h's owner */
void  secure_flush_held(heap_t *h);                /* by another thread, holding h's lock */
bool  secure_is_free(page_t *pg, const void *p);
size_t secure_guard(void);                         /* OS_PAGE in secure mode, else 0 */
void  secure_guard_set(void *p, size_t size);
void  secure_page_guard(segment_t *s, size_t first, size_t n);

/* alloc.c: the API behind both the hakmem_* and the standard names */
/* to_cache: a 4-256 KiB block may wait in the thread cache (not realloc's old block) */
void hm_free_slow(void *p, bool to_cache);
void hm_free_slow_sized(void *p, size_t size, bool to_cache);   /* size: a sized free's, else 0 */
void hm_free_sized_slow(void *p, size_t size);   /* (alloc.c) a sized free the fast path doubts */
void hm_free_release(segment_t *s, page_t *pg, void *p, bool to_cache);   /* free a checked block */
void  *hm_malloc(size_t n);
void   hm_free(void *p);
void  *hm_calloc(size_t n, size_t size);
void  *hm_realloc(void *p, size_t n);
void  *hm_reallocarray(void *p, size_t n, size_t size);
int    hm_posix_memalign(void **out, size_t align, size_t n);
void  *hm_aligned_alloc(size_t align, size_t n);
void  *hm_memalign(size_t align, size_t n);
void  *hm_valloc(size_t n);
void  *hm_pvalloc(size_t n);
size_t hm_malloc_usable_size(const void *p);
void   hm_free_sized(void *p, size_t size);
void   hm_free_aligned_sized(void *p, size_t align, size_t size);
int    hm_malloc_trim(size_t pad);
void   hm_collect(int force);
int    hm_option_get(const char *name, long *value);   /* (options.c) */
int    hm_option_set(const char *name, long value);

/* errors (report.c) */
__attribute__((noreturn, cold)) void hm_fatal(const char *what, const void *p, const page_t *pg);
void hm_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void hm_print(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
