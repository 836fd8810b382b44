/* remote.c — frees of blocks another thread's heap owns, handed over in
 * batches.
 *
 * Only a page's owner touches its free list, so a thread freeing another
 * heap's block has to hand it over.  Pushing each block onto its page's
 * thread_free list (one CAS, after reading the block's first word for the
 * double-free test) made the freeing thread wait, block after block, for lines
 * the owner's core held: the block's (read, then written) and the list
 * head's (the CAS waits for both); and the owner's malloc waited for the
 * block's line again when it popped it.  Between two cores that share no
 * cache those waits were most of the time of a program that frees remotely.
 *
 * So a freeing thread appends the pointer to a buffer of its own (rbuf_t),
 * all of whose blocks have one owner heap, without touching the block; it has
 * a buffer in each of RB_SLOTS slots, chosen by a hash of the owner.  A full
 * buffer, or one in the slot another owner needs, is sent (remote_send): it
 * goes onto the owner's inbox with one CAS, its blocks still untouched.  The
 * owner takes its inbox on malloc's slow path (remote_collect), prefetches the
 * blocks of each buffer, and frees them as its own, with free's block-start
 * and double-free tests, a page looked up once for a run of its blocks (the
 * classes without a thread cache): so the blocks' lines never leave the
 * owner's core.  Empty buffers it keeps for
 * its own sends (up to RB_SPARES) or sends home to the heap that made them.
 *
 * Bounds.  An inbox takes RB_DEPTH buffers; to an owner that has not
 * collected them a buffer's blocks go onto their pages' thread_free lists, as
 * unbuffered frees did.  A heap has RB_MAX buffers in its struct (no mapping
 * of their own); while all of them are out (in owners' inboxes: an owner
 * asleep while others free its blocks), it makes more, blocks of its own
 * heap, and frees those beyond RB_KEEP of its spares at its next flush and
 * at its exit.  A thread that cannot make one frees block by block.  A buffer
 * waits in its thread until it is full or another owner needs its slot, and
 * at most until the thread's next heap tick (64 slow-path events), its exit,
 * malloc_trim, or, for a thread that stopped calling the allocator, the
 * purger, which takes it as it takes the thread caches (tc_busy and tc_stop,
 * tcache.c): so the buffers are on only where the thread caches' fence
 * (membarrier) works.  An exiting thread closes its inbox (senders then free
 * block by block) and sends what it holds; the purger frees the inbox of a
 * quiet heap onto the pages' thread_free lists. */
#include "hot.h"

#include <sched.h>

#define RB_SPARES 4                         /* empty buffers a heap keeps from its inbox */
#define RB_DEPTH  4096                      /* buffers an inbox takes (more: unbuffered, remote_send) */
#define RB_KEEP   RB_MAX                    /* spare buffers a heap keeps after a flush */
_Static_assert(sizeof(rbuf_t) == 512, "a buffer is 8 cache lines");

bool hm_remote_on;
const rbuf_t hm_rb_none = { .to = NULL, .n = RB_BLOCKS };

void remote_process_init(bool fence) { hm_remote_on = fence && !hm_counting; }

/* ---- the block-by-block way (no buffer) ---------------------------------- */

/* Push b, a block of pg owned by owner and not looking free, onto pg's
 * thread_free with one CAS.  False, with b's first word as it was, when the
 * page is parked or being handed over (TF state set). */
static bool push_one(page_t *pg, block_t *b, heap_t *owner) {
  hm_assert((pg->cls < CLASSES || pg->cls == CLASS_LARGE) && owner != NULL);   /* (large: parked, refused) */
  uintptr_t data = b[0].word, tf = atomic_load_explicit(&pg->thread_free, memory_order_relaxed);
  block_mark_free(pg, b);
  do {
    if (unlikely(tf & TF_MASK)) { b[0].word = data; return false; }
    b[1].word = link_enc(pg->tf_key, b, TF_PTR(tf));
  } while (!atomic_compare_exchange_weak_explicit(&pg->thread_free, &tf, TF_PUSH(tf, b),
                                                  memory_order_seq_cst, memory_order_relaxed));
  if (unlikely(heap_idle(owner))) heap_wake_idle(owner);
  return true;
}

