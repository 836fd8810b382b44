/* userheap.c — first-class heaps (hakmem_heap_*): a heap a program makes,
 * allocates from in the thread that made it, and ends either by deleting it
 * (its live blocks go on in that thread's own heap) or by destroying it
 * (every block freed at once, in time proportional to its pages).
 *
 * A first-class heap is a heap_t like a thread's, made by heap_made and seen
 * by the purger, but no thread's own: its maker's thread allocates from it
 * through the same lists malloc pops.  Its pages have no local owner
 * (page_set_local), so every free of its blocks, from any thread, goes onto
 * the page's thread_free list at once (remote_free sends none into a buffer,
 * nor secure mode into a quarantine, where a block could outlive its heap's
 * destruction); the heap collects them as it allocates.  Its huge blocks,
 * which no segment of its holds, are listed (h->huge, huge.c) for destroy to
 * find. */
#include "hot.h"
#include "profile.h"

#include <errno.h>
#include <string.h>

/* h's maker, the only thread that may allocate from it or end it (an ended
 * heap has none, and a thread's own heap is never NULL). */
#define MISUSE ": not a heap this thread made (or one it ended)"
HM_INLINE void check_maker(heap_t *h, const char *what) {
  if (unlikely(h->maker != hm_tls_heap)) hm_fatal(what, h, NULL);
}

heap_t *hm_heap_new(void) {
  heap_t *self = heap_get();
  heap_t *h = self ? heap_made() : NULL;
  if (!h) { errno = ENOMEM; return NULL; }
  atomic_store_explicit(&h->user, true, memory_order_relaxed);
  h->maker = self;
  h->users = self->users;
  self->users = h;
  return h;
}

/* ---- allocation ---------------------------------------------------------------- */

HM_INLINE void *heap_malloc(heap_t *h, size_t n) {
  size_t c;
  void *p = hm_malloc_try(h, n, &c);
  return likely(p != NULL) ? p : heap_malloc_slow(h, n, c);
}

void *hm_heap_malloc(heap_t *h, size_t n) {
  check_maker(h, "hakmem_heap_malloc" MISUSE);
  return heap_malloc(h, n);
}

void *hm_heap_calloc(heap_t *h, size_t n, size_t size) {
  check_maker(h, "hakmem_heap_calloc" MISUSE);
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) { errno = ENOMEM; return NULL; }
  void *p = heap_malloc(h, total);
  if (p) memset(p, 0, total);
  return p;
}

void *hm_heap_aligned_alloc(heap_t *h, size_t align, size_t n) {
  check_maker(h, "hakmem_heap_aligned_alloc" MISUSE);
  if (!align || (align & (align - 1))) { errno = EINVAL; return NULL; }
  if (align <= 16) return heap_malloc(h, n);
  if (n > ALLOC_MAX) { errno = ENOMEM; return NULL; }
  return heap_malloc_aligned(h, n, align);
}

/* p stays where it is if it fits (and is h's); else a block of h takes its
 * bytes and p is freed, wherever it came from. */
void *hm_heap_realloc(heap_t *h, void *p, size_t n) {
  check_maker(h, "hakmem_heap_realloc" MISUSE);
  if (!p) return heap_malloc(h, n);
  if (n == 0) { hm_free(p); return NULL; }           /* as realloc */
  segment_t *s;                                     /* (a pointer not ours, or freed, is reported) */
  page_t *pg = hm_lookup(p, &s, "hakmem_heap_realloc");
  size_t usable = hm_block_usable(pg, p, "hakmem_heap_realloc");
  bool ours = atomic_load_explicit(&pg->heap, memory_order_relaxed) == h || (pg->cls == CLASS_HUGE && s->heap == h);
  if (ours && n <= usable && n >= usable / 2 && !hm_secure) return p;   /* (secure: moved, its canaries too) */
  void *q = heap_malloc(h, n);
  if (!q) return NULL;
  memcpy(q, p, n < usable ? n : usable);
  hm_free(p);
  return q;
}

/* ---- the end of a heap --------------------------------------------------------- */

static void unlist(heap_t *h) {
  heap_t **p = &h->maker->users;
  while (*p != h) p = &(*p)->users;
  *p = h->users;
}

/* Delete h: what it holds goes to self, its maker's own heap.  h's lock is
 * taken as its owner's (this thread stands in: hm_tls_heap is h while its
 * frees are collected), self's too: the purger only ever tries either. */
static void heap_delete(heap_t *h, heap_t *self) {
  hm_tls_heap = h;
  heap_enter(h);
  heap_drain(h);
  segment_t *list = NULL;
  while (h->segments) {                        /* off h's list and fit bins, onto ours */
    segment_t *s = h->segments;
    segment_unlink(h, s);
    s->heap = NULL;
    s->next = list;
    list = s;
  }
  huge_list_drop(h);                           /* plain huge blocks now */
  heap_gone(h);
  heap_leave(h);
  hm_tls_heap = self;
  heap_enter(self);
  for (segment_t *s = list, *next; s; s = next) {
    next = s->next;
    segment_give(self, s);
  }
  heap_leave(self);
}

/* Destroy h: its pages and segments go back, whatever they hold. */
static void heap_destroy(heap_t *h) {
  if (unlikely(hm_profiling)) profile_heap_destroyed(h);
  heap_enter(h);
  for (page_t *pg = h->full.first; pg; pg = pg->next) page_set_tf_state(pg, TF_NORMAL);   /* (deliveries end) */
  while (h->segments) segment_destroy(h, h->segments);
  atomic_store_explicit(&h->delayed, 0, memory_order_relaxed);
  heap_gone(h);
  heap_leave(h);
  huge_list_free(h);
}

/* h is no one's any more: a late call with it is reported (check_maker). */
static void ended(heap_t *h) {
  h->maker = NULL;
  heap_recycle(h);
}

void hm_heap_delete(heap_t *h) {
  if (!h) return;
  check_maker(h, "hakmem_heap_delete" MISUSE);
  unlist(h);
  heap_delete(h, h->maker);
  ended(h);
}

void hm_heap_destroy(heap_t *h) {
  if (!h) return;
  check_maker(h, "hakmem_heap_destroy" MISUSE);
  unlist(h);
  heap_destroy(h);
  ended(h);
}

/* A thread exits: the heaps it made and did not end are deleted, their
 * blocks left in its own heap (which then goes as any exiting heap). */
void userheap_thread_done(heap_t *self) {
  while (self->users) {
    heap_t *h = self->users;
    self->users = h->users;
    heap_delete(h, self);
    ended(h);
  }
}

HM_EXPORT_HAKMEM(heap_new) HM_EXPORT_HAKMEM(heap_malloc) HM_EXPORT_HAKMEM(heap_calloc)
HM_EXPORT_HAKMEM(heap_realloc) HM_EXPORT_HAKMEM(heap_aligned_alloc) HM_EXPORT_HAKMEM(heap_delete)
HM_EXPORT_HAKMEM(heap_destroy)
