/* tcache.c — thread caches: each heap keeps the blocks of classes from 4 KiB
 * up that its thread frees, a few per class, last freed first, for its next
 * mallocs of the class.
 *
 * Why: a page of these classes holds few blocks (8 of 32 KiB, 4 above).
 * Without the cache a freed block goes back to its own page while malloc
 * allocates from the class's first page, so a program that frees and
 * allocates such blocks at random changes pages every few mallocs (a slow
 * path each time), empties and remakes pages, and gets blocks that have gone
 * cold, scattered over more pages.  With it, malloc hands back the block
 * freed last, whatever its page (docs/performance.md).
 *
 * A cached block still counts as used on its page; its first word is the
 * page's key, the free mark, so it looks free and a second free of it goes to
 * the slow path, which finds it here (tcache_contains).
 *
 * Size.  HAKMEM_THREAD_CACHE_KB bounds what a heap's caches may hold.  The
 * fast paths test only the room left in the cache's word, so the caches
 * count against the bound by their caps (blocks times block size): each
 * starts at TC_START blocks (fewer where an eighth of the bound holds fewer)
 * and, when free finds it full, doubles (tcache_put), up to TC_MAX, while the
 * caps stay within the bound.  A thread that frees batches of one class gets
 * room for the batch, one that frees a few blocks of each keeps little.
 * Emptying a cache (below) takes it back to its first size.  All classes from
 * 4 KiB to 256 KiB work alike, so that malloc and free take the same steps
 * for all of them (two kinds of cache, split at 32 KiB, cost a program
 * mixing 16-64 KiB blocks at random 30 % of its speed in mispredicted
 * branches: docs/performance.md).
 *
 * Decay.  A cache that malloc has not popped for a second gives its blocks
 * back to their pages (tcache_decay, on the heap's tick): a thread that moved
 * on to other sizes does not keep them.  A program may run on its caches
 * with no slow path at all, so every 256th push runs the tick too
 * (tcache_tick).
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

#include <string.h>

#define TC_START 8
#define TC_MAX   64
#define TC_DECAY_MS 1000
_Static_assert(TC_MAX <= TC_ROOM, "the cache word's low bits count the room");
static uint16_t start_cap[TC_CLASSES];       /* blocks per cache at first; 0: none */
bool hm_tcache_on;

static uint32_t class_kb(size_t i) { return (uint32_t)((class_size(TC_MIN + i) + 1023) >> 10); }
static size_t bound_kb(void) { return (size_t)hm_options.thread_cache_kb; }

void tcache_process_init(bool fence) {
  size_t first_kb = bound_kb() / 8;          /* per cache, at first */
  for (size_t i = 0; i < TC_CLASSES; i++) {
    size_t k = first_kb / class_kb(i);
    start_cap[i] = (uint16_t)(!fence ? 0 : k < TC_START ? k : TC_START);
  }
  hm_tcache_on = start_cap[0] > 0;           /* (the smallest class gets the most) */
}

static uint32_t cap_of(heap_t *h, size_t i) { return atomic_load_explicit(&h->tc_cap[i], memory_order_relaxed); }
static void set_cap(heap_t *h, size_t i, uint32_t n) {
  h->tc_kb = h->tc_kb + n * class_kb(i) - cap_of(h, i) * class_kb(i);
  atomic_store_explicit(&h->tc_cap[i], (uint16_t)n, memory_order_relaxed);
}

/* Every 256th push (hm_tcache_push): the heap's tick. */
void tcache_tick(heap_t *h) {
  heap_enter(h);
  heap_tick(h);
  heap_leave(h);
}

/* Push b; if its cache is full, double the cache first if the bound allows. */
bool tcache_put(heap_t *h, page_t *pg, block_t *b) {
  size_t i = (size_t)pg->cls - TC_MIN;
  _Atomic uintptr_t *t = &h->tc[i];
  if (tc_push(h, t, pg, b)) return true;
  uint32_t c = cap_of(h, i), add = c < TC_MAX - c ? c : TC_MAX - c;
  size_t left = bound_kb() > h->tc_kb ? bound_kb() - h->tc_kb : 0;
  if (add * class_kb(i) > left) add = (uint32_t)(left / class_kb(i));
  if (add == 0) return false;
  set_cap(h, i, c + add);
  /* Each cached block holds the cache's word as it was before the block came,
   * room included, for pop to restore: those get the added room too. */
  for (block_t *x = (block_t *)(tc_get(t) & ~TC_ROOM); x;) {
    uintptr_t below = (x[1].word ^ h->tc_key) + add;
    x[1].word = below ^ h->tc_key;
    x = (block_t *)(below & ~TC_ROOM);
  }
  tc_set(t, tc_get(t) + add);
  return tc_push(h, t, pg, b);
}