/* Free b, another heap's block of pg, without a buffer. */
static void free_one(page_t *pg, block_t *b, heap_t *owner) {
  if (!block_looks_free(pg, b) && push_one(pg, b, owner)) return;
  hm_free_handed(b);                            /* parked page, double free */
}

/* ---- buffers --------------------------------------------------------------- */

static void rb_home(rbuf_t *o) {
  heap_t *home = o->home;
  rbuf_t *top = atomic_load_explicit(&home->rb_back, memory_order_relaxed);
  do o->next = top;
  while (!atomic_compare_exchange_weak_explicit(&home->rb_back, &top, o, memory_order_release, memory_order_relaxed));
}

/* The buffers sent back to h join its spares; false if none came.  (owner) */
static bool rb_back_to_spares(heap_t *h) {
  rbuf_t *o = atomic_load_explicit(&h->rb_back, memory_order_relaxed) ?
              atomic_exchange_explicit(&h->rb_back, NULL, memory_order_acquire) : NULL;
  if (!o) return false;
  for (rbuf_t *next; o; o = next) {
    next = o->next;
    o->next = h->rb_spare;
    h->rb_spare = o;
    h->rb_spares++;
  }
  return true;
}

/* An empty buffer for h's next send, or NULL (all of h's buffers are out:
 * rb_grow makes more).  (owner, tc_busy) */
static rbuf_t *rb_take(heap_t *h) {
  hm_assert(h->rb_made <= RB_MAX && !h->rb_spares == !h->rb_spare);
  rbuf_t *o = h->rb_spare;
  if (!o && rb_back_to_spares(h)) o = h->rb_spare;
  if (o) {
    h->rb_spare = o->next;
    h->rb_spares--;
    return o;
  }
  if (h->rb_made == RB_MAX) return NULL;
  o = &h->rb[h->rb_made++];
  o->home = h;
  return o;
}

/* Is o one of the buffers h made from its own blocks (rb_grow)? */
static bool rb_extra(heap_t *h, rbuf_t *o) { return o->home == h && (o < h->rb || o >= h->rb + RB_MAX); }

/* All of h's buffers are out: make one more, a block of h's, as a spare.
 * (Owner, outside tc_enter: the malloc may take h's inbox, whose blocks may
 * be freed here again, but makes no second buffer meanwhile.) */
static bool rb_grow(heap_t *h) {
  if (h->rb_growing) return false;
  h->rb_growing = true;
  rbuf_t *o = hm_malloc_fast(sizeof(rbuf_t));
  h->rb_growing = false;
  if (!o) return false;
  o->home = h;
  o->next = h->rb_spare;
  h->rb_spare = o;
  h->rb_spares++;
  return true;
}

/* Free the buffers of h's own making among its spares beyond keep (the
 * owner, outside tc_enter: rb_take is its alone). */
static void rb_trim(heap_t *h, uint32_t keep) {
  rb_back_to_spares(h);
  if (h->rb_spares <= keep) return;
  rbuf_t **at = &h->rb_spare, *o, *gone = NULL;
  while ((o = *at) != NULL && h->rb_spares > keep) {
    if (rb_extra(h, o)) {
      *at = o->next;
      h->rb_spares--;
      o->next = gone;
      gone = o;
    } else {
      at = &o->next;
    }
  }
  for (rbuf_t *next; gone; gone = next) {
    next = gone->next;
    hm_free_fast(gone);
  }
}

/* Free b, a block of a buffer that is not delivered, here: onto its page's
 * thread_free (direct), or through free's slow path (the owner exited).  A
 * large block's freed flag is set already (remote_free). */
static void free_unbuffered(block_t *b, heap_t *to, bool direct) {
  segment_t *s = segment_of(b);
  page_t *pg = page_of(s, b);
  hm_assert(segment_known(b) && pg->slices > 0 && (pg->cls < CLASSES || pg->cls == CLASS_LARGE));
  if (pg->cls == CLASS_LARGE) hm_free_release(s, pg, b, true);
  else if (direct) free_one(pg, b, to);
  else hm_free_handed(b);
}

