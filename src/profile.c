/* profile.c — the sampling heap profiler: HAKMEM_PROFILE=PREFIX.
 *
 * Sampling.  Allocated bytes are sampled as a Poisson process of rate one
 * per HAKMEM_PROFILE_RATE bytes (R): each thread counts down the bytes to its
 * next sample point (in its heap, profile_heap_taken), drawn from the
 * exponential distribution of mean R, and the allocation that crosses it is
 * sampled.  An allocation of n bytes is then sampled with probability
 * 1 - exp(-n/R), so each sample stands for n / (1 - exp(-n/R)) bytes: the
 * sums of these weights are unbiased estimates of the bytes allocated, and
 * of those still live, per call stack (the estimator of tcmalloc and
 * jemalloc).
 *
 * The countdown.  Profiling is a slow mode: malloc's lists stay at the empty
 * page, so every malloc misses its fast path, and the miss goes to
 * profile_malloc (hm_malloc_profiled, set at start-up): it counts the bytes
 * down and pops the block from the list the fast path would have popped
 * (heap_t.current), with the fast path's code.  An empty list, or a block
 * above the size classes, takes the slow path, which counts its bytes too
 * (profile_alloc), as do the other slow paths (aligned, realloc's growth).
 * With profiling off none of this runs: the miss goes to heap_malloc_slow.
 * (Windows, lists of the blocks up to a class's next sample that malloc's
 * fast path itself would pop, with a countdown of blocks per class, cost
 * fewer instructions but more time: frees cannot push on them without
 * spoiling the count, so the blocks freed last are not the next handed
 * out, and the blocks in circulation, with their cache misses, double.)
 *
 * Stacks (profile_stack.c) are walked by the rules of the unwind tables
 * (.eh_frame, as libgcc's unwinder reads them), each return address's rule
 * read once, with glibc's backtrace() for the frames whose rules it does
 * not follow: no frame pointers needed.  backtrace()'s first use dlopens
 * libgcc_s (which allocates); that happens on the first sample, with the
 * thread marked busy so that those allocations are not sampled, and no lock
 * held.  Frames of code without unwind information end the stack there
 * (hand-written assembly without CFI, JIT-compiled code, a binary built
 * with -fno-asynchronous-unwind-tables); inlined functions have no frame of
 * their own and appear as their caller.  The allocator's own frames are cut
 * off at the top when hakmem is a shared library (preloaded or linked with
 * -lhakmem); linked statically, hakmem's frames stay at the leaf end of each
 * stack.
 *
 * Tables (profile_tables.h).  A free finds its block among them through a
 * filter of counts by address (filter_of): one load for a block that was not
 * sampled.  Frees reach the profiler only on pages marked slow, those
 * holding samples (below), and from other threads; the rest keep their fast
 * path, and the owner's on a marked page take a short one
 * (profile_free_local: the filter, and the push free's fast path makes).
 * The lock is taken with no signal blocked: a thread holding it marks
 * itself (in_tables), and a signal handler that frees a sampled block on
 * that thread leaves the block to it, to be taken out of the tables when
 * it lets the lock go (profile_free); fork from such a handler leaves the
 * lock to the code it interrupted (profile_fork_*).
 * Reports: profile_dump.c. */
#include "hot.h"
#include "options.h"
#include "profile.h"
#include "profile_tables.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <string.h>

bool hm_profiling;
profile_tables_t hm_prof = { .lock = PTHREAD_MUTEX_INITIALIZER, .err_fd = -1 };

static __thread uint64_t rng;     /* 0 until the thread first takes a heap (profile_heap_taken) */
__thread bool hm_prof_busy;
static __thread bool in_tables;   /* this thread takes or holds the lock */
#define DEFERRED 16
static __thread uintptr_t deferred[DEFERRED];   /* sampled blocks a signal handler freed meanwhile */
static __thread _Atomic unsigned ndeferred;

/* ---- numbers: no libm (hakmem depends on libc alone) ---------------------- */

