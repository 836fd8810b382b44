/* page.c — a page: a run of slices holding blocks of one size.
 *
 * The owner thread pops and pushes blocks on page->free without atomics.  Other
 * threads push onto page->thread_free with one CAS; the owner takes that whole
 * list with one atomic exchange when the free list runs dry (page_collect).
 * A free block's first word is the page's key, a random word that marks it
 * free, so that free() spots a probable double free with one compare; its
 * second is the link to the next, encoded (link_enc, internal.h). */
#include "hot.h"
#include "stats.h"

#include <sched.h>

/* The flags a page of h holding blocks of class cls starts with: PAGE_SLOW
 * where another thread's free must take the slow path (hot.h).  Every page
 * while calls are counted (hm_page_flags); in any slow mode also a
 * first-class heap's pages (the profiler marks only a thread's own pages)
 * and a large block's (its sample is not counted by page), which lives
 * parked (PAGE_FULL). */
uint8_t page_start_flags(const heap_t *h, uint8_t cls) {
  uint8_t slow = hm_slow_mode ? PAGE_SLOW : 0;
  if (cls == CLASS_LARGE) return PAGE_FULL | slow;
  return h->user ? slow : hm_page_flags;
}

void page_init(heap_t *h, page_t *pg, size_t block_size, uint8_t cls) {
  segment_t *s = segment_of(pg);
  hm_assert(heap_held(h) && s->heap == h && cls < CLASSES && block_size == class_size(cls));
  hm_assert(pg->slices > 0 && pg->slice + pg->slices <= SLICES && s->slice_page[pg->slice] == pg);
  size_t pad = secure_pad(block_size);               /* secure mode: the first block's guard word, */
  pg->start = page_run(pg) + pad;
  pg->block_size = block_size;
  size_t span = pg->slices * SLICE_SIZE - pad - secure_guard();  /* and a guard page at the end */
  pg->reserved = (uint32_t)(span / block_size);
  hm_assert(pg->reserved > 0 && pg->reserved <= SLICE_SIZE / 16);   /* (the secure bitmap's room) */
  if (hm_secure) {
    secure_page_guard(s, pg->slice, pg->slices);
    secure_page_init(pg);
  }
  pg->capacity = 0;
  page_set_magic(pg, false);
  page_set_area(pg, 0);
  pg->free = 0;
  page_set_used(pg, 0);
  pg->cls = cls;                          /* (before the flags: page_set_local reads it) */
  page_set_push(pg, &pg->list);
  page_set_flags(pg, page_start_flags(h, cls));
  heap_page_keys(h, pg);
  atomic_store_explicit(&pg->thread_free, 0, memory_order_relaxed);
  pg->next = pg->prev = NULL;
  page_set_owner(pg, h);
}

/* Carve more blocks and link them in address order, 4 KiB at a time (one OS
 * page), so that a page is touched only as far as it is used: every class's
 * last page of every thread is partly carved, and 16 KiB at a time cost about
 * 60 KiB of RSS per thread (rss_free 4 300: 310.7 -> 310.3 MiB peak); it costs
 * no instruction per malloc that callgrind can see.  Big blocks go at least
 * four at a time (only their first two words are touched). */
#define EXTEND_SIZE (4 * 1024)
bool page_extend(page_t *pg) {
  hm_assert(pg->cls < CLASSES && pg->capacity <= pg->reserved);
  hm_assert(heap_held(atomic_load_explicit(&pg->heap, memory_order_relaxed)));
  size_t left = pg->reserved - pg->capacity;
  if (!left) return false;
  size_t n = EXTEND_SIZE / pg->block_size;
  if (n < 4) n = 4;
  if (n > left) n = left;
  uint8_t *first = pg->start + (size_t)pg->capacity * pg->block_size;
  if (unlikely(hm_secure)) {
    secure_carve(pg, first, n);
  } else {
    uint8_t *b = first;
    for (size_t i = 1; i < n; i++, b += pg->block_size) block_set_free(pg, b, (uintptr_t)(b + pg->block_size));
    block_set_free(pg, b, pg->free);
    pg->free = (uintptr_t)first;
  }
  pg->capacity += (uint32_t)n;
  page_set_area(pg, (size_t)pg->capacity * pg->block_size);
  hm_assert(pg->capacity <= pg->reserved && page_area(pg) <= (size_t)pg->slices * SLICE_SIZE);
  hm_assert(pg->free - (uintptr_t)pg->start < page_area(pg));
  return true;
}