/* Hand buffer o to the heap that owns its blocks: the owner's fast path,
 * or the purger with the quiet heap's buffer (tcache_take).  This thread's
 * heap is not locked: a block whose owner exited may be freed into it. */
void remote_send(rbuf_t *o) {
  heap_t *to = o->to;
  hm_assert(to && o->home && o->n > 0 && o->n <= RB_BLOCKS);
  /* An owner that is not collecting (RB_DEPTH buffers wait in its inbox)
   * gets the blocks on its pages' thread_free lists instead, as unbuffered;
   * one that exited, through free's slow path (which may adopt the page). */
  rbuf_t *top = atomic_load_explicit(&to->inbox, memory_order_acquire);   /* (for top->depth) */
  enum { DELIVER, DIRECT, CLOSED } how = top == INBOX_CLOSED ? CLOSED
      : top && atomic_load_explicit(&top->depth, memory_order_relaxed) >= RB_DEPTH ? DIRECT : DELIVER;
  /* The blocks are not read here: their lines are the owner's, and the owner
   * tests each for a double free as it collects them. */
  uint32_t n = how == DELIVER ? o->n : 0;
  for (uint32_t i = n; i < o->n; i++) free_unbuffered(o->block[i], to, how == DIRECT);
  if ((o->n = n) == 0) { rb_home(o); return; }
  do {
    if (top == INBOX_CLOSED) {                  /* the owner exited since: as above */
      for (uint32_t i = 0; i < o->n; i++) free_unbuffered(o->block[i], to, false);
      rb_home(o);
      return;
    }
    o->next = top;
    atomic_store_explicit(&o->depth, (top ? atomic_load_explicit(&top->depth, memory_order_relaxed) : 0) + 1,
                          memory_order_relaxed);
  } while (!atomic_compare_exchange_weak_explicit(&to->inbox, &top, o, memory_order_seq_cst, memory_order_acquire));
  if (unlikely(heap_idle(to))) heap_wake_idle(to);
}

/* Put b (size: its bytes counted toward RB_BYTES) in h's buffer for to.
 * False if it is not there: the purger is taking h's buffers, or h has none
 * left (*none). */
static bool buffer_block(heap_t *h, page_t *pg, block_t *b, heap_t *to, uint32_t size, bool *none) {
  rbuf_t *send = NULL, *o;
  bool kept = false;
  _Atomic(rbuf_t *) *slot = &h->out[to->rb_slot];   /* (pg's may be RB_SLOTS: page_rb_slot) */
  if (tc_enter(h)) {                            /* (else the purger is taking h->out[]) */
    o = atomic_load_explicit(slot, memory_order_relaxed);
    if (o->to == to && o->n < RB_BLOCKS) {      /* (the purger was here a moment ago, or b is big) */
      o->block[o->n++] = b;
      o->bytes += size;
      kept = true;
      hm_assert(o->n <= RB_BLOCKS);
      if (o->bytes >= RB_BYTES) {               /* big blocks go back soon */
        send = o;
        atomic_store_explicit(slot, RB_NONE, memory_order_relaxed);
      }
    } else {
      send = o != RB_NONE ? o : NULL;
      if ((o = rb_take(h)) != NULL) {
        o->to = to;
        o->n = 1;
        o->bytes = size;
        o->block[0] = b;
        kept = true;
      } else {
        o = RB_NONE;
        *none = true;
      }
      atomic_store_explicit(slot, o, memory_order_relaxed);
    }
  }
  tc_leave(h);
  if (send) remote_send(send);
  return kept;
}

/* free's fast path found no room for b (a block of pg, owned by to) in h's
 * buffer: send the buffer, start another (made if h has none left). */