/* 1/k, for the series below: multiplications, where divisions would each
 * take tens of cycles. */
static const double inv[24] = { 0, 1, 1.0 / 2, 1.0 / 3, 1.0 / 4, 1.0 / 5, 1.0 / 6, 1.0 / 7, 1.0 / 8,
                                1.0 / 9, 1.0 / 10, 1.0 / 11, 1.0 / 12, 1.0 / 13, 1.0 / 14, 1.0 / 15, 1.0 / 16,
                                1.0 / 17, 1.0 / 18, 1.0 / 19, 1.0 / 20, 1.0 / 21, 1.0 / 22, 1.0 / 23 };

/* ln x for a normal x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)) (from
 * the bits of x), ln m = 2 atanh(z) = 2 (z + z^3/3 + z^5/5 + ...) for z =
 * (m-1)/(m+1), |z| < 0.172: twelve terms reach double precision. */
static double ln(double x) {
  union { double d; uint64_t u; } v = { .d = x };
  int e = (int)((v.u >> 52) & 0x7ff) - 1023;
  v.u = (v.u & ((1ull << 52) - 1)) | (1023ull << 52);
  double m = v.d;
  if (m > 1.4142135623730951) { m *= 0.5; e++; }
  double z = (m - 1) / (m + 1), z2 = z * z, sum = 0;
  #pragma GCC unroll 12
  for (int k = 23; k >= 1; k -= 2) sum = sum * z2 + inv[k];
  return 2 * z * sum + e * 0.69314718055994530942;
}

/* 1 - exp(-x) for x >= 0, to double precision for small x too: x halved
 * to at most 1/2, where 1 - exp(-x) = x (1 - x/2 (1 - x/3 (1 - ...))) to
 * fifteen terms, then doubled back by 1 - exp(-2x) = a (2 - a) for a = 1 -
 * exp(-x), which loses nothing to cancellation. */
static double one_minus_exp_neg(double x) {
  if (x > 40) return 1;
  int halvings = 0;
  while (x > 0.5) { x *= 0.5; halvings++; }
  double p = 1;
  #pragma GCC unroll 14
  for (int k = 15; k >= 2; k--) p = 1 - x * inv[k] * p;
  double a = x * p;
  while (halvings--) a *= 2 - a;
  return a;
}

static uint64_t next_random(void) {        /* xorshift64* */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545F4914F6CDD1DULL;
}

/* Bytes to the next sample point: exponential, mean rate. */
static int64_t draw(void) {
  double u = ((double)(next_random() >> 11) + 0.5) / 9007199254740992.0;   /* (0, 1) */
  double d = -ln(u) * (double)hm_prof.rate;
  return d < 1 ? 1 : d > 4e18 ? (int64_t)4e18 : (int64_t)d;
}

/* ---- the lock ------------------------------------------------------------------- */

static void end_sample_of(uintptr_t p);

void profile_lock(void) {
  in_tables = true;
  atomic_signal_fence(memory_order_seq_cst);
  pthread_mutex_lock(&hm_prof.lock);
}

/* The blocks a signal handler freed while this thread held the lock, taken
 * out of the tables now, with signals blocked (so that no handler adds one
 * meanwhile): rare. */