/* Move the remote-free list onto the local free list.  When the page has no
 * free block (malloc's case) the list becomes it as it is: its length comes
 * with it, so the owner does not walk it (its blocks' lines are the pushing
 * threads', and each would be a miss); otherwise, and in hardened mode, the
 * list is walked, every link checked, and spliced in front. */
void page_collect(page_t *pg) {
  uintptr_t tf = atomic_load_explicit(&pg->thread_free, memory_order_relaxed);
  /* the owner's (locked), or an abandoned page's (abandoned_lock, abandon.c) */
  hm_assert(!atomic_load_explicit(&pg->heap, memory_order_relaxed) ||
            heap_held(atomic_load_explicit(&pg->heap, memory_order_relaxed)));
  hm_assert(pg->cls < CLASSES || pg->cls == CLASS_LARGE);
  if (!TF_PTR(tf)) return;
  while (!atomic_compare_exchange_weak_explicit(&pg->thread_free, &tf, tf & TF_MASK,
                                                memory_order_acquire, memory_order_relaxed)) {}
  uintptr_t head = TF_PTR(tf);
  uint32_t n = TF_COUNT(tf), used = page_used(pg);
  if (unlikely(n > used || n == 0))
    hm_fatal("corrupted remote free list (double free from another thread?)", (void *)head, pg);
  if (pg->free || unlikely(hm_secure)) {
    uintptr_t b = head, tail = 0;
    uint32_t walked = 0;
    while (b) {
      if (unlikely(++walked > n || b - (uintptr_t)pg->start >= page_area(pg)))
        hm_fatal("corrupted remote free list (double free from another thread?)", (void *)b, pg);
      tail = b;
      b = block_next(pg, b);
    }
    block_set_free(pg, (void *)tail, pg->free);
  }
  hm_assert(head - (uintptr_t)pg->start < page_area(pg) && (head - (uintptr_t)pg->start) % pg->block_size == 0);
  pg->free = head;
  page_set_used(pg, used - n);
  if (unlikely(hm_counting)) stat_count(STAT_REMOTE_RECEIVED, n);
}

/* A link read from a free list must lead to a block start of the page. */
static void check_link(page_t *pg, uintptr_t q) {
  if (!hm_block_start(pg, q - (uintptr_t)pg->start))
    hm_fatal("corrupted free list (a write to a freed block?)", (void *)q, pg);
}

/* Is block b on one of the page's free lists?  Only the owner may ask; this is
 * the slow confirmation of a suspected double free.  A bad link on the way is
 * reported. */
bool page_contains_free(page_t *pg, uintptr_t b) {
  hm_assert(heap_held(atomic_load_explicit(&pg->heap, memory_order_relaxed)));   /* the owner's lists */
  uint32_t limit = pg->capacity + 1;
  for (uintptr_t q = pg->free; q && limit--; q = block_next(pg, q)) {
    check_link(pg, q);
    if (q == b) return true;
  }
  limit = pg->capacity + 1;
  uintptr_t tf = TF_PTR(atomic_load_explicit(&pg->thread_free, memory_order_acquire));
  for (uintptr_t q = tf; q && limit--; q = block_next(pg, q)) {
    check_link(pg, q);
    if (q == b) return true;
  }
  return false;
}

/* Is every block of pg that was handed out now on its thread_free list (but
 * 'elsewhere' of them, known to be free)?  Then no thread holds a block of
 * the page: its owner cannot free into it and no other thread can either, so
 * the caller, holding the owner's lock, may take the page away even while the
 * owner runs its fast paths (which only allocate from the first page of each
 * class).  A page with nothing handed out is left to its owner, who is about
 * to retire it. */