void remote_free(heap_t *h, page_t *pg, block_t *b, heap_t *to) {
  hm_assert(to != NULL && to != h && (pg->cls < CLASSES || pg->cls == CLASS_LARGE));
  uint32_t size = pg->cls < CLASS_OVER_32K ? 0 : pg->block_size < RB_BYTES ? (uint32_t)pg->block_size : RB_BYTES;
  if (!hm_remote_on || size == RB_BYTES || atomic_load_explicit(&to->user, memory_order_relaxed) || (h == &hm_heap_empty && !(h = heap_get()))) {
    free_one(pg, b, to);                        /* (a block of RB_BYTES or more, or of a first-class
                                                   heap, which may be destroyed: on its own) */
    return;
  }
  /* A large block's freed flag is set now, as free's slow path sets it: a
   * second free is caught at once, and its owner frees it unread. */
  if (pg->cls == CLASS_LARGE && atomic_exchange_explicit(&pg->freed, 1, memory_order_relaxed)) hm_fatal("double free", b, pg);
  bool none = false;
  if (buffer_block(h, pg, b, to, size, &none)) return;
  if (none && rb_grow(h) && buffer_block(h, pg, b, to, size, &none)) return;   /* (into the new spare) */
  free_unbuffered(b, to, true);
}

/* ---- the owner's side -------------------------------------------------------- */

/* Free b, a block of a buffer of h's (the owner, no lock held), as free's
 * fast path would: its sender did not read it, so this is where a block freed
 * twice is caught (the second time it looks free). */
static void collect_one(heap_t *h, block_t *b) {
  segment_t *s = segment_of(b);
  size_t k = slice_index(b);
  page_t *pg = s->slice_page[k];
  list_t *to = slice_push_of(s, k);
  /* Its sender found b a block start of ours, but a page given back since (a
   * block freed twice, the first collected) may have been carved again for
   * another size: checked again, as free's fast path. */
  if (atomic_load_explicit(&pg->local, memory_order_relaxed) == (uintptr_t)h &&
      hm_freeable(pg, b, (uintptr_t)b - (uintptr_t)pg->start))
    hm_owner_push(h, to, pg, b);
  else if (pg->cls == CLASS_LARGE)
    hm_free_release(s, pg, b, true);            /* (its sender set its freed flag) */
  else
    hm_free_block(b, true, 0);                  /* a cached class, a parked page, a double free... */
}

#define COLLECT_AHEAD 16                    /* blocks whose lines are fetched ahead */
_Static_assert(RB_BLOCKS > COLLECT_AHEAD, "collect_run's first + COLLECT_AHEAD lies in o->block");

/* What collect_run tests a block of its run against, in registers. */
typedef struct run_s {
  uintptr_t slice, start;          /* the run's slice, its page's first block */
  uint64_t magic, limit;           /* the page's block-start test (block_start_in) */
  uintptr_t mark, key;             /* the page's free mark, its list's link key */
} run_t;

/* Push b onto the chain *head if it lies in the run's slice, is a carved
 * block start of the page and does not look free already. */
static inline bool run_push(const run_t *r, block_t *b, uintptr_t *head) {
  if (slice_of(b) != r->slice || !block_start_in((uintptr_t)b - r->start, r->magic, r->limit) || b[0].word == r->mark)
    return false;
  b[0].word = r->mark;
  b[1].word = link_enc(r->key, b, *head);
  *head = (uintptr_t)b;
  return true;
}

/* Push end[-1], end[-2]... while they lie in the slice of the first, a
 * slice of pg (h's page, whose blocks go onto its own list), each tested as
 * free's fast path tests it, with the page's fields in registers and one
 * store of the list's head and one of its count for the run.  The first
 * block of another slice, or that fails the test (collect_one's then),
 * ends the run; returns where.  A run that gives the page its last block
 * retires it.  Two loops: the blocks that fetch the one COLLECT_AHEAD
 * further, then the last COLLECT_AHEAD.  (Not inlined: the caller's loop
 * keeps its own registers.) */
static __attribute__((noinline)) block_t **collect_run(heap_t *h, page_t *pg, block_t **first, block_t **end) {
  list_t *l = &pg->list;
  const run_t r = { slice_of(end[-1]), (uintptr_t)pg->start, pg->magic, racy_word(&pg->limit), pg->key, l->key };
  uintptr_t head = list_head(l);
  block_t **const top = end, **const fetched = first + COLLECT_AHEAD;
  for (; end > fetched; end--) {
    __builtin_prefetch(end[-1 - COLLECT_AHEAD], 1);
    if (!run_push(&r, end[-1], &head)) goto tested;
  }
  for (; end > first; end--)
    if (!run_push(&r, end[-1], &head)) break;
tested:;
  uint32_t n = (uint32_t)(top - end);
  if (n) {
    uint32_t used = list_count(l);
    hm_assert(n <= used);                       /* (each block was in use, tested) */
    list_set_head(l, head);
    count_store(&l->used, used - n);            /* (after the head, as hm_list_push) */
    if (used == n) heap_page_retire(h, pg);
  }
  return end;
}