static HM_NOINLINE void end_deferred(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_mutex_lock(&hm_prof.lock);
  unsigned n = atomic_load_explicit(&ndeferred, memory_order_relaxed);
  for (unsigned i = 0; i < n && i < DEFERRED; i++) end_sample_of(deferred[i]);
  atomic_store_explicit(&ndeferred, 0, memory_order_relaxed);
  pthread_mutex_unlock(&hm_prof.lock);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void profile_unlock(void) {
  pthread_mutex_unlock(&hm_prof.lock);
  atomic_signal_fence(memory_order_seq_cst);
  in_tables = false;
  atomic_signal_fence(memory_order_seq_cst);
  if (unlikely(atomic_load_explicit(&ndeferred, memory_order_relaxed))) end_deferred();
}

/* ---- the tables -------------------------------------------------------------- */

/* The trace of frames pc[0..n) (leaf first), made if new; the overflow
 * entry 0 when the tables are full.  (locked) */
static uint32_t trace_of(uintptr_t *pc, uint32_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint32_t i = 0; i < n; i++) h = (h ^ pc[i]) * 0x100000001b3ULL;
  uint32_t mask = 2 * STACKS - 1;
  for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
    uint32_t t = hm_prof.index[i];
    if (t == 0) {
      if (hm_prof.ntraces >= STACKS || hm_prof.npool + n > FRAME_POOL) return 0;
      trace_t *tr = &hm_prof.traces[hm_prof.ntraces];
      tr->hash = h;
      tr->first = hm_prof.npool;
      tr->depth = n;
      memcpy(&hm_prof.pool[hm_prof.npool], pc, n * sizeof *pc);
      hm_prof.npool += n;
      hm_prof.index[i] = ++hm_prof.ntraces;
      return hm_prof.ntraces - 1;
    }
    trace_t *tr = &hm_prof.traces[t - 1];
    if (tr->hash == h && tr->depth == n && !memcmp(&hm_prof.pool[tr->first], pc, n * sizeof *pc)) return t - 1;
  }
}

/* Live samples: linear probing, deletion by shifting back (no tombstones).
 * The slot of p, or the empty one where it goes. */
static sample_t *sample_slot(uintptr_t p) {
  uint32_t mask = 2 * SAMPLES - 1;
  for (uint32_t i = (uint32_t)hash_ptr(p) & mask;; i = (i + 1) & mask)
    if (hm_prof.samples[i].p == p || hm_prof.samples[i].p == 0) return &hm_prof.samples[i];
}

static void sample_delete(sample_t *s) {
  uint32_t mask = 2 * SAMPLES - 1, i = (uint32_t)(s - hm_prof.samples), j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (hm_prof.samples[j].p == 0) break;
    uint32_t home = (uint32_t)hash_ptr(hm_prof.samples[j].p) & mask;
    /* j's entry may move to the hole at i if its home is not in (i, j] */
    if ((i <= j) ? (home <= i || home > j) : (home <= i && home > j)) {
      hm_prof.samples[i] = hm_prof.samples[j];
      i = j;
    }
  }
  hm_prof.samples[i].p = 0;
}

/* ---- pages holding samples ----------------------------------------------------
 * The pages are not slow (hm_page_flags has no PAGE_SLOW), so frees take
 * their fast path, but for a page holding a live sample: its owner sets
 * PAGE_SLOW on it when it samples one of its blocks, and clears it when a
 * free of its own there finds no sample left on the page: when the count of
 * live samples on the pages of its hash is 0 (a page sharing its hash stays
 * marked a little longer).  Only the owner samples on a page, so no sample
 * arrives there while it looks.  Other threads' frees take the slow path
 * on a marked page only (hot.h): the mark is set before the sampled block's
 * malloc returns, so before any thread can free it.  The pages of a
 * first-class heap (whose blocks no thread owns) and of a large block are
 * slow from the start (page_start_flags), huge
 * blocks always take the slow path, and so does every page when the calls
 * are counted (stats, secure: hm_page_flags). */

/* The page of a size class block p if pages are marked, or NULL. */
static page_t *class_page(const void *p) {
  if (hm_page_flags & PAGE_SLOW) return NULL;
  segment_t *s = segment_checked(p);
  if (!s) return NULL;
  page_t *pg = page_of(s, p);
  return pg->cls < CLASSES ? pg : NULL;
}

static _Atomic uint32_t *page_filter_of(const page_t *pg) { return &hm_prof.page_filter[(hash_ptr((uintptr_t)pg) >> 20) & (FILTER - 1)]; }

/* The owner, this thread, marks pg slow or not (not locked: the heap's lock
 * is taken alone). */
