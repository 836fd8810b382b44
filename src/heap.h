/* heap.h — heaps (included by internal.h): the heap a thread allocates from,
 * its page queues, thread caches and buffers of remote frees, and the
 * interfaces of the modules that run it. */
#ifndef HAKMEM_HEAP_H
#define HAKMEM_HEAP_H

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
#define INBOX_CLOSED ((rbuf_t *)1)   /* an inbox whose owner exited: send nothing */
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

/* When the purger trims a quiet heap (purge.c): once its slow paths have not
 * run for its wait, which grows when its thread comes back soon after a trim
 * and shrinks when it stays away. */
typedef struct {
  uint64_t seen_ops;             /* (purger) slow_ops when it last looked, */
  uint64_t since_ms;             /* (purger) and since when they have not moved */
  _Atomic uint64_t trimmed_ms;   /* the last trim, 0 once the owner is back (purge_owner_back) */
  _Atomic uint32_t wait_ms;      /* quiet that long before a trim; 0: the purge delay's */
  _Atomic uint32_t retrims;      /* trims since the owner was last back */
} quiet_t;
/* A new thread takes the heap: nothing learnt of it yet. */
static inline void quiet_reset(quiet_t *q) {
  atomic_store_explicit(&q->trimmed_ms, 0, memory_order_relaxed);
  atomic_store_explicit(&q->wait_ms, 0, memory_order_relaxed);
  atomic_store_explicit(&q->retrims, 0, memory_order_relaxed);
}

/* A heap belongs to one thread.  Its fast paths take no lock; its slow paths
 * hold heap->lock, which the purger (purge.c) also takes when it returns the
 * memory of a heap whose thread stopped calling the allocator. */