/* Free the blocks of buffer o, each as collect_one would, but the page and
 * push target of a slice looked up once for the blocks of that slice that
 * follow each other in o, and its owner tested once: only this thread
 * changes a page of its own, and it starts a new lookup after anything but a
 * push onto a page.  A run of blocks for a page's own list (a producer's
 * blocks come in such runs) goes in one collect_run.  A slice whose page is
 * not h's has hm_page_invalid for its page, whose block-start test no block
 * passes: its blocks go one by one.  The blocks go last first, as the
 * inbox's buffers go newest first, so that malloc pops them in the order
 * they were freed: blocks freed in the order they were made come back in
 * address order, whose misses the processor's prefetcher hides.  Each
 * block's line is fetched COLLECT_AHEAD blocks ahead of its turn (all of a
 * buffer's at once, the prefetches wait for the processor's miss buffers);
 * the buffer's own lines were fetched before (rb_fetch). */
static void collect_buffer(heap_t *h, rbuf_t *o) {
  block_t **first = (block_t **)o->block, **at = first + o->n;
  for (block_t **p = at, **stop = o->n > COLLECT_AHEAD ? at - COLLECT_AHEAD : first; p-- > stop;) __builtin_prefetch(*p, 1);
  uintptr_t slice = 1;                          /* what pg and to are for (1: nothing) */
  page_t *pg = &hm_page_invalid;
  list_t *to = NULL;
  while (at-- > first) {
    block_t *b = *at;
    if (at - first >= COLLECT_AHEAD) __builtin_prefetch(at[-COLLECT_AHEAD], 1);
    if (slice_of(b) != slice) {
      segment_t *s = segment_of(b);
      size_t k = slice_index(b);
      slice = slice_of(b);
      pg = s->slice_page[k];
      to = slice_push_of(s, k);
      if (atomic_load_explicit(&pg->local, memory_order_relaxed) != (uintptr_t)h) {
        pg = &hm_page_invalid;
      } else if (to == &pg->list && at > first && slice_of(at[-1]) == slice) {
        block_t **end = collect_run(h, pg, first, at + 1);
        if (end != at + 1) {                    /* (else b failed the test: below) */
          at = end;
          slice = 1;                            /* (the run may have retired the page) */
          continue;
        }
      }
    }
    if (likely(hm_freeable(pg, b, (uintptr_t)b - (uintptr_t)pg->start))) {
      if (unlikely(hm_list_push(to, pg, b))) hm_owner_push_ended(h, to, pg);   /* (an emptied page, a full cache) */
      else if (likely(to == &pg->list)) continue;
      /* A thread cache's entry is read again for the next block: the purger,
       * taking the caches of a heap it found quiet, points it at the sink
       * meanwhile, and its cut allows one push under way (tcache.c). */
    } else {
      collect_one(h, b);                        /* (not ours, not a block start, a double free...) */
    }
    slice = 1;
  }
}

/* Fetch buffer o's lines, in order: they come from the sender's core, and
 * collect_buffer, which reads its pointers last first, would take them one
 * at a time. */
static void rb_fetch(const rbuf_t *o) {
  for (size_t l = 0; l < sizeof *o; l += 64) __builtin_prefetch((const uint8_t *)o + l);
}

/* Free the blocks of buffers o... (the owner, no lock held) and keep or send
 * back the buffers.  Each buffer's lines are fetched while the one before
 * it is collected. */
