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
#include <sched.h>

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
  _Atomic uint8_t rb_slot;       /* page_rb_slot, set with heap (any thread reads it) */
  _Atomic uint8_t flags;         /* PAGE_*, set with local; another thread's free tests
                                    PAGE_SLOW (hot.h) */
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
  atomic_store_explicit(&pg->flags, f, memory_order_relaxed);
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

/* Is offset off a carved block's start, for a page of this magic and limit
 * (page_set_area)?  (collect_run tests a run's blocks with them in registers.) */
static inline bool block_start_in(uintptr_t off, uint64_t magic, uint64_t limit) { return off * magic < limit; }
/* Is p, at offset off from pg's start, a carved block's start? */
static inline bool hm_block_start(const page_t *pg, uintptr_t off) {
  return block_start_in(off, pg->magic, racy_word(&pg->limit));
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

/* ---- decay.c: how long free memory stays before it goes back to the OS --- */
#define PURGE_DELAY_MAX_MS 1000
typedef struct decay_s {
  uint64_t delay_ms;             /* 0 until first used: then at least HAKMEM_PURGE_DELAY_MS */
  uint64_t base_ms;              /* HAKMEM_PURGE_DELAY_MS when delay_ms was last set */
} decay_t;
uint64_t decay_delay(decay_t *d);                  /* the delay now */
static inline uint64_t decay_due(decay_t *d, uint64_t now) { return now + decay_delay(d); }
void     decay_reused(decay_t *d, uint64_t gone_ms, uint64_t now);   /* memory gone at gone_ms wanted at now */
void     decay_purged(decay_t *d);                 /* memory went, and no reuse came after the last */
void     decay_reset(decay_t *d);                  /* back to HAKMEM_PURGE_DELAY_MS */
bool     decay_at_base(decay_t *d);

/* ---- segments and heaps: their structures and modules -------------------- */
typedef struct heap_s heap_t;
#include "segment.h"
#include "heap.h"

/* ---- the other modules' interfaces --------------------------------------- */
/* os.c: the only place that talks to the kernel about memory */
size_t os_page_size(void);
void *os_map(size_t size);                        /* zeroed, NULL on failure */
void *os_map_aligned(size_t size, size_t align);
void  os_unmap(void *p, size_t size);
void  os_purge(void *p, size_t size);             /* drop contents, keep mapping */
void  os_hugepage(void *p, size_t size, bool on); /* back with transparent huge pages, or not */
size_t os_hugepage_size(void);
bool  os_resident(void *p, size_t size, size_t *pages);   /* resident OS pages (mincore) */
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


/* page.c */
void  page_init(heap_t *h, page_t *pg, size_t block_size, uint8_t cls);
uint8_t page_start_flags(const heap_t *h, uint8_t cls);   /* a new page's PAGE_* */
bool  page_extend(page_t *pg);
void  page_collect(page_t *pg);
void  page_set_tf_state(page_t *pg, uintptr_t st);
bool  page_try_notify(page_t *pg);
void  pageq_push(pageq_t *q, page_t *pg);
void  pageq_push_front(pageq_t *q, page_t *pg);
void  pageq_insert_after(pageq_t *q, page_t *at, page_t *pg);
void  pageq_remove(pageq_t *q, page_t *pg);
void  page_free_remote(page_t *pg, block_t *b);
bool  page_contains_free(page_t *pg, uintptr_t b);
bool  page_unreachable(page_t *pg, uint32_t elsewhere);
void  delayed_push(heap_t *h, block_t *first, block_t *last);
/* A block on a delayed list: its page, and the next block. */
static inline uintptr_t delayed_next(uintptr_t b, page_t **pg) {
  *pg = page_of(segment_of((void *)b), (void *)b);
  return block_next(*pg, b);
}

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
void purge_owner_back(heap_t *h);                  /* (owner, locked) its first slow path since a trim */
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
void *secure_quarantine_take(heap_t *h);          /* (h locked) its quarantine's oldest block, or NULL */
void *secure_unquarantine(void *p);                /* a block leaving the quarantine, checked */
bool  secure_is_free(page_t *pg, const void *p);
size_t secure_guard(void);                         /* OS_PAGE in secure mode, else 0 */
void  secure_guard_set(void *p, size_t size);
void  secure_page_guard(segment_t *s, size_t first, size_t n);

/* free.c: free's slow path */
page_t *hm_lookup(const void *p, segment_t **sp, const char *op);   /* p's page, or reported ('op' of p) */
/* to_cache: a 4-256 KiB block may wait in the thread cache (not realloc's old block) */
void hm_free_slow(void *p, bool to_cache);
void hm_free_slow_sized(void *p, size_t size, bool to_cache);   /* size: a sized free's, else 0 */
void hm_free_handed(void *p);                     /* another thread's free, handed over (remote.c),
                                                   that could not go the short way */
void hm_free_sized_slow(void *p, size_t size);     /* a sized free the fast path doubts */
void hm_free_release(segment_t *s, page_t *pg, void *p, bool to_cache);   /* free a checked block */
void hm_free_quarantine(heap_t *h);                /* (secure mode) release h's quarantine: by h's owner */
void hm_free_quarantine_held(heap_t *h);           /* the same by another thread, holding h's lock */
void hm_free_quarantine_quiet(heap_t *h);          /* the same by the purger, h quiet and locked */

/* alloc.c: the API behind both the hakmem_* and the standard names */
size_t hm_block_usable(page_t *pg, const void *p, const char *op);   /* p (of pg) live: its size, else reported */
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
