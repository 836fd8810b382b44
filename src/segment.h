/* segment.h — segments (included by internal.h): the header, the segment
 * map, and the interfaces of the modules that manage them, from the bottom
 * up: segmap.c and registry.c (where segments are), slices.c (a segment's
 * slices), huge.c, segcache.c and abandon.c (segments between heaps), and
 * segment.c (a heap's segments, on which heap.c places its pages). */
#ifndef HAKMEM_SEGMENT_H
#define HAKMEM_SEGMENT_H

/* ---- segments ------------------------------------------------------------ */
/* Where a mapping asked for transparent huge pages: nowhere or all over (a
 * normal segment: ALL once either half asked, small_halves saying which are
 * in 4 KiB pages; segment.c's heap_wants_huge), a huge span also all but its
 * first stretch (a probe of huge.c's thp_t). */
enum { ADVICE_NONE, ADVICE_BUT_FIRST, ADVICE_ALL };
/* The slices of a segment's 2 MiB half (0 or 1): one huge page under ADVICE_ALL. */
static inline uint64_t half_slices(unsigned half) { return half ? ~0ull << (SLICES / 2) : (1ull << (SLICES / 2)) - 1; }
typedef struct segment_s {
  struct segment_s *all_next, *all_prev; /* registry of every mapped segment (census) */
  uint8_t advice;                /* ADVICE_*: where the mapping asked for transparent huge pages,
                                    kept when cached, as the mapping keeps the advice */
  uint8_t small_halves;          /* bit h: 2 MiB half h of a normal segment is in 4 KiB pages: it
                                    never asked for huge pages, or asks for 4 KiB pages again,
                                    as its decay found it mostly free */
  bool huge_probe;               /* a huge block that started clean, its first stretch without
                                    the advice: its free measures how the program used it */
  bool upper_untouched;          /* the upper half of a fresh mapping, never touched: whether it
                                    asks for huge pages waits for its first slice handed out */
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
  uint8_t fit_run[2];            /* its heap's index (slices.c): longest free run, longest
                                    free and resident run; 0: in no bin */
  struct segment_s *fit_next[2], *fit_prev[2];
  page_t pages[SLICES];          /* page descriptors, lowest free one first: a segment of
                                    few pages touches one OS page of header (huge: pages[1]) */
} segment_t;
/* The OS pages the header takes at the start of a segment or huge mapping
 * (a macro: OS_PAGE is declared after this header). */
#define SEG_HEADER_SIZE ((sizeof(segment_t) + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1))

_Static_assert(sizeof(segment_t) <= SLICE_SIZE, "segment header must fit in slice 0");

/* The segment map says which SEG_SIZE chunks of address space are segments
 * of ours, and of which kind.  A process's segments lie together (os.c
 * hints them into one run of address space, and ordinary mmaps fill the top
 * of the address space downwards), so the map free's fast path reads is a
 * window of SEGMAP_SIZE segments (1 TiB) centred on the first segment mapped
 * (hm_segmap_lo: its first segment, a segment number, set once before any
 * segment is published); a segment outside it goes into the far map, chunks
 * of the same size mapped as they are needed, which the slow paths read
 * (segmap.c).  The window is in .bss: valid before any initialisation
 * (free(NULL) may come first), 256 KiB of address space, and its untouched
 * pages cost no memory. */
/* (hidden: free reads hm_segmap_lo in its subtraction, not through the GOT) */
extern _Atomic uint64_t hm_segmap_lo __attribute__((visibility("hidden")));
extern _Atomic(uint8_t) hm_segmap[SEGMAP_SIZE];
#define SEGMAP_NORMAL 1
#define SEGMAP_HUGE   2
_Atomic(uint8_t) *segmap_far(uintptr_t i);        /* segment i's far entry, or NULL */
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
/* The start of the slice p lies in, and its index in p's segment. */
static inline uintptr_t slice_of(const void *p) { return (uintptr_t)p & ~(uintptr_t)(SLICE_SIZE - 1); }
static inline size_t slice_index(const void *p) { return ((uintptr_t)p & SEG_MASK) >> SLICE_SHIFT; }
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


extern page_t hm_page_invalid;                   /* the page of every free slice (slices.c) */

/* A segment list linked by next/prev (a heap's segments, the abandoned
 * list, the caches), newest first. */
static inline void seglist_push(segment_t **head, segment_t *s) {
  s->prev = NULL;
  s->next = *head;
  if (*head) (*head)->prev = s;
  *head = s;
}
static inline void seglist_remove(segment_t **head, segment_t *s) {
  hm_assert(s->prev ? s->prev->next == s : *head == s);          /* s is on the list */
  hm_assert(!s->next || s->next->prev == s);
  if (s->prev) s->prev->next = s->next; else *head = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
}

