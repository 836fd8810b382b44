/* tcache.c — thread caches: each heap keeps the blocks of classes from 4 KiB
 * up that its thread frees, a few per class, last freed first, for its next
 * mallocs of the class.
 *
 * Why: a page of these classes holds few blocks (8 of 32 KiB).  Without the
 * cache a freed block goes back to its own page while malloc allocates from
 * the class's first page, so a program that frees and allocates such blocks
 * at random changes pages every few mallocs (a slow path each time) and gets
 * blocks that have gone cold, scattered over more pages.  With it, malloc
 * hands back the block freed last, whatever its page (docs/performance.md).
 *
 * A cached block still counts as used on its page; its first word is the
 * page's encoded end of list, so it looks free and a second free of it goes to
 * the slow path, which finds it here (tcache_contains).
 *
 * Emptying.  The owner empties its caches when its thread exits and in
 * malloc_trim (tcache_flush).  A thread that stops calling the allocator
 * would pin the pages of its cached blocks for good, so the purger takes its
 * caches (tcache_take), while the owner may wake at any moment and push or
 * pop without a lock.  They meet as in Dekker's algorithm with the fence on
 * one side only: the owner marks itself busy (tc_busy) for the few
 * instructions of a push or pop and then reads tc_stop, with no fence between
 * the two (hot.h); the purger sets tc_stop and calls membarrier(), which
 * runs a full fence on every thread of the process that is on a CPU.  After
 * it, either the purger sees the owner busy (and leaves the cache: the thread
 * is not quiet after all), or every push and pop the owner starts from then on
 * sees tc_stop and uses the pages instead.  The purger moves the blocks onto
 * their pages' remote lists, as any other thread's frees, and clears tc_stop.
 * Without membarrier (a kernel before 4.14, a seccomp filter) the caches are
 * off. */
#include "hot.h"
#include "options.h"

static uint32_t cap;                         /* blocks per class; 0: off */
bool hm_tcache_on;

/* The same number of blocks for every class, as many as the budget allows. */
void tcache_process_init(void) {
  size_t all = 0;
  for (size_t c = TC_MIN; c < TC_MIN + TC_CLASSES; c++) all += class_size(c);
  size_t k = (size_t)hm_options.thread_cache_kb * 1024 / all;
  cap = hm_secure || k == 0 || !os_membarrier_init() ? 0 : k < TC_ROOM ? (uint32_t)k : (uint32_t)TC_ROOM;
  hm_tcache_on = cap > 0;
}

/* In stats mode tc_stop stays set: the fast paths keep out, and the slow
 * paths, which count every call, push and pop under the heap lock. */
void tcache_init(heap_t *h) {
  h->tc_key = os_random();
  for (size_t i = 0; i < TC_CLASSES; i++) tc_set(&h->tc[i], cap);
  atomic_store_explicit(&h->tc_stop, hm_slow_mode, memory_order_relaxed);
}

/* Empty cache i, handing each block to release(). */
static void drain(heap_t *h, size_t i, void (*release)(page_t *, block_t *)) {
  uintptr_t w = tc_get(&h->tc[i]);
  tc_set(&h->tc[i], cap);
  for (block_t *b; (b = (block_t *)(w & ~TC_ROOM)) != NULL;) {
    w = b[1].next ^ h->tc_key;
    b[1].next = 0;
    release(page_of(segment_of(b), b), b);
  }
}

/* The owner frees b again, a live block now. */
static void release_local(page_t *pg, block_t *b) {
  b->next = 0;
  page_free_local_slow(pg, b);
}

void tcache_flush(heap_t *h) {
  for (size_t i = 0; i < TC_CLASSES; i++) drain(h, i, release_local);
}

static bool caches_empty(heap_t *h) {
  for (size_t i = 0; i < TC_CLASSES; i++)
    if (tc_get(&h->tc[i]) & ~TC_ROOM) return false;
  return true;
}

void tcache_take(heap_t *h) {
  if (caches_empty(h)) return;
  atomic_store_explicit(&h->tc_stop, 1, memory_order_relaxed);
  /* the owner busy: not quiet after all, its caches stay */
  if (os_membarrier() && !atomic_load_explicit(&h->tc_busy, memory_order_acquire))
    for (size_t i = 0; i < TC_CLASSES; i++) drain(h, i, page_free_remote);   /* as another thread's frees */
  atomic_store_explicit(&h->tc_stop, hm_slow_mode, memory_order_release);
}

bool tcache_contains(heap_t *h, size_t c, uintptr_t p) {
  if (!class_cached(c)) return false;
  uint32_t limit = cap;
  for (uintptr_t b = tc_get(&h->tc[c - TC_MIN]) & ~TC_ROOM; b && limit--; b = (((block_t *)b)[1].next ^ h->tc_key) & ~TC_ROOM)
    if (b == p) return true;
  return false;
}

void tcache_census(uint64_t *blocks) {
  for (heap_t *h = heap_first(); h; h = atomic_load_explicit(&h->next_all, memory_order_acquire))
    for (size_t i = 0; i < TC_CLASSES; i++) blocks[TC_MIN + i] += cap - (tc_get(&h->tc[i]) & TC_ROOM);
}