void tcache_full(heap_t *h, page_t *pg, block_t *b) {
  bool done = tc_enter(h) && tcache_put(h, pg, b);
  tc_leave(h);
  if (!done) hm_page_push(h, pg, b);
}

/* Cache i empty, at its first size. */
static void reset(heap_t *h, size_t i) {
  set_cap(h, i, start_cap[i]);
  tc_set(&h->tc[i], cap_of(h, i));
}

/* h comes zeroed (heap_get).  In stats mode tc_stop stays set: the fast paths
 * keep out, and the slow paths, which count every call, push and pop under
 * the heap lock. */
void tcache_init(heap_t *h) {
  h->tc_key = os_random();
  for (size_t i = 0; i < TC_CLASSES; i++) reset(h, i);
  atomic_store_explicit(&h->tc_stop, hm_slow_mode, memory_order_relaxed);
}

/* Empty cache i, handing each block to release(), and shrink it back. */
static void drain(heap_t *h, size_t i, void (*release)(page_t *, block_t *)) {
  uintptr_t w = tc_get(&h->tc[i]);
  reset(h, i);
  for (block_t *b; (b = (block_t *)(w & ~TC_ROOM)) != NULL;) {
    w = b[1].word ^ h->tc_key;
    b[1].word = 0;
    release(page_of(segment_of(b), b), b);
  }
}

/* The owner frees b again, a live block now. */
static void release_local(page_t *pg, block_t *b) {
  b->word = 0;
  page_free_local_slow(pg, b);
}

/* Do blocks wait in any of h's caches? */
static bool any_held(heap_t *h) {
  for (size_t i = 0; i < TC_CLASSES; i++)
    if (tc_get(&h->tc[i]) & ~TC_ROOM) return true;
  return false;
}

/* Are blocks waiting in the caches?  (If not, the decay restarts.) */
bool tcache_held(heap_t *h) {
  bool held = any_held(h);
  if (!held) h->tc_decay_ms = 0;
  return held;
}

/* A cache not popped from for a whole TC_DECAY_MS gives its blocks back to
 * their pages, whose memory the segments' decay then returns to the OS. */
void tcache_decay(heap_t *h, uint64_t now) {
  if (h->tc_decay_ms && now < h->tc_decay_ms) return;
  if (h->tc_decay_ms)
    for (size_t i = 0; i < TC_CLASSES; i++)
      if (!h->tc_popped[TC_MIN + i]) drain(h, i, release_local);
  memset(h->tc_popped, 0, sizeof h->tc_popped);
  h->tc_decay_ms = now + TC_DECAY_MS;
}

void tcache_flush(heap_t *h) {
  for (size_t i = 0; i < TC_CLASSES; i++) drain(h, i, release_local);
}

/* The owner's buffers of other heaps' blocks (remote.c) are taken the same way. */
void tcache_take(heap_t *h) {
  rbuf_t *out[RB_SLOTS] = { NULL };
  if (!any_held(h) && !remote_held(h)) return;
  atomic_store_explicit(&h->tc_stop, 1, memory_order_relaxed);
  /* the owner busy: not quiet after all, its caches stay */
  if (os_membarrier() && !atomic_load_explicit(&h->tc_busy, memory_order_acquire)) {
    for (size_t i = 0; i < TC_CLASSES; i++) drain(h, i, page_free_remote);   /* as another thread's frees */
    for (size_t i = 0; i < RB_SLOTS; i++) out[i] = atomic_exchange_explicit(&h->out[i], NULL, memory_order_relaxed);
  }
  atomic_store_explicit(&h->tc_stop, hm_slow_mode, memory_order_release);
  for (size_t i = 0; i < RB_SLOTS; i++)
    if (out[i]) remote_send(out[i]);
}

bool tcache_contains(heap_t *h, size_t c, uintptr_t p) {
  if (!class_cached(c)) return false;
  uint32_t limit = cap_of(h, c - TC_MIN);
  for (uintptr_t b = tc_get(&h->tc[c - TC_MIN]) & ~TC_ROOM; b && limit--; b = (((block_t *)b)[1].word ^ h->tc_key) & ~TC_ROOM)
    if (b == p) return true;
  return false;
}

void tcache_census(uint64_t *blocks) {
  for (heap_t *h = heap_first(); h; h = atomic_load_explicit(&h->next_all, memory_order_acquire))
    for (size_t i = 0; i < TC_CLASSES; i++) {
      uint32_t c = cap_of(h, i), room = (uint32_t)(tc_get(&h->tc[i]) & TC_ROOM);
      blocks[TC_MIN + i] += c > room ? c - room : 0;   /* (read apart: may be torn) */
    }
}