bool page_unreachable(page_t *pg, uint32_t elsewhere) {
  hm_assert(heap_held(atomic_load_explicit(&pg->heap, memory_order_relaxed)));   /* (the purger) */
  uint32_t used = count_load_acquire(&pg->used);
  if (used == 0 || used < elsewhere) return false;
  uint32_t want = used - elsewhere, n = 0;
  uintptr_t tf = atomic_load_explicit(&pg->thread_free, memory_order_acquire), b = TF_PTR(tf);
  if (TF_COUNT(tf) != want) return false;    /* (the list's count: no walk over other threads' lines) */
  while (b && n <= want) {
    if (b - (uintptr_t)pg->start >= page_area(pg)) return false;    /* a bad link: leave it to the owner */
    n++;
    b = block_next(pg, b);
  }
  return n == want;
}

/* Another thread frees b.  Normally one CAS pushes it onto thread_free.  If the
 * owner parked the page as full (TF_NOTIFY), the first such free instead hands
 * the block to the owner heap's delayed list, so the owner learns the page has
 * room again; TF_BUSY keeps the owner from retiring the page or its heap while
 * we hold a pointer to them. */
void page_free_remote(page_t *pg, block_t *b) {
  uintptr_t tf = atomic_load_explicit(&pg->thread_free, memory_order_relaxed);
  hm_assert(pg->cls < CLASSES || pg->cls == CLASS_LARGE);
  hm_assert((uintptr_t)b - (uintptr_t)pg->start < page_area(pg) &&
            ((uintptr_t)b - (uintptr_t)pg->start) % pg->block_size == 0);
  block_mark_free(pg, b);                      /* free from now on, whichever list it joins */
  for (;;) {
    if ((tf & TF_MASK) == TF_NOTIFY) {
      if (!atomic_compare_exchange_weak_explicit(&pg->thread_free, &tf, (tf & ~(uintptr_t)TF_MASK) | TF_BUSY,
                                                 memory_order_acquire, memory_order_relaxed))
        continue;
      delayed_push(atomic_load_explicit(&pg->heap, memory_order_acquire), b, b);
      tf = atomic_load_explicit(&pg->thread_free, memory_order_relaxed);
      while (!atomic_compare_exchange_weak_explicit(&pg->thread_free, &tf, tf & ~(uintptr_t)TF_MASK,
                                                    memory_order_release, memory_order_relaxed)) {}
      return;
    }
    b[1].word = link_enc(pg->tf_key, b, TF_PTR(tf));
    if (atomic_compare_exchange_weak_explicit(&pg->thread_free, &tf, TF_PUSH(tf, b),
                                              memory_order_seq_cst, memory_order_relaxed))
      return;   /* (sequentially consistent: the caller asks heap_idle next) */
  }
}

/* Push the chain first..last (free blocks) onto h's delayed list.  The list
 * holds blocks of many pages: each link is encoded with the key of its own
 * block's page (delayed_next decodes it). */
void delayed_push(heap_t *h, block_t *first, block_t *last) {
  const page_t *lp = page_of(segment_of(last), last);
  hm_assert(h != NULL && h != &hm_heap_empty);   /* (TF_NOTIFY: the page's owner is set) */
  hm_assert(lp->slices && (uintptr_t)last - (uintptr_t)lp->start < page_area(lp));
  uintptr_t d = atomic_load_explicit(&h->delayed, memory_order_relaxed);
  do block_set_free(lp, last, d);
  while (!atomic_compare_exchange_weak_explicit(&h->delayed, &d, (uintptr_t)first,
                                                memory_order_seq_cst, memory_order_relaxed));
}

/* Wait until no remote thread is in the middle of handing a block of pg to
 * its owner (a few instructions at most), then set the state to st. */
void page_set_tf_state(page_t *pg, uintptr_t st) {
  hm_assert(st == TF_NORMAL || st == TF_NOTIFY);
  uintptr_t tf = atomic_load_explicit(&pg->thread_free, memory_order_acquire);
  for (;;) {
    if ((tf & TF_MASK) == TF_BUSY) {
      sched_yield();
      tf = atomic_load_explicit(&pg->thread_free, memory_order_acquire);
      continue;
    }
    if (atomic_compare_exchange_weak_explicit(&pg->thread_free, &tf, (tf & ~(uintptr_t)TF_MASK) | st,
                                              memory_order_acq_rel, memory_order_acquire))
      return;
  }
}