static void page_mark(page_t *pg, bool slow) {
  heap_t *h = hm_tls_heap;
  heap_enter(h);
  if (atomic_load_explicit(&pg->heap, memory_order_relaxed) == h)
    page_set_flags(pg, slow ? pg->flags | PAGE_SLOW : pg->flags & (uint8_t)~PAGE_SLOW);
  heap_leave(h);
}

/* A block's count: its address over 16, with a hash of its 4 KiB page's
 * number mixed in.  Blocks freed one after another mostly lie near each
 * other (a sweep, a list's nodes, a page's blocks), and a 4 KiB page's
 * blocks have their counts side by side, on 16 cache lines; by a hash of
 * the whole address, each free on a marked page missed the cache for its
 * count.  The hash spreads the pages, and with them blocks aligned to 4 KiB
 * or more, over the whole filter.  Blocks sharing a count make a false
 * hit, which looks in the tables (end_freed). */
static _Atomic uint32_t *filter_of(uintptr_t p) {
  return &hm_prof.filter[((p >> 4) ^ (hash_ptr(p >> 12) >> 20)) & (FILTER - 1)];
}

/* The live heap grew 1/64 past the last copy: copy it as the peak's. */
static void peak_check(void) {
  if (hm_prof.live <= hm_prof.peak_copied + hm_prof.peak_copied / 64) return;
  hm_prof.peak_copied = hm_prof.live;
  for (uint32_t t = 0; t < hm_prof.ntraces; t++) {
    hm_prof.traces[t].peak_bytes = hm_prof.traces[t].live_bytes;
    hm_prof.traces[t].peak_count = hm_prof.traces[t].live_count;
  }
}

/* ---- sampling ----------------------------------------------------------------- */

/* Where hakmem's code is, when it is a shared library: its frames are cut
 * from the top of each stack.  And backtrace's first use, which loads
 * libgcc_s.  Once, on the first sample (busy: what they allocate is not
 * sampled). */
static int self_range(struct dl_phdr_info *info, size_t size, void *arg) {
  uintptr_t bias = *(uintptr_t *)arg;
  if (info->dlpi_addr != bias) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      hm_prof.self_lo = bias + ph->p_vaddr;
      hm_prof.self_hi = hm_prof.self_lo + ph->p_memsz;
    }
  }
  return 1;
}

static void warm_up(void) {
  Dl_info info;
  struct link_map *map = NULL;
  if (dladdr1((void *)warm_up, &info, (void **)&map, RTLD_DL_LINKMAP) && map && map->l_name && map->l_name[0]) {
    uintptr_t bias = map->l_addr;
    dl_iterate_phdr(self_range, &bias);
  }
  void *pc[4];
  backtrace(pc, 4);
}

static pthread_once_t warm_once = PTHREAD_ONCE_INIT;

/* The countdown to a thread's next sample point is its heap's (prof_until:
 * no TLS access on profile_malloc's path), drawn afresh whenever a thread
 * takes a heap, its first or one another thread left: the process is
 * memoryless, so a fresh draw at any moment keeps the odds of every
 * allocation as they were.  (heap_get, and the child of a fork) */
void profile_heap_taken(heap_t *h) {
  if (!rng) rng = (hash_ptr((uintptr_t)&rng) ^ os_random()) | 1;
  h->prof_until = (uint64_t)draw();
}

/* The allocation p of n bytes took the countdown of h, its thread's heap,
 * past its sample point: p, sampled.  Not sampled while the thread samples,
 * dumps or holds the lock (a signal handler's allocation then): the next
 * point is drawn from there, as the process is memoryless, so the other
 * allocations' odds stay as they were. */