typedef struct heap_s {
  _Atomic uint8_t tc_busy;       /* the owner is appending to a buffer of remote frees */
  _Atomic uint8_t tc_stop;       /* the purger is taking the buffers: keep out */
  bool tc_parked;                /* (locked) the purger cut the caches: malloc and free keep
                                    out of them until the owner's next slow path */
  _Atomic(rbuf_t *) out[RB_SLOTS + 1]; /* blocks of other heaps this thread freed (atomic: the
                                    purger may take them, as the thread caches; relaxed); a
                                    slot without a buffer, and out[RB_SLOTS] always, hold
                                    RB_NONE (page_rb_slot) */
  tcl_t tc[TC_CLASSES];          /* thread caches of classes TC_MIN.. (the purger may cut
                                    them, tcache_take) */
  pageq_t queue[CLASSES];        /* pages with (possibly) free blocks, per class */
  pageq_t full;                  /* parked pages, all classes */
  _Atomic uintptr_t delayed;     /* blocks remote-freed into parked pages */
  segment_t *segments;           /* segments owned by this heap */
  segment_t *fit[2][SLICES];     /* the same, by longest free run and longest resident free
                                    run: bin k holds those whose run is k slices (slices.c) */
  uint64_t fit_map[2];           /* bit k: bin k not empty */
  uint64_t rand;                 /* per-heap PRNG state (page keys) */
  uint64_t next_purge_ms;        /* earliest pending purge deadline, 0 = none */
  decay_t decay;                 /* of its free slices */
  uint64_t spare_check_ms;       /* when the spare pages are next checked, 0 = none kept */
  uint32_t spare_slices;         /* slices of the spare pages, at most SPARE_SLICES */
  uint64_t freed_classes;        /* bit c: a page of class c emptied since the last spare check */
  uint8_t refills[CLASSES];      /* pages of each class carved or taken from the spares after
                                    one emptied: halved at each spare check, up to 255 */
  struct heap_s *next_free;      /* recycled heap structs, or parked heaps (thread.c) */
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
  /* first-class heaps (userheap.c; user is below): */
  struct heap_s *maker;          /* user: the own heap of the thread that made it */
  struct heap_s *users;          /* a thread's heap: the user heaps its thread made; a user
                                    heap: the next of them */
  segment_t *huge;               /* user: the segments of its huge blocks (huge.c, huge_lock) */
  _Atomic uint32_t huge_lock;
  /* kept when a struct is recycled: */
  _Atomic uint8_t owner_in;      /* the heap lock (heap.c): the owner's slow paths hold it, */
  _Atomic uint8_t other_in;      /* and the purger, or another thread's malloc_trim */
  _Atomic uint32_t lock;         /* the same as a spin lock, without membarrier */
  _Atomic bool user;             /* a heap a program made (hakmem_heap_new), no thread's own.
                                    Stored atomically, not cleared with the rest: another
                                    thread's free may read it through a page's stale owner
                                    while the struct is made anew (remote_free) */
#if HM_DEBUG_ON
  _Atomic(const void *) holder;  /* (debug build) the thread holding the lock (heap_held) */
#endif
  _Atomic uint64_t slow_ops;     /* the owner's slow-path entries: the purger's idleness test */
  _Atomic uint64_t parked_ms;    /* when its thread left it parked, 0 unless it is on the
                                    parked list (written with heaps_lock held, thread.c; the
                                    purger reads it: a parked heap is never busy) */
  list_t *_Atomic direct[DIRECT_N]; /* DIRECT_BIG's index of a size -> the list malloc pops:
                                    the first page of the class's queue for the small classes
                                    (set_current), the thread cache from 4 KiB.  Kept when the struct
                                    is recycled: the cache entries stay the same (20 KiB) */
  struct heap_s *_Atomic next_all; /* registry of every heap ever made (never unlinked) */
  struct quarantine_s *quarantine; /* secure mode: recently freed blocks (secure.c) */
  uintptr_t tc_key;              /* the thread caches' link key (set anew, tcache_init) */
  uint32_t rb_made;              /* of rb[], the buffers in use (remote.c) */
  list_t tc_sink;                /* where the owner's frees of the cached classes go while
                                    the caches are parked: the first calls out (tcache_full) */
  uint64_t prof_until;           /* profiling: bytes its thread allocates before its next
                                    sample point; the allocation that takes it below 0 is
                                    sampled (profile.c) */
  list_t *_Atomic current[CLASSES + 1]; /* slow mode: the list of each class that malloc's
                                    fast path would pop (direct[] stays at the empty page),
                                    and the empty page for CLASS_LARGE: what the profiler
                                    pops instead (profile_malloc) */
  /* read by every thread freeing into this heap: a line of its own */
  _Alignas(64) _Atomic int idle; /* (purger) found idle and trimmed: wake me if that changes */
  quiet_t quiet;                 /* when the purger trims it (purge.c) */
  _Atomic(rbuf_t *) inbox;       /* buffers of this heap's blocks other threads freed */
  _Atomic(rbuf_t *) rb_back;     /* buffers this heap made, sent back empty */
  /* its buffers for other heaps' blocks, touched as they are first used */
  _Alignas(64) rbuf_t rb[RB_MAX];
} heap_t;

/* A spin lock that yields the processor while it waits: the heap lock where
 * membarrier is missing (heap.c), a first-class heap's list of huge blocks
 * (huge.c). */
static inline void spin_lock(_Atomic uint32_t *l) {
  while (atomic_exchange_explicit(l, 1, memory_order_acquire))
    while (atomic_load_explicit(l, memory_order_relaxed)) sched_yield();
}
static inline bool spin_trylock(_Atomic uint32_t *l) { return !atomic_exchange_explicit(l, 1, memory_order_acquire); }
static inline void spin_unlock(_Atomic uint32_t *l) { atomic_store_explicit(l, 0, memory_order_release); }

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
_Static_assert(offsetof(heap_t, user) >= HEAP_RESET_SIZE, "user is not cleared with the rest (remote_free reads it)");
#define SPARE_SLICES 64              /* spare pages (heap.c): at most 4 MiB a heap, */
#define CLASS_SPARES 8               /* 8 pages a class, */
#define SPARE_AFTER  16              /* for a class that refilled 16 times in a purge delay */
_Static_assert(CLASSES <= 64, "freed_classes has a bit per class");