/* The lowest run of set bits of m (not 0): its first bit *i, length *n, mask. */
static inline uint64_t slice_first_run(uint64_t m, unsigned *i, unsigned *n) {
  hm_assert(m != 0);
  *i = (unsigned)__builtin_ctzll(m);
  uint64_t rest = ~(m >> *i);                             /* zero bits: the run */
  *n = rest ? (unsigned)__builtin_ctzll(rest) : 64 - *i;
  return slice_run(*i, *n);
}

static inline page_t *page_of(segment_t *s, const void *p) {
  return s->slice_page[((uintptr_t)p - (uintptr_t)s) >> SLICE_SHIFT];
}

/* The fork handlers (thread.c) hold every lock of these modules across fork. */

/* segmap.c: the segment map */
_Atomic(uint8_t) *segmap_make(segment_t *s);     /* s's entry, made if it has none; NULL if it cannot be */
void    segmap_set(segment_t *s, uint8_t v);     /* (s has an entry) */
uint8_t segmap_kind(const segment_t *s);         /* 0 (none, or not in use), SEGMAP_NORMAL, SEGMAP_HUGE */
void    segmap_fork_prepare(void), segmap_fork_parent(void);

/* registry.c: every mapped segment (the census, stats.h, walks them) */
void    registry_add(segment_t *s);
void    registry_remove(segment_t *s);           /* (still mapped: a huge span merged into another) */
void    registry_unmap(segment_t *s);
segment_t *registry_unmap_run(segment_t *s);     /* unmap the adjacent ones heading list s; the rest */
segment_t *registry_remap_huge(segment_t *s, size_t total, void *dst);   /* NULL: could not, s intact */
void    registry_fork_prepare(void), registry_fork_parent(void);

/* slices.c: a segment's slices and its heap's index of their free runs */
void    slices_init(segment_t *s, size_t size, bool fresh);   /* a header with every slice free */
void    slices_index(segment_t *s);              /* s's used or dirty slices changed: rebin it */
void    slices_unindex(heap_t *h, segment_t *s);
void    slices_purge(segment_t *s, uint64_t mask, bool forced);   /* the free slices in mask */
void    slices_half_small(segment_t *s, unsigned half); /* half of a segment in huge pages asks for 4 KiB pages */
void    slices_free(segment_t *s, page_t *pg);   /* a page's run back to s */

/* huge.c: blocks on mappings of their own */
extern _Atomic uint64_t hm_huge_due;             /* the huge cache's next purge, 0: none */
page_t *huge_alloc(heap_t *h, size_t size, size_t align);
void    huge_free(segment_t *s);
void   *huge_resize(segment_t *s, page_t *pg, size_t n);   /* NULL: could not, block intact */
bool    huge_cache_purge(bool force, uint64_t *next);
void    huge_list_add(heap_t *h, segment_t *s);   /* a first-class heap's block */
void    huge_list_drop(heap_t *h);        /* (deleted) its blocks become plain ones */
void    huge_list_free(heap_t *h);        /* (destroyed) its blocks are freed */
void    huge_fork_prepare(void), huge_fork_parent(void);

/* segcache.c: empty segments, shared by all threads */
segment_t *segcache_take(bool *fresh);           /* cached, retired or new; *fresh: zero, unregistered */
void    segcache_put(segment_t *s);              /* an empty segment, on no list */
void    segcache_tick(uint64_t now);             /* purge the caches' due entries, if any (two loads if none) */
uint64_t segcache_decay(void);                   /* (purger) next deadline, 0 = none */
void    segcache_retired_unmap(void);
bool    segcache_trim(void);
void    segcache_fork_prepare(void), segcache_fork_parent(void);

/* abandon.c: the segments of exited threads */
uint64_t abandon_push(segment_t *s);             /* its purge deadline, 0 = none */
bool    abandon_take(segment_t *s);              /* s taken off the list for adoption */
segment_t *abandon_take_any(void);
uint64_t abandon_tidy(bool force, size_t *left); /* next deadline, 0 = none */
void    abandon_fork_prepare(void), abandon_fork_parent(void);

/* segment.c: a heap's segments */
#define SEG_HUGE_MIN (1u << 20)     /* resident in 4 KiB pages a heap has before a half of its segments
                                       first touched asks for huge pages (HAKMEM_HUGEPAGES=1) */
page_t *segment_page_alloc(heap_t *h, size_t slices, uint8_t cls, bool tight);
void    segment_page_free(page_t *pg);
bool    segment_large_resize(page_t *pg, size_t slices);
enum purge_mode { PURGE_BUSY, PURGE_IDLE, PURGE_FORCE };   /* the owner's slow path; a quiet or exiting heap; every free slice now */
bool    segment_purge_due(heap_t *h, enum purge_mode mode, segment_t *watch);
void    segment_purge_reset_delay(heap_t *h);
void    segment_unlink(heap_t *h, segment_t *s);
void    segment_release_empty(heap_t *h, segment_t *s);
bool    segment_try_reclaim(heap_t *h, segment_t *s);
void    segment_give(heap_t *to, segment_t *s);   /* s, on no list, joins heap to (to locked) */
void    segment_destroy(heap_t *h, segment_t *s); /* every page of s freed, s released */

#endif