static HM_NOINLINE void *sample_due(heap_t *h, void *p, size_t n) {
  if (unlikely(atomic_load_explicit(&hm_prof_dump_wanted, memory_order_relaxed)) && !hm_prof_busy && !in_tables)
    profile_dump_pending();
  hm_assert(rng != 0);                      /* (profile_heap_taken came first) */
  h->prof_until = (uint64_t)draw();
  if (hm_prof_busy || in_tables) return p;
  hm_prof_busy = true;
  pthread_once(&warm_once, warm_up);
  void *raw[FRAMES + 16];
  int got = profile_stack(raw, FRAMES + 16);
  int skip = 1;                             /* sample_due itself */
  if (hm_prof.self_hi)
    while (skip < got && (uintptr_t)raw[skip] >= hm_prof.self_lo && (uintptr_t)raw[skip] < hm_prof.self_hi) skip++;
  uint32_t depth = got > skip ? (uint32_t)(got - skip) : 0;
  if (depth > FRAMES) {                     /* the innermost, and a mark for the rest */
    depth = FRAMES + 1;
    raw[skip + FRAMES] = NULL;
  }
  uint64_t weight = (uint64_t)((double)n / one_minus_exp_neg((double)n / (double)hm_prof.rate) + 0.5);

  page_t *pg = class_page(p);
  bool mark = false;
  profile_lock();
  sample_t *s = hm_prof.nsamples < SAMPLES ? sample_slot((uintptr_t)p) : NULL;
  if (s && s->p == 0) {
    uint32_t t = trace_of((uintptr_t *)&raw[skip], depth);
    trace_t *tr = &hm_prof.traces[t];
    tr->alloc_bytes += weight;
    tr->alloc_count++;
    tr->live_bytes += weight;
    tr->live_count++;
    s->p = (uintptr_t)p;
    s->trace = t;
    s->on_page = pg != NULL;
    s->weight = weight;
    hm_prof.nsamples++;
    atomic_fetch_add_explicit(filter_of((uintptr_t)p), 1, memory_order_relaxed);
    hm_prof.live += weight;
    peak_check();
    if (pg) atomic_fetch_add_explicit(page_filter_of(pg), 1, memory_order_relaxed);
    mark = pg && !(pg->flags & PAGE_SLOW);
  } else {
    hm_prof.dropped++;
  }
  profile_unlock();
  if (mark) page_mark(pg, true);
  hm_prof_busy = false;
  return p;
}

static HM_NOINLINE void *take_sampled(heap_t *h, list_t *l, block_t *b, size_t n) {
  return sample_due(h, hm_list_take(l, b), n);
}

/* malloc's fast path missed: count the bytes down, and pop what it would
 * have popped (the pop last: no frame to keep anything across it). */
void *profile_malloc(heap_t *h, size_t n, size_t c) {
  list_t *l;
  block_t *b;
  if (unlikely(!(b = (block_t *)list_head(l = atomic_load_explicit(HM_ELEM(h, current, c), memory_order_acquire)))))
    return heap_malloc_slow(h, n, c);          /* (CLASS_LARGE's list: the empty page) */
  if (unlikely(__builtin_sub_overflow(h->prof_until, n, &h->prof_until))) return take_sampled(h, l, b, n);
  return hm_list_take(l, b);
}

/* A slow path allocated p for n bytes. */
void profile_alloc(void *p, size_t n) {
  if (unlikely(atomic_load_explicit(&hm_prof_dump_wanted, memory_order_relaxed)) && !hm_prof_busy && !in_tables)
    profile_dump_pending();
  heap_t *h = heap_get();                   /* (the thread's: p may be a first-class heap's) */
  if (h && unlikely(__builtin_sub_overflow(h->prof_until, n, &h->prof_until))) sample_due(h, p, n);
}


/* The sampled block of s is freed: it leaves the live heap.  (locked; its
 * memory is still mapped) */
static void sample_end(sample_t *s) {
  trace_t *tr = &hm_prof.traces[s->trace];
  tr->live_bytes -= s->weight;
  tr->live_count--;
  hm_prof.live -= s->weight;
  hm_prof.nsamples--;
  atomic_fetch_sub_explicit(filter_of(s->p), 1, memory_order_relaxed);
  if (s->on_page) atomic_fetch_sub_explicit(page_filter_of(page_of(segment_of((void *)s->p), (void *)s->p)), 1, memory_order_relaxed);
  sample_delete(s);
}