/* Try to mark a full page NOTIFY; fails (false) if remote frees are pending,
 * in which case the caller should collect them instead of parking. */
bool page_try_notify(page_t *pg) {
  hm_assert(pg->cls < CLASSES || pg->cls == CLASS_LARGE);
  uintptr_t expect = TF_NORMAL;
  return atomic_compare_exchange_strong_explicit(&pg->thread_free, &expect, TF_NOTIFY,
                                                 memory_order_acq_rel, memory_order_relaxed);
}

/* A queue's ends agree: empty at both, or no page before the first and none
 * after the last.  (For hm_assert: the release build only type-checks it.) */
static inline __attribute__((unused)) bool pageq_ends(const pageq_t *q) {
  return !q->first == !q->last && (!q->first || (!q->first->prev && !q->last->next));
}

void pageq_push(pageq_t *q, page_t *pg) {
  hm_assert(pageq_ends(q) && q->first != pg && q->last != pg);
  pg->next = NULL;
  pg->prev = q->last;
  if (q->last) q->last->next = pg; else q->first = pg;
  q->last = pg;
}

void pageq_push_front(pageq_t *q, page_t *pg) {
  hm_assert(pageq_ends(q) && q->first != pg && q->last != pg);
  pg->prev = NULL;
  pg->next = q->first;
  if (q->first) q->first->prev = pg; else q->last = pg;
  q->first = pg;
}

void pageq_insert_after(pageq_t *q, page_t *at, page_t *pg) {
  hm_assert(pageq_ends(q) && at && at != pg && (at->next ? at->next->prev == at : q->last == at));
  pg->prev = at;
  pg->next = at->next;
  if (at->next) at->next->prev = pg; else q->last = pg;
  at->next = pg;
}

void pageq_remove(pageq_t *q, page_t *pg) {
  /* pg is on q: its neighbours point at it, or q's ends do */
  hm_assert(pg->prev ? pg->prev->next == pg : q->first == pg);
  hm_assert(pg->next ? pg->next->prev == pg : q->last == pg);
  if (pg->prev) pg->prev->next = pg->next; else q->first = pg->next;
  if (pg->next) pg->next->prev = pg->prev; else q->last = pg->prev;
  pg->next = pg->prev = NULL;
  hm_assert(pageq_ends(q));
}

/* A link that hm_list_take's inline check did not pass (hot.h), t = next ^ b:
 * the end of the list, or a next block looked at closely.  It must be a
 * carved block start of b's class that looks free, and of b's page if l is
 * that page's list.  A thread cache's link may be cut by the purger while
 * the owner pops (tcache_take, which writes the end of the list before it
 * gives the blocks away): read again, it then reads as the end. */
static bool link_good(list_t *l, page_t *bp, uintptr_t next) {
  if (!segment_known((void *)next)) return false;
  page_t *np = page_of(segment_of((void *)next), (void *)next);
  return np->cls == bp->cls && (l == &bp->list ? np == bp : class_cached(np->cls)) &&
         hm_block_start(np, next - (uintptr_t)np->start) && block_looks_free(np, (void *)next);
}
HM_NOINLINE block_t *hm_list_take_checked(list_t *l, block_t *b, uintptr_t t) {
  if (t == (uintptr_t)b) return hm_list_took(l, b, t);     /* the end of the list */
  page_t *bp = page_of(segment_of(b), b);
  if (!link_good(l, bp, t ^ (uintptr_t)b)) {
    atomic_thread_fence(memory_order_acquire);
    if ((*(volatile uintptr_t *)&b[1].word ^ l->key) != (uintptr_t)b)
      hm_fatal("corrupted free list (a write to a freed block?)", b, bp);
    t = (uintptr_t)b;
  }
  return hm_list_took(l, b, t);
}