static void collect(heap_t *h, rbuf_t *o) {
  hm_assert(!heap_held(h) && o != INBOX_CLOSED);
  if (o) rb_fetch(o);
  while (o) {
    rbuf_t *next = o->next;
    hm_assert(o->to == h && o->n > 0 && o->n <= RB_BLOCKS);   /* buffers of h's blocks */
    if (next) rb_fetch(next);
    collect_buffer(h, o);
    if (h->rb_spares < RB_SPARES) {
      hm_assert(o->home != NULL);
      o->next = h->rb_spare;
      h->rb_spare = o;
      h->rb_spares++;
    } else {
      rb_home(o);
    }
    o = next;
  }
}

void remote_collect(heap_t *h) { collect(h, atomic_exchange_explicit(&h->inbox, NULL, memory_order_acquire)); }

bool remote_held(heap_t *h) {
  for (size_t i = 0; i < RB_SLOTS; i++)
    if (atomic_load_explicit(&h->out[i], memory_order_relaxed) != RB_NONE) return true;
  return false;
}

/* Send h's buffers now (the owner, no lock held): the heap tick, malloc_trim. */
void remote_flush(heap_t *h) {
  rbuf_t *o[RB_SLOTS];
  hm_assert(!heap_held(h));
  if (!hm_remote_on) return;
  /* The purger may be taking them (tc_stop up for a moment): if it finds this
   * thread busy it leaves them, so wait for it rather than skip them (at the
   * thread's exit they would be lost). */
  while (!tc_enter(h)) {
    tc_leave(h);
    sched_yield();
  }
  for (size_t i = 0; i < RB_SLOTS; i++) {
    o[i] = atomic_load_explicit(&h->out[i], memory_order_relaxed);
    atomic_store_explicit(&h->out[i], RB_NONE, memory_order_relaxed);
    hm_assert(o[i] == RB_NONE || (o[i]->n > 0 && o[i]->n <= RB_BLOCKS));
  }
  tc_leave(h);
  for (size_t i = 0; i < RB_SLOTS; i++)
    if (o[i] != RB_NONE) remote_send(o[i]);
  rb_trim(h, RB_KEEP);
}

/* The thread exits (no lock held): close the inbox, free what it holds, send
 * the buffer, give the spares back. */
void remote_close(heap_t *h) {
  hm_assert(!heap_held(h));
  collect(h, atomic_exchange_explicit(&h->inbox, INBOX_CLOSED, memory_order_acquire));
  remote_flush(h);
  rb_trim(h, 0);                                /* (those still out come back to rb_back) */
  for (rbuf_t *o = h->rb_spare, *next; o; o = next) {
    next = o->next;
    rb_home(o);
  }
  h->rb_spare = NULL;
  h->rb_spares = 0;
  hm_assert(atomic_load_explicit(&h->inbox, memory_order_relaxed) == INBOX_CLOSED);   /* it stays closed */
}

/* A new thread's heap (maybe a recycled one) takes frees again. */
void remote_open(heap_t *h) { atomic_store_explicit(&h->inbox, NULL, memory_order_release); }

/* ---- others' -------------------------------------------------------------- */

/* (h locked, its owner quiet) The blocks of h's inbox onto their pages'
 * thread_free lists, as any other thread's frees (and, as theirs, tested by
 * their look: the owner's lists are not ours to walk). */
void remote_take(heap_t *h) {
  hm_assert(heap_held(h));
  /* (a compare-exchange: an owner exiting meanwhile may have closed it, and
   * it stays closed) */
  rbuf_t *o = atomic_load_explicit(&h->inbox, memory_order_relaxed);
  while (o && o != INBOX_CLOSED &&
         !atomic_compare_exchange_weak_explicit(&h->inbox, &o, NULL, memory_order_acquire, memory_order_relaxed)) {}
  if (o == INBOX_CLOSED) return;
  while (o) {
    rbuf_t *next = o->next;
    hm_assert(o->to == h && o->n > 0 && o->n <= RB_BLOCKS);
    for (uint32_t i = 0; i < o->n; i++) {
      block_t *b = o->block[i];
      page_t *pg = page_of(segment_of(b), b);
      if (block_looks_free(pg, b)) hm_fatal("double free (the block is already free)", b, pg);
      page_free_remote(pg, b);
    }
    rb_home(o);
    o = next;
  }
}