static void end_sample_of(uintptr_t p) {
  sample_t *s = sample_slot(p);
  if (s->p == p) sample_end(s);
}

/* h, a first-class heap, is destroyed with every block it holds
 * (userheap.c): its samples end.  (No sampled block's memory goes while the
 * lock is held: its free waits for the lock before releasing it.) */
void profile_heap_destroyed(heap_t *h) {
  profile_lock();
  for (uint32_t i = 0; i < 2 * SAMPLES; i++) {
    for (;;) {                              /* (a deletion may move another entry here) */
      uintptr_t p = hm_prof.samples[i].p;
      if (!p) break;
      segment_t *s = segment_checked((void *)p);
      if (!s) s = segment_checked((void *)(p - SEG_SIZE));   /* a huge block aligned to SEG_SIZE */
      if (!s || s->heap != h) break;
      sample_end(&hm_prof.samples[i]);
    }
  }
  profile_unlock();
}

/* p of page pg (NULL: a huge block's, already moved) is freed.  It is
 * found in the tables only if its filter count is not 0: the count went up
 * before its malloc returned, so before this free.  The owner's free on a
 * page marked slow unmarks it once no sample is left there. */
static HM_NOINLINE void end_freed(uintptr_t p) {
  if (unlikely(in_tables)) {                /* a signal handler's, this thread holding the lock */
    unsigned k = atomic_fetch_add_explicit(&ndeferred, 1, memory_order_relaxed);
    if (k < DEFERRED) deferred[k] = p;
    else atomic_fetch_add_explicit(&hm_prof.lost, 1, memory_order_relaxed);
  } else {
    profile_lock();
    end_sample_of(p);
    profile_unlock();
  }
}
HM_INLINE bool maybe_sampled(const void *p) { return atomic_load_explicit(filter_of((uintptr_t)p), memory_order_relaxed) != 0; }
HM_INLINE bool page_has_samples(const page_t *pg) { return atomic_load_explicit(page_filter_of(pg), memory_order_relaxed) != 0; }

void profile_free(void *p, page_t *pg) {
  if (unlikely(maybe_sampled(p))) end_freed((uintptr_t)p);
  if (pg && !(hm_page_flags & PAGE_SLOW) && pg->cls < CLASSES &&
      atomic_load_explicit(&pg->heap, memory_order_relaxed) == hm_tls_heap && (pg->flags & PAGE_SLOW) &&
      !page_has_samples(pg))
    page_mark(pg, false);
}

/* free's slow path, p a block of pg (hm_lookup checked it): is it the
 * owner's free on a class page that is slow only because it holds samples
 * (its flags are PAGE_SLOW alone, and only the profiler sets that)?  Then
 * it is done here: the sample ends if p is one (the filter: one load), the
 * page is unmarked if it holds no sample any more, and p goes where free's
 * fast path would push it, without the heap's lock, on the list free's
 * slice_push entry names: its page, or for a class with a thread cache
 * the cache (the sink while the purger holds the caches: tcache.c), never
 * that page, which the purger may take while the owner runs
 * (page_set_local).  to_cache false (realloc's free) takes the lock for
 * such a class.  False for anything else, or a block that looks free (the
 * slow path confirms a double free, locked).  (The owner is tested first:
 * only the owner writes its pages' flags.) */
bool profile_free_local(void *p, page_t *pg, bool to_cache) {
  heap_t *h = hm_tls_heap;
  if (atomic_load_explicit(&pg->heap, memory_order_relaxed) != h || pg->flags != PAGE_SLOW || pg->cls >= CLASSES ||
      !atomic_load_explicit(&hm_malloc_profiled, memory_order_relaxed) || block_looks_free(pg, p))
    return false;
  if (tcache_fast(pg->cls) && !to_cache) return false;
  profile_free(p, pg);
  hm_owner_push(h, hm_push_target(p), pg, (block_t *)p);
  return true;
}