/* Where the owner's free of p (a block of a page with an owner) pushes.
 * (Acquire: the purger, having cut a cache, points its pages back at it.) */
static inline list_t *slice_push_of(segment_t *s, size_t k) { return atomic_load_explicit(HM_ELEM(s, slice_push, k), memory_order_acquire); }
static inline void page_set_push(page_t *pg, list_t *to) {
  segment_t *s = segment_of(pg);
  if (pg->cls < CLASSES)
    for (size_t k = 0; k < pg->slices; k++) atomic_store_explicit(&s->slice_push[pg->slice + k], to, memory_order_release);
}
/* Does every slice of pg push where its first does?  (From page_init on,
 * page_set_push writes them all.) */
static inline bool page_push_uniform(page_t *pg) {
  segment_t *s = segment_of(pg);
  for (size_t k = 1; k < pg->slices; k++)
    if (slice_push_of(s, pg->slice + k) != slice_push_of(s, pg->slice)) return false;
  return true;
}
static inline void page_set_local(page_t *pg) {
  heap_t *h = atomic_load_explicit(&pg->heap, memory_order_relaxed);
  /* (other pages push onto themselves; a page marked for the profiler's
   * samples, PAGE_SLOW alone, onto the cache: profile_free_local) */
  if (pg->cls < CLASSES && tcache_fast(pg->cls)) {
    list_t *to = h && !(pg->flags & ~PAGE_SLOW) ? &h->tc[pg->cls - TC_MIN].l : &pg->list;
    /* Unchanged (the profiler marking a page slow and back, an owner taking
     * its own page again): no store, where a big page has tens of slices. */
    hm_assert(page_push_uniform(pg));
    if (slice_push_of(segment_of(pg), pg->slice) != to) page_set_push(pg, to);
  }
  /* (a user heap's pages have no local owner: all their frees are remote) */
  atomic_store_explicit(&pg->local, pg->flags || !h || h->user ? 0 : (uintptr_t)h, memory_order_relaxed);
}
static inline list_t *hm_push_target(const void *p) {
  return slice_push_of(segment_of(p), slice_index(p));
}

/* The buffer of no heap's blocks, in every slot of heap_t.out without one:
 * free's fast path finds no room in it and needs no test for an empty slot.
 * Read-only: nothing appends to it, and a write would fault. */
extern const rbuf_t hm_rb_none;
#define RB_NONE ((rbuf_t *)&hm_rb_none)
/* The slot of out[] that other threads' frees of pg's blocks try first (free's
 * fast path): its owner h's, or RB_SLOTS, whose buffer is always hm_rb_none,
 * for blocks above 32 KiB (remote_free counts their bytes) and while pg has
 * no owner. */
static inline uint8_t page_rb_slot(const page_t *pg, const heap_t *h) {
  return h && pg->cls < CLASS_OVER_32K ? h->rb_slot : RB_SLOTS;
}

/* A page's owner (and what goes with it; its class is set). */
static inline void page_set_owner(page_t *pg, heap_t *h) {
  atomic_store_explicit(&pg->rb_slot, page_rb_slot(pg, h), memory_order_relaxed);
  atomic_store_explicit(&pg->heap, h, memory_order_release);
  page_set_local(pg);
}

extern __thread heap_t *hm_tls_heap;      /* initial-exec; &hm_heap_empty until first use */
extern heap_t hm_heap_empty;
extern page_t hm_page_empty;

