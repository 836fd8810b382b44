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
 * freed last, whatever its page.
 *
 * Shape.  A cache (tcl_t) is laid out as a page's pop line: its head where a
 * page has its free list, its key, and where a page counts its blocks in use
 * the room left.  malloc pops it and free pushes it with the very code they
 * use for a page (hot.h: malloc's direct[] entry and free's slice_push entry
 * name it), so a program mixing small and big sizes takes no branch on the
 * kind, which a random mix mispredicts.  A cached block still counts as used on its page;
 * its first word is the page's key, the free mark, so it looks free and a
 * second free of it goes to the slow path, which finds it here
 * (tcache_contains).
 *
 * Size.  HAKMEM_THREAD_CACHE_KB bounds what a heap's caches may hold, by
 * their caps (blocks times block size): each starts at TC_START blocks (fewer
 * where an eighth of the bound holds fewer) and, when a push fills it (room
 * 0: tcache_full), doubles, up to TC_MAX, while the caps stay within the
 * bound; a cache that cannot grow gives its older half back to the pages.
 * An empty cache refills from its class's page in a small batch
 * (tcache_refill).  Emptying a cache takes it back to its first size.
 *
 * Decay.  A cache left alone for a second (its room unchanged, no slow-path
 * event of its class) gives its blocks back to their pages (tcache_decay, on
 * the heap's tick).  One in balanced use looks the same and goes too; its
 * next malloc refills it.
 *
 * Emptying.  The owner empties its caches when its thread exits and in
 * malloc_trim (tcache_flush).  A thread that stops calling the allocator
 * would pin the pages of its cached blocks for good, so the purger takes its
 * caches (tcache_take), while the owner may wake at any moment and push or
 * pop without a lock.  The purger, holding the heap's lock, points malloc's
 * direct[] entries of the cached classes at an empty page and free's
 * slice_push entries at the heap's sink, a list whose first push calls out,
 * and calls membarrier(), which runs a full fence on every thread of the
 * process that is on a CPU: from then on the owner's mallocs and frees of
 * those classes take the slow path, which waits for the lock.  (Not their
 * pages' lists: the purger gives back a quiet heap's pages, a queue's first
 * among them, which the owner's fast paths must not be touching; realloc's
 * free of a cached class's block takes the lock for the same reason.)  One
 * pop or push begun before may still
 * be under way, for as long as its thread is stopped (a signal handler that
 * waits, say): that pop takes the cache's first block, that push links a
 * block before it, and neither touches another block.  So the purger cuts
 * each list after its first block and moves the rest onto their pages'
 * remote lists, as another thread's frees, and the caches stay parked, out
 * of the fast paths' reach, until the owner's next slow path (heap_enter),
 * which tells from the head and the room what that pop or push did
 * (tcache_resume) and points the entries at the caches again.  A thread that
 * never calls again keeps one block of each class.  Without membarrier (a
 * kernel before 4.14, a seccomp filter) the caches are off. */
#include "hot.h"
#include "options.h"

#include <string.h>

#define TC_START 8
#define TC_DECAY_MS 1000
static uint16_t start_cap[TC_CLASSES];       /* blocks per cache at first; 0: none */
bool hm_tcache_on;
/* Class c's cache is what malloc pops and free pushes, or when profiling
 * what the profiler pops (profile_malloc); not when every call is counted
 * (stats, secure), whose fast paths keep out: its slow paths use the
 * caches, locked. */
bool hm_tc_fast[CLASSES];

static uint32_t class_kb(size_t i) { return (uint32_t)((class_size(TC_MIN + i) + 1023) >> 10); }
static size_t bound_kb(void) { return (size_t)hm_options.thread_cache_kb; }

void tcache_process_init(bool fence) {
  size_t first_kb = bound_kb() / 8;          /* per cache, at first */
  for (size_t i = 0; i < TC_CLASSES; i++) {
    size_t k = first_kb / class_kb(i);
    start_cap[i] = (uint16_t)(!fence ? 0 : k < TC_START ? k : TC_START);
  }
  hm_tcache_on = start_cap[0] > 0;           /* (the smallest class gets the most) */
  for (size_t i = 0; i < TC_CLASSES; i++) hm_tc_fast[TC_MIN + i] = hm_tcache_on && !hm_counting && start_cap[i] > 0;
}

static uint32_t cap_of(heap_t *h, size_t i) { return atomic_load_explicit(&h->tc_cap[i], memory_order_relaxed); }
static void set_cap(heap_t *h, size_t i, uint32_t n) {
  hm_assert(i < TC_CLASSES && n <= TC_MAX && h->tc_kb >= cap_of(h, i) * class_kb(i));
  h->tc_kb = h->tc_kb + n * class_kb(i) - cap_of(h, i) * class_kb(i);
  atomic_store_explicit(&h->tc_cap[i], (uint16_t)n, memory_order_relaxed);
}

static tcl_t *tcl_of(heap_t *h, size_t i) { return &h->tc[i]; }
static _Atomic uintptr_t *head_of(tcl_t *t) { return (_Atomic uintptr_t *)&t->l.free; }
static block_t *head(tcl_t *t) { return (block_t *)atomic_load_explicit(head_of(t), memory_order_relaxed); }
static void set_head(tcl_t *t, block_t *b) { atomic_store_explicit(head_of(t), (uintptr_t)b, memory_order_release); }
static uint32_t room(tcl_t *t) { return list_count(&t->l); }
static void set_room(tcl_t *t, uint32_t n) { count_store(&t->l.used, n); }

/* (owner, locked) Push b, a block of pg not looking free, on cache i, which
 * must have room. */
static void push(heap_t *h, size_t i, page_t *pg, block_t *b) {
  hm_assert(heap_held(h) && room(tcl_of(h, i)) > 0 && pg->cls == TC_MIN + i);
  hm_assert(atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
  hm_list_push(&tcl_of(h, i)->l, pg, b);
}

/* The sink empty, its first push to call out.  (It is empty whenever the
 * caches are parked: each push on it calls out, and the call drains it.) */
static void sink_reset(heap_t *h) {
  list_set_head(&h->tc_sink, 0);
  count_store(&h->tc_sink.used, 1);
}

/* Hand each block of the chain from b (linked as the caches link them) to
 * release(); how many. */
static uint32_t release_chain(heap_t *h, block_t *b, void (*release)(page_t *, block_t *)) {
  uint32_t n = 0;
  for (; b; n++) {
    hm_assert(n < TC_MAX && segment_known(b));              /* a cache's blocks, at most its cap */
    block_t *next = (block_t *)link_dec(h->tc_key, b, b[1].word);
    b[1].word = 0;
    release(page_of(segment_of(b), b), b);
    b = next;
  }
  return n;
}

/* (owner, locked) Cache i doubled if it is full and the bound allows: true
 * if it has room. */
static bool make_room(heap_t *h, size_t i) {
  tcl_t *t = tcl_of(h, i);
  hm_assert(heap_held(h) && room(t) <= cap_of(h, i));
  if (room(t)) return true;
  uint32_t c = cap_of(h, i), add = c < TC_MAX - c ? c : TC_MAX - c;
  size_t left = bound_kb() > h->tc_kb ? bound_kb() - h->tc_kb : 0;
  if (add * class_kb(i) > left) add = (uint32_t)(left / class_kb(i));
  if (add == 0) return false;
  set_cap(h, i, c + add);
  set_room(t, room(t) + add);
  hm_assert(cap_of(h, i) <= TC_MAX && room(t) == add);
  return true;
}

/* The owner frees b again, a live block now. */
static void release_local(page_t *pg, block_t *b) {
  hm_assert(class_cached(pg->cls) && heap_held(atomic_load_explicit(&pg->heap, memory_order_relaxed)));
  b->word = 0;
  heap_free_slow(pg, b);
}

/* (stats mode, locked) What free's fast path would do. */
bool tcache_put(heap_t *h, page_t *pg, block_t *b) {
  size_t i = (size_t)pg->cls - TC_MIN;
  hm_assert(heap_held(h) && class_cached(pg->cls));
  if (!room(tcl_of(h, i)) && !make_room(h, i)) return false;
  push(h, i, pg, b);
  return true;
}
void *tcache_pop(heap_t *h, size_t c) {
  list_t *l = &tcl_of(h, c - TC_MIN)->l;
  hm_assert(heap_held(h) && class_cached(c) && !h->tc_parked);
  if (!list_head(l)) return NULL;
  h->tc_popped[c] = 1;
  return hm_list_pop(l);
}

/* (owner, locked) The blocks the owner's frees pushed on the sink while the
 * caches were parked (one: its push called out; more only if a signal
 * handler freed in between) into their caches. */
static void sink_drain(heap_t *h) {
  block_t *b = (block_t *)list_head(&h->tc_sink);
  hm_assert(heap_held(h) && !h->tc_parked);
  sink_reset(h);
  while (b) {
    block_t *next = (block_t *)link_dec(h->tc_key, b, b[1].word);
    page_t *pg = page_of(segment_of(b), b);
    size_t i = (size_t)pg->cls - TC_MIN;
    hm_assert(class_cached(pg->cls) && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
    if (room(tcl_of(h, i))) push(h, i, pg, b);
    else release_local(pg, b);
    b = next;
  }
}

/* Free's push filled the cache of pg's class (room 0; hot.h): a doubled cap,
 * or else the older half of the blocks go back to their pages (one call per
 * half a cache of frees, not per free).  Or it was a push on the sink: the
 * caches resumed (heap_enter), the block goes into its cache.  (A push begun
 * before the purger parked the caches may land here too.) */
void tcache_full(heap_t *h, page_t *pg) {
  size_t i = (size_t)pg->cls - TC_MIN;
  heap_enter(h);
  hm_assert(class_cached(pg->cls));
  if (list_head(&h->tc_sink)) sink_drain(h);
  h->tc_popped[pg->cls] = 1;                         /* in use (tcache_decay) */
  if (--h->ticks == 0) heap_tick(h);                 /* a slow-path event */
  if (!make_room(h, i)) {
    tcl_t *t = tcl_of(h, i);
    uint32_t keep = cap_of(h, i) / 2;
    block_t *b = head(t);
    for (uint32_t k = 1; k < keep && b; k++) b = (block_t *)link_dec(t->l.key, b, b[1].word);
    block_t *rest = keep && b ? (block_t *)link_dec(t->l.key, b, b[1].word) : b;
    if (keep && b) b[1].word = link_enc(t->l.key, b, 0);   /* the end of the list */
    else set_head(t, NULL);
    set_room(t, room(t) + release_chain(h, rest, release_local));
    hm_assert(room(t) > 0 && room(t) <= cap_of(h, i));
  }
  heap_leave(h);
}

/* (owner, locked) Class pg->cls's cache is empty: a block of pg for malloc,
 * and more from pg's free list into the cache, so that the next mallocs of
 * the class do not come here (tcmalloc's batch): up to half the cache's room
 * and REFILL_KB (16 blocks of 4 KiB, none of 64 KiB and up: a bigger batch
 * held realloc's buffers, growing through these classes, 3.4 MiB higher). */
#define REFILL_KB 64
void *tcache_refill(heap_t *h, page_t *pg) {
  size_t i = (size_t)pg->cls - TC_MIN;
  hm_assert(heap_held(h) && tcache_fast(pg->cls) && !h->tc_parked);
  hm_assert(pg->free && !head(tcl_of(h, i)));                   /* an empty cache, a page to pop */
  h->tc_popped[pg->cls] = 1;
  block_t *b = hm_page_pop(pg);
  make_room(h, i);
  uint32_t n = room(tcl_of(h, i)) / 2, most = REFILL_KB / class_kb(i);
  for (n = n < most ? n : most; n && pg->free; n--) push(h, i, pg, hm_page_pop(pg));
  hm_assert(room(tcl_of(h, i)) <= cap_of(h, i) && page_used(pg) <= pg->capacity);
  return b;
}

/* Cache i empty, at its first size. */
static void reset(heap_t *h, size_t i) {
  tcl_t *t = tcl_of(h, i);
  set_cap(h, i, start_cap[i]);
  set_head(t, NULL);
  set_room(t, cap_of(h, i));
  atomic_store_explicit(&t->taken, 0, memory_order_relaxed);
}

/* h comes zeroed (heap_get). */
void tcache_init(heap_t *h) {
  hm_assert(heap_held(h));
  h->tc_key = os_random();
  for (size_t i = 0; i < TC_CLASSES; i++) {
    reset(h, i);
    h->tc[i].l.key = h->tc_key;
    /* blocks of many pages, which start at a slice: the region of
     * segments, and the alignment those starts leave the class's blocks */
    size_t d = class_size(TC_MIN + i), align = d & -d;
    h->tc[i].l.check = list_check_bits(SEG_REGION, align < SLICE_SIZE ? align : SLICE_SIZE);
  }
  h->tc_sink.key = h->tc_key;
  h->tc_sink.check = ~(uintptr_t)0;
  sink_reset(h);
  atomic_store_explicit(&h->tc_stop, hm_counting, memory_order_relaxed);
}

/* Cache i empty at its first size: what reset() leaves (as most are when a
 * thread exits). */
static bool at_rest(heap_t *h, size_t i) {
  tcl_t *t = tcl_of(h, i);
  if (head(t) || cap_of(h, i) != start_cap[i]) return false;
  hm_assert(!h->tc_parked && room(t) == cap_of(h, i) && !atomic_load_explicit(&t->taken, memory_order_relaxed));
  return true;
}

/* Empty cache i, handing each block to release(), and shrink it back.  The
 * last block goes first, so that the pages' lists keep the last freed on
 * top, as the cache had them (the next malloc takes the first back). */
static void drain(heap_t *h, size_t i, void (*release)(page_t *, block_t *)) {
  block_t *b = head(tcl_of(h, i)), *r = NULL;
  hm_assert(heap_held(h) && !h->tc_parked);
  reset(h, i);
  while (b) {                                        /* reversed, re-encoded */
    block_t *next = (block_t *)link_dec(h->tc_key, b, b[1].word);
    b[1].word = link_enc(h->tc_key, b, (uintptr_t)r);
    r = b;
    b = next;
  }
  release_chain(h, r, release);
}

/* Do blocks wait in any of h's caches? */
static bool any_held(heap_t *h) {
  for (size_t i = 0; i < TC_CLASSES; i++)
    if (head(tcl_of(h, i))) return true;
  return false;
}

/* Are blocks waiting in the caches?  (If not, the decay restarts.) */
bool tcache_held(heap_t *h) {
  hm_assert(heap_held(h));
  bool held = any_held(h);
  if (!held) h->tc_decay_ms = 0;
  return held;
}

/* A cache not used for a whole TC_DECAY_MS (its room unchanged, no pop by
 * the slow paths) gives its blocks back to their pages, whose memory the
 * segments' decay then returns to the OS. */
void tcache_decay(heap_t *h, uint64_t now) {
  hm_assert(heap_held(h) && !h->tc_parked);
  if (h->tc_decay_ms && now < h->tc_decay_ms) return;
  for (size_t i = 0; i < TC_CLASSES; i++) {
    tcl_t *t = tcl_of(h, i);
    if (h->tc_decay_ms && !h->tc_popped[TC_MIN + i] && room(t) == t->room_seen) drain(h, i, release_local);
    t->room_seen = room(t);
  }
  memset(h->tc_popped, 0, sizeof h->tc_popped);
  h->tc_decay_ms = now + TC_DECAY_MS;
}

void tcache_flush(heap_t *h) {
  if (h->tc_parked) tcache_resume(h);             /* (the thread's exit: not via heap_enter) */
  for (size_t i = 0; i < TC_CLASSES; i++)
    if (!at_rest(h, i)) drain(h, i, release_local);
  hm_assert(!any_held(h) && !h->tc_parked);
}

/* The successor of b1, the first block of a cache the owner may be popping
 * (tcache_take): read apart from the owner, whose pop may hand b1 to the
 * program as this reads; the caller checks that the cache did not change
 * meanwhile, so that what it read was still the link. */
__attribute__((no_sanitize("thread"))) static uintptr_t first_link(const block_t *b1) {
  uintptr_t v = *(const volatile uintptr_t *)&b1[1].word;
  atomic_thread_fence(memory_order_acquire);
  return v;
}
/* b1's link made the end of the list, while that pop may read it (it then
 * sets the head to NULL instead of b1's old successor: tcache_resume tells
 * both apart from the room). */
__attribute__((no_sanitize("thread"))) static void cut_link(block_t *b1, uintptr_t end) {
  *(volatile uintptr_t *)&b1[1].word = end;
}

/* (purger, locked) Cache i of h, which malloc and free no longer reach but
 * for one pop or push that may have begun before (tcache_take): the blocks
 * beyond its first go, as another thread's frees.  The first block and the
 * room, read as of one moment (the owner writes the head before the room,
 * and the room with release), tell tcache_resume what that pop or push did.
 * One that has written the head but not yet the room is read as ended: the
 * head it wrote is then the cut block, which tcache_resume finds in place. */
static void cut_after_first(heap_t *h, size_t i) {
  tcl_t *t = tcl_of(h, i);
  hm_assert(heap_held(h));
  uint32_t r;
  uintptr_t w, next;
  do {
    r = count_load_acquire(&t->l.used);
    w = atomic_load_explicit(head_of(t), memory_order_acquire);
    next = w ? link_dec(t->l.key, (const void *)w, first_link((const block_t *)w)) : 0;
  } while (atomic_load_explicit(head_of(t), memory_order_acquire) != w ||
           count_load_acquire(&t->l.used) != r);
  t->cut = (block_t *)w;
  t->cut_room = r;
  if (!next) return;
  cut_link((block_t *)w, link_enc(t->l.key, (const void *)w, 0));   /* the end of the list */
  uint32_t n = release_chain(h, (block_t *)next, page_free_remote);
  atomic_store_explicit(&t->taken, atomic_load_explicit(&t->taken, memory_order_relaxed) + n, memory_order_relaxed);
}

/* The purger takes a quiet heap's caches, and its buffers of other heaps'
 * blocks (remote.c).  The caches stay parked until the owner resumes them. */
void tcache_take(heap_t *h) {
  rbuf_t *out[RB_SLOTS];
  hm_assert(heap_held(h));
  for (size_t i = 0; i < RB_SLOTS; i++) out[i] = RB_NONE;
  bool caches = !h->tc_parked && any_held(h);
  if (!caches && !remote_held(h)) return;
  if (caches) heap_route_caches(h, false);          /* malloc and free keep out of them */
  atomic_store_explicit(&h->tc_stop, 1, memory_order_relaxed);     /* and of the buffers */
  if (os_membarrier()) {
    if (caches) {
      for (size_t i = 0; i < TC_CLASSES; i++) cut_after_first(h, i);
      h->tc_parked = true;
    }
    /* the owner busy: not quiet after all, its buffers stay */
    if (!atomic_load_explicit(&h->tc_busy, memory_order_acquire))
      for (size_t i = 0; i < RB_SLOTS; i++) out[i] = atomic_exchange_explicit(&h->out[i], RB_NONE, memory_order_relaxed);
  } else if (caches) {
    heap_route_caches(h, true);
  }
  atomic_store_explicit(&h->tc_stop, hm_counting, memory_order_release);
  for (size_t i = 0; i < RB_SLOTS; i++)
    if (out[i] != RB_NONE) remote_send(out[i]);
}

/* (owner, locked) The caches after the purger's cut, then malloc and free
 * use them again.  The owner runs no pop or push now, so what the one under
 * way at the cut did is done, and head and room tell what it was: the head
 * still the cut block, nothing (or it ended as the cut was read); the room one
 * less, a push, whose block is linked before the cut one; else a pop, which
 * took the cut block and left a head that is no longer the cache's. */
void tcache_resume(heap_t *h) {
  hm_assert(heap_held(h) && h->tc_parked);
  for (size_t i = 0; i < TC_CLASSES; i++) {
    tcl_t *t = tcl_of(h, i);
    block_t *cut = t->cut;
    uint32_t n;
    if (head(t) == cut) {
      n = cut != NULL;
    } else if (room(t) + 1 == t->cut_room) {
      n = 1 + (cut != NULL);
    } else {
      set_head(t, NULL);
      n = 0;
    }
    hm_assert(n <= cap_of(h, i) && (!n || head(t)));
    set_room(t, cap_of(h, i) - n);
    atomic_store_explicit(&t->taken, 0, memory_order_relaxed);
    t->cut = NULL;
  }
  h->tc_parked = false;
  heap_route_caches(h, true);
}

bool tcache_contains(heap_t *h, size_t c, uintptr_t p) {
  hm_assert(heap_held(h));
  if (!class_cached(c)) return false;
  uint32_t limit = cap_of(h, c - TC_MIN);
  for (block_t *b = head(tcl_of(h, c - TC_MIN)); b && limit--; b = (block_t *)link_dec(h->tc_key, b, b[1].word))
    if ((uintptr_t)b == p) return true;
  return false;
}

void tcache_census(uint64_t *blocks) {
  for (heap_t *h = heap_first(); h; h = atomic_load_explicit(&h->next_all, memory_order_acquire))
    for (size_t i = 0; i < TC_CLASSES; i++) {
      uint32_t c = cap_of(h, i), r = room(tcl_of(h, i)) + atomic_load_explicit(&tcl_of(h, i)->taken, memory_order_relaxed);
      blocks[TC_MIN + i] += c > r ? c - r : 0;   /* (read apart: may be torn) */
    }
}