/* fork (heap.c): the lock is taken with the other global locks when other
 * threads may hold it (locked), so the child's tables are whole; unless
 * this thread holds it already (a fork in a signal handler), when the code
 * the handler interrupted lets it go, in the parent and in the child.  The
 * child draws its own sample points: with the parent's, every child of a
 * shell would sample the same allocation. */
void profile_fork_prepare(void) { if (hm_profiling && !in_tables) pthread_mutex_lock(&hm_prof.lock); }
void profile_fork_parent(void) { if (hm_profiling && !in_tables) pthread_mutex_unlock(&hm_prof.lock); }
void profile_fork_child(bool locked) {
  if (!hm_profiling) return;
  if (locked && !in_tables) pthread_mutex_unlock(&hm_prof.lock);
  rng = 0;
  if (hm_tls_heap != &hm_heap_empty) profile_heap_taken(hm_tls_heap);
}

/* ---- start and statistics ------------------------------------------------------ */

void profile_init(void) {
  const char *prefix = hm_options.profile;
  if (!prefix || !prefix[0]) return;
  if (strlen(prefix) >= sizeof hm_prof.prefix) {
    hm_warn("hakmem: warning: HAKMEM_PROFILE is longer than %zu characters; profiling is off\n", sizeof hm_prof.prefix - 1);
    return;
  }
  size_t size = STACKS * sizeof(trace_t) + 2 * STACKS * sizeof(uint32_t) + FRAME_POOL * sizeof(uintptr_t) +
                2 * SAMPLES * sizeof(sample_t) + 2 * FILTER * sizeof(uint32_t);
  uint8_t *m = os_map(size);
  if (!m) {
    hm_warn("hakmem: warning: no memory for the profiler's tables; profiling is off\n");
    return;
  }
  hm_prof.map_size = size;
  hm_prof.traces = (trace_t *)m;
  hm_prof.samples = (sample_t *)(m += STACKS * sizeof(trace_t));
  hm_prof.pool = (uintptr_t *)(m += 2 * SAMPLES * sizeof(sample_t));
  hm_prof.index = (uint32_t *)(m += FRAME_POOL * sizeof(uintptr_t));
  hm_prof.filter = (_Atomic uint32_t *)(m += 2 * STACKS * sizeof(uint32_t));
  hm_prof.page_filter = hm_prof.filter + FILTER;
  hm_prof.ntraces = 1;                            /* entry 0: stacks beyond the table */
  hm_prof.rate = hm_options.profile_rate;
  hm_prof.err_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  strcpy(hm_prof.prefix, prefix);
  if (hm_options.profile_signal) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = profile_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction((int)hm_options.profile_signal, &sa, NULL);
  }
  hm_profiling = true;
}

void profile_stats(int fd) {
  if (!hm_profiling) return;
  profile_lock();
  uint32_t samples = hm_prof.nsamples, traces = hm_prof.ntraces - 1, frames = hm_prof.npool;
  uint64_t dropped = hm_prof.dropped;
  profile_unlock();
  size_t used = traces * sizeof(trace_t) + frames * sizeof(uintptr_t) + samples * 2 * sizeof(sample_t);
  hm_print(fd, "  profile     %u sampled blocks live (%llu not sampled: table full), %u stacks of %u, %u frames, "
               "%llu of %llu walks by backtrace(); tables %.1f MiB mapped, %zu KiB of it in use\n",
           samples, (unsigned long long)dropped, traces, STACKS - 1, frames,
           (unsigned long long)atomic_load(&hm_prof.walks_slow), (unsigned long long)atomic_load(&hm_prof.walks),
           (double)hm_prof.map_size / (1 << 20), (used + 1023) / 1024);
}