/* heap.c: a heap's pages and the owner's slow paths */
void    heap_process_init(bool membarrier);        /* (thread.c) the class entries, the lock's kind */
void    heap_direct_init(heap_t *h);               /* a new heap's malloc entries */
void    heap_enter(heap_t *h);                     /* the owner's slow paths hold h's lock */
void    heap_leave(heap_t *h);
void    heap_lock_raw(heap_t *h), heap_unlock_raw(heap_t *h);   /* the same, without heap_enter's work */
bool    heap_trylock(heap_t *h);                   /* (purger, malloc_trim) another heap's lock */
bool    heap_trylock_unowned(heap_t *h);           /* (thread.c) a parked heap's */
bool    heap_trylock_parked(heap_t *h);            /* (purger) h's lock if h is parked, else false */
void    heap_unlock(heap_t *h);
bool    heap_held(const heap_t *h);                /* (debug build: hm_assert) this thread holds h's lock */
void    heap_validate(heap_t *h);                  /* (debug build, h locked) check the whole heap (debug.c) */
#if HM_DEBUG_ON
#define hm_validate(h) heap_validate(h)
#else
#define hm_validate(h) ((void)(h))
#endif
void    heap_wake_idle(heap_t *h);                 /* a remote free reached a heap the purger trimmed */
/* Did the purger find h idle?  A thread that sent h blocks asks after the
 * push onto h's list (sequentially consistent, as this load), and the purger
 * marks h idle and fences before it looks at those lists (purge.c): so either
 * it sees the blocks, or the sender sees the mark and wakes it. */
static inline bool heap_idle(heap_t *h) { return atomic_load_explicit(&h->idle, memory_order_seq_cst); }
void   *heap_malloc_slow(heap_t *h, size_t n, size_t c);   /* c: n's class, or CLASS_LARGE above them */
void   *heap_malloc_aligned(heap_t *h, size_t n, size_t align);
#define HEAP_TICKS 64
void    heap_tick(heap_t *h);                      /* (owner, locked) every HEAP_TICKS slow-path events */
void    heap_page_retire(heap_t *h, page_t *pg);   /* free's fast path emptied pg */
void    heap_page_retire_locked(heap_t *h, page_t *pg);
void    heap_page_free(heap_t *h, page_t *pg);     /* (locked) pg off its queue, back to its segment */
bool    heap_adopt_page(heap_t *h, page_t *pg);    /* a reclaimed segment's page joins h */
void    heap_free_local(heap_t *h, page_t *pg, block_t *b);   /* (locked) the owner's free, slow path */
void    heap_free_slow(page_t *pg, block_t *b);    /* (owner, locked) a class page's block */
bool    heap_block_free(heap_t *h, page_t *pg, const void *b);   /* (locked) confirms a block that looks free */
void    heap_collect_delayed(heap_t *h);
void    heap_route_caches(heap_t *h, bool to_caches);     /* (purger, locked) tcache_take */

/* large.c: blocks above the size classes */
void   *large_malloc(heap_t *h, size_t n, size_t align, bool grow);   /* (h locked) */
void   *large_malloc_grow(heap_t *h, size_t n);   /* realloc: a big block that may grow in place */

/* thread.c: a heap's life, the process's set-up, fork */
heap_t *heap_get(void);                            /* this thread's heap, made on demand */
void    heap_process_ready(void);                  /* the process's set-up done (options read) */
heap_t *heap_made(void);                           /* a new heap, of no thread yet */
heap_t *heap_first(void);                          /* the registry of heaps, for the purger */
void    heap_collect_all(heap_t *h);               /* (owner, locked) collect everything, free empty pages */
bool    heap_trim_idle(heap_t *h);                 /* (purger, locked) take back unreachable pages */
void    heap_drain(heap_t *h);                     /* (h locked, as owner) collect all, free empty pages */
void    heap_gone(heap_t *h);                      /* (h locked) holds nothing: the purger passes it by */
void    heap_recycle(heap_t *h);                   /* a heap given back: its struct for the next */
uint64_t heap_parked_tidy(uint64_t now);           /* (purger) release long-parked heaps; next deadline */

/* userheap.c: first-class heaps */
void    userheap_thread_done(heap_t *self);        /* the user heaps of an exiting thread */

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


#endif
