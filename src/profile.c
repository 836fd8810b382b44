/* profile.c — the sampling heap profiler: HAKMEM_PROFILE=PREFIX.
 *
 * Sampling.  Allocated bytes are sampled as a Poisson process of rate one
 * per HAKMEM_PROFILE_RATE bytes (R): each thread counts down the bytes to its
 * next sample point, drawn from the exponential distribution of mean R, and
 * the allocation that crosses it is sampled.  An allocation of n bytes is
 * then sampled with probability 1 - exp(-n/R), so each sample stands for
 * n / (1 - exp(-n/R)) bytes: the sums of these weights are unbiased
 * estimates of the bytes allocated, and of those still live, per call stack
 * (the estimator of tcmalloc and jemalloc).
 *
 * Stacks.  A sample's stack is taken with glibc's backtrace(), which unwinds
 * with the DWARF call-frame information of libgcc_s: it needs no frame
 * pointers, and it reads the unwind tables through _dl_find_object, without
 * the loader's lock and without allocating.  Its first use dlopens libgcc_s
 * (which allocates); that happens on the first sample, with the thread marked
 * busy so that those allocations are not sampled, and no lock held.  Frames
 * of code without unwind information end the stack there (hand-written
 * assembly without CFI, JIT-compiled code, a binary built with
 * -fno-asynchronous-unwind-tables); inlined functions have no frame of their
 * own and appear as their caller.  The allocator's own frames are cut off at
 * the top when hakmem is a shared library (preloaded or linked with
 * -lhakmem); linked statically, hakmem's frames stay at the leaf end of each
 * stack.
 *
 * Tables, all in memory from os_map (never from malloc): distinct stacks,
 * deduplicated by hash (STACKS of them; more are counted under one overflow
 * entry), their frames, and the sampled blocks still live, by address
 * (SAMPLES; beyond, allocations are not sampled until some are freed).  A
 * free finds its block among them through a filter of counts by address
 * hash: one load for a block that was not sampled.  Frees reach the profiler
 * only on pages marked slow, those holding samples (below), and from other
 * threads; the rest keep their fast path.  One lock guards the
 * tables; signals are blocked while it is held, so a signal handler that
 * frees on the same thread cannot wait for it, and fork takes it
 * (profile_fork_*).
 *
 * Reports (profile_dump): live heap now, live heap at its peak (the stacks'
 * live bytes copied whenever the estimated live heap grows 1/64 past the
 * last copy, so within 1.6 % of the peak), everything allocated, and, at
 * exit, what is still live (leaks).  Each as folded stacks (PATH.KIND.folded:
 * "root;...;leaf bytes" lines, what flamegraph.pl, inferno and speedscope
 * read) and as a flame graph (PATH.KIND.svg); at exit the top call sites on
 * stderr.  Frames are named with dladdr (the dynamic symbol tables) at dump
 * time; one without a name is "OBJECT+0xADDRESS", for addr2line (tools/hakmem
 * run --profile does that).  Dumps are written at exit to
 * PREFIX.PID.{leaks,peak,alloc}, by hakmem_profile_dump(PATH) to
 * PATH.{live,peak,alloc}, and on HAKMEM_PROFILE_SIGNAL to
 * PREFIX.PID.N.{live,peak,alloc}: the handler only raises a flag, and the
 * thread's next allocation writes the dump (a handler may not take the
 * loader's lock that dladdr takes). */
#include "internal.h"
#include "options.h"
#include "profile.h"
#include "hakmem.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool hm_profiling;

#define FRAMES      128           /* frames kept per stack (the innermost) */
#define STACKS      (1u << 14)    /* distinct stacks (entry 0: the overflow) */
#define FRAME_POOL  (1u << 20)    /* frames of all stacks */
#define SAMPLES     (1u << 17)    /* sampled blocks live at once */
#define FILTER      (1u << 16)    /* counts of live samples by address hash */

typedef struct trace_s {
  uint64_t hash;
  uint32_t first, depth;          /* frames: pool[first .. first+depth), leaf first; a
                                     last frame 0 stands for the frames beyond FRAMES */
  uint64_t alloc_bytes, alloc_count;
  uint64_t live_bytes, live_count;
  uint64_t peak_bytes, peak_count;
} trace_t;

typedef struct sample_s {
  uintptr_t p;                    /* 0: empty slot */
  uint32_t trace;
  bool on_page;                   /* counted in its page's page_filter entry */
  uint64_t weight;
} sample_t;

static struct {
  pthread_mutex_t lock;
  trace_t *traces;                /* [STACKS] */
  uint32_t *index;                /* [2 * STACKS]: trace numbers + 1 by hash, 0 empty */
  uintptr_t *pool;                /* [FRAME_POOL] */
  sample_t *samples;              /* [2 * SAMPLES] by address */
  _Atomic uint32_t *page_filter;  /* [FILTER]: live samples on the pages of each page hash */
  _Atomic uint32_t *filter;       /* [FILTER] */
  size_t map_size;
  uint32_t ntraces, npool, nsamples;
  uint64_t live, peak_copied, dropped;   /* estimated bytes live, at the last peak copy */
  uintptr_t self_lo, self_hi;     /* hakmem's code, when a shared library */
  char prefix[256];
  long rate;
  int err_fd;                     /* stderr, taken at start: a program may close it before exit */
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .err_fd = -1 };

static __thread int64_t until;    /* bytes to this thread's next sample point */
static __thread uint64_t rng;     /* 0 until the thread's first draw */
static __thread bool busy;        /* sampling or dumping: allocations here are not sampled */
static _Atomic int dump_wanted;   /* HAKMEM_PROFILE_SIGNAL arrived */
static _Atomic unsigned dumps;

/* ---- numbers: no libm (hakmem depends on libc alone) ---------------------- */

/* ln x for x > 0: x = m 2^e with m in [1, 2), ln m = 2 atanh((m-1)/(m+1)). */
static double ln(double x) {
  int e = 0;
  while (x >= 2) { x /= 2; e++; }
  while (x < 1) { x *= 2; e--; }
  double z = (x - 1) / (x + 1), z2 = z * z, term = z, sum = 0;
  for (int k = 1; k < 40; k += 2) { sum += term / k; term *= z2; }
  return 2 * sum + e * 0.69314718055994530942;
}

/* 1 - exp(-x) for x >= 0, accurate for small x too. */
static double one_minus_exp_neg(double x) {
  if (x > 40) return 1;
  if (x < 1e-4) return x - x * x / 2 + x * x * x / 6;
  int halvings = 0;
  while (x > 0.5) { x /= 2; halvings++; }
  double term = 1, e = 1;                   /* exp(-x) by its series, then squared back */
  for (int k = 1; k < 20; k++) { term *= -x / k; e += term; }
  while (halvings--) e *= e;
  return 1 - e;
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
  double d = -ln(u) * (double)P.rate;
  return d < 1 ? 1 : d > 4e18 ? (int64_t)4e18 : (int64_t)d;
}

static uint64_t hash_ptr(uintptr_t p) {
  uint64_t h = (uint64_t)p * 0x9E3779B97F4A7C15ULL;
  return h ^ (h >> 29);
}

/* ---- the tables -------------------------------------------------------------- */

static sigset_t lock_all(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_mutex_lock(&P.lock);
  return old;
}

static void unlock_all(sigset_t old) {
  pthread_mutex_unlock(&P.lock);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The trace of frames pc[0..n) (leaf first), made if new; the overflow
 * entry 0 when the tables are full.  (locked) */
static uint32_t trace_of(uintptr_t *pc, uint32_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint32_t i = 0; i < n; i++) h = (h ^ pc[i]) * 0x100000001b3ULL;
  uint32_t mask = 2 * STACKS - 1;
  for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
    uint32_t t = P.index[i];
    if (t == 0) {
      if (P.ntraces >= STACKS || P.npool + n > FRAME_POOL) return 0;
      trace_t *tr = &P.traces[P.ntraces];
      tr->hash = h;
      tr->first = P.npool;
      tr->depth = n;
      memcpy(&P.pool[P.npool], pc, n * sizeof *pc);
      P.npool += n;
      P.index[i] = ++P.ntraces;
      return P.ntraces - 1;
    }
    trace_t *tr = &P.traces[t - 1];
    if (tr->hash == h && tr->depth == n && !memcmp(&P.pool[tr->first], pc, n * sizeof *pc)) return t - 1;
  }
}

/* Live samples: linear probing, deletion by shifting back (no tombstones).
 * The slot of p, or the empty one where it goes. */
static sample_t *sample_slot(uintptr_t p) {
  uint32_t mask = 2 * SAMPLES - 1;
  for (uint32_t i = (uint32_t)hash_ptr(p) & mask;; i = (i + 1) & mask)
    if (P.samples[i].p == p || P.samples[i].p == 0) return &P.samples[i];
}

static void sample_delete(sample_t *s) {
  uint32_t mask = 2 * SAMPLES - 1, i = (uint32_t)(s - P.samples), j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (P.samples[j].p == 0) break;
    uint32_t home = (uint32_t)hash_ptr(P.samples[j].p) & mask;
    /* j's entry may move to the hole at i if its home is not in (i, j] */
    if ((i <= j) ? (home <= i || home > j) : (home <= i && home > j)) {
      P.samples[i] = P.samples[j];
      i = j;
    }
  }
  P.samples[i].p = 0;
}

/* ---- pages holding samples ----------------------------------------------------
 * The pages are not slow (hm_page_flags has no PAGE_SLOW), so frees take
 * their fast path, but for a page holding a live sample: its owner sets
 * PAGE_SLOW on it when it samples one of its blocks, and clears it when a
 * free of its own there finds no sample left on the page: when the count of
 * live samples on the pages of its hash is 0 (a page sharing its hash stays
 * marked a little longer).  Only the owner samples on a page, so no sample
 * arrives there while it looks.  Other threads' frees take the slow path
 * anyway in slow mode.  Pages of one block (large,
 * huge) are always slow (their flags are never clear), and so is every
 * page when the calls are counted (stats, secure: hm_page_flags). */

/* The page of a size class block p if pages are marked, or NULL. */
static page_t *class_page(const void *p) {
  if (hm_page_flags & PAGE_SLOW) return NULL;
  segment_t *s = segment_checked(p);
  if (!s) return NULL;
  page_t *pg = page_of(s, p);
  return pg->cls < CLASSES ? pg : NULL;
}

static _Atomic uint32_t *page_filter_of(const page_t *pg) { return &P.page_filter[(hash_ptr((uintptr_t)pg) >> 20) & (FILTER - 1)]; }

/* The owner, this thread, marks pg slow or not (not locked: the heap's lock
 * is taken alone). */
static void page_mark(page_t *pg, bool slow) {
  heap_t *h = hm_tls_heap;
  heap_enter(h);
  if (atomic_load_explicit(&pg->heap, memory_order_relaxed) == h)
    page_set_flags(pg, slow ? pg->flags | PAGE_SLOW : pg->flags & (uint8_t)~PAGE_SLOW);
  heap_leave(h);
}

static _Atomic uint32_t *filter_of(uintptr_t p) { return &P.filter[(hash_ptr(p) >> 20) & (FILTER - 1)]; }

/* The live heap grew 1/64 past the last copy: copy it as the peak's. */
static void peak_check(void) {
  if (P.live <= P.peak_copied + P.peak_copied / 64) return;
  P.peak_copied = P.live;
  for (uint32_t t = 0; t < P.ntraces; t++) {
    P.traces[t].peak_bytes = P.traces[t].live_bytes;
    P.traces[t].peak_count = P.traces[t].live_count;
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
      P.self_lo = bias + ph->p_vaddr;
      P.self_hi = P.self_lo + ph->p_memsz;
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

static void sample(void *p, size_t n) {
  if (!rng) {                               /* the thread's first: draw its first point */
    rng = (hash_ptr((uintptr_t)&until) ^ os_random()) | 1;
    until += draw();
    if (until > 0) return;
  }
  until = draw();
  busy = true;
  pthread_once(&warm_once, warm_up);
  void *raw[FRAMES + 16];
  int got = backtrace(raw, FRAMES + 16);
  int skip = 1;                             /* sample() itself */
  if (P.self_hi)
    while (skip < got && (uintptr_t)raw[skip] >= P.self_lo && (uintptr_t)raw[skip] < P.self_hi) skip++;
  uint32_t depth = got > skip ? (uint32_t)(got - skip) : 0;
  if (depth > FRAMES) {                     /* the innermost, and a mark for the rest */
    depth = FRAMES + 1;
    raw[skip + FRAMES] = NULL;
  }
  uint64_t weight = (uint64_t)((double)n / one_minus_exp_neg((double)n / (double)P.rate) + 0.5);

  page_t *pg = class_page(p);
  bool mark = false;
  sigset_t old = lock_all();
  sample_t *s = P.nsamples < SAMPLES ? sample_slot((uintptr_t)p) : NULL;
  if (s && s->p == 0) {
    uint32_t t = trace_of((uintptr_t *)&raw[skip], depth);
    trace_t *tr = &P.traces[t];
    tr->alloc_bytes += weight;
    tr->alloc_count++;
    tr->live_bytes += weight;
    tr->live_count++;
    s->p = (uintptr_t)p;
    s->trace = t;
    s->on_page = pg != NULL;
    s->weight = weight;
    P.nsamples++;
    atomic_fetch_add_explicit(filter_of((uintptr_t)p), 1, memory_order_relaxed);
    P.live += weight;
    peak_check();
    if (pg) atomic_fetch_add_explicit(page_filter_of(pg), 1, memory_order_relaxed);
    mark = pg && !(pg->flags & PAGE_SLOW);
  } else {
    P.dropped++;
  }
  unlock_all(old);
  if (mark) page_mark(pg, true);
  busy = false;
}

static void dump_on_signal(void);

void profile_alloc(void *p, size_t n) {
  if (unlikely(atomic_load_explicit(&dump_wanted, memory_order_relaxed)) && !busy) dump_on_signal();
  if (likely((until -= (int64_t)n) > 0) || busy) return;
  sample(p, n);
}

/* The sampled block of s is freed: it leaves the live heap.  (locked; its
 * memory is still mapped) */
static void sample_end(sample_t *s) {
  trace_t *tr = &P.traces[s->trace];
  tr->live_bytes -= s->weight;
  tr->live_count--;
  P.live -= s->weight;
  P.nsamples--;
  atomic_fetch_sub_explicit(filter_of(s->p), 1, memory_order_relaxed);
  if (s->on_page) atomic_fetch_sub_explicit(page_filter_of(page_of(segment_of((void *)s->p), (void *)s->p)), 1, memory_order_relaxed);
  sample_delete(s);
}

/* h, a first-class heap, is destroyed with every block it holds
 * (userheap.c): its samples end.  (No sampled block's memory goes while the
 * lock is held: its free waits for the lock before releasing it.) */
void profile_heap_destroyed(heap_t *h) {
  sigset_t old = lock_all();
  for (uint32_t i = 0; i < 2 * SAMPLES; i++) {
    for (;;) {                              /* (a deletion may move another entry here) */
      uintptr_t p = P.samples[i].p;
      if (!p) break;
      segment_t *s = segment_checked((void *)p);
      if (!s) s = segment_checked((void *)(p - SEG_SIZE));   /* a huge block aligned to SEG_SIZE */
      if (!s || s->heap != h) break;
      sample_end(&P.samples[i]);
    }
  }
  unlock_all(old);
}

/* p of page pg (NULL: a huge block's, already moved) is freed.  It is
 * found in the tables only if its filter count is not 0: the count went up
 * before its malloc returned, so before this free.  The owner's free on a
 * page marked slow unmarks it once no sample is left there. */
void profile_free(void *p, page_t *pg) {
  if (unlikely(atomic_load_explicit(filter_of((uintptr_t)p), memory_order_relaxed) != 0)) {
    sigset_t old = lock_all();
    sample_t *s = sample_slot((uintptr_t)p);
    if (s->p == (uintptr_t)p) sample_end(s);
    unlock_all(old);
  }
  if (pg && !(hm_page_flags & PAGE_SLOW) && pg->cls < CLASSES &&
      atomic_load_explicit(&pg->heap, memory_order_relaxed) == hm_tls_heap && (pg->flags & PAGE_SLOW) &&
      atomic_load_explicit(page_filter_of(pg), memory_order_relaxed) == 0)
    page_mark(pg, false);
}

/* fork (heap.c): the lock is taken with the other global locks when other
 * threads may hold it (locked), so the child's tables are whole.  The child
 * draws its own sample points: with the parent's, every child of a shell
 * would sample the same allocation. */
void profile_fork_prepare(void) { if (hm_profiling) pthread_mutex_lock(&P.lock); }
void profile_fork_parent(void) { if (hm_profiling) pthread_mutex_unlock(&P.lock); }
void profile_fork_child(bool locked) {
  if (!hm_profiling) return;
  if (locked) pthread_mutex_unlock(&P.lock);
  rng = 0;
  until = 0;
}

/* ---- dumps ------------------------------------------------------------------
 * Written without malloc: the working memory is one mapping (an arena), the
 * output goes through a buffer to write(2).  The counts are copied under the
 * lock; frames of existing stacks never change, so they are read after. */

typedef struct arena_s { uint8_t *base; size_t used, size; } arena_t;

static void *take(arena_t *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (a->used + n > a->size) return NULL;
  void *p = a->base + a->used;
  a->used += n;
  return p;
}

typedef struct out_s { int fd; size_t n; bool bad; char buf[8192]; } out_t;

static void flush(out_t *o) {
  for (size_t done = 0; done < o->n;) {
    ssize_t w = write(o->fd, o->buf + done, o->n - done);
    if (w <= 0) { o->bad = true; break; }
    done += (size_t)w;
  }
  o->n = 0;
}

static void put(out_t *o, const char *s, size_t n) {
  while (n) {
    if (o->n == sizeof o->buf) flush(o);
    size_t k = sizeof o->buf - o->n < n ? sizeof o->buf - o->n : n;
    memcpy(o->buf + o->n, s, k);
    o->n += k;
    s += k;
    n -= k;
  }
}

static void puts_(out_t *o, const char *s) { put(o, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static void putf(out_t *o, const char *fmt, ...) {
  char b[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  if (n > 0) put(o, b, (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

/* Text in XML: the five characters that need it escaped. */
static void put_xml(out_t *o, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': puts_(o, "&amp;"); break;
    case '<': puts_(o, "&lt;"); break;
    case '>': puts_(o, "&gt;"); break;
    case '"': puts_(o, "&quot;"); break;
    case '\'': puts_(o, "&apos;"); break;
    default: put(o, s, 1);
    }
  }
}

enum { VIEW_LIVE, VIEW_PEAK, VIEW_ALLOC, VIEWS };

/* What a dump works on: per stack its frames as function numbers (root
 * first) and its three values; per function its name. */
typedef struct dump_s {
  arena_t a;
  uint32_t ntraces, nfuncs;
  uint32_t *depth, **funcs;       /* [ntraces] */
  uint64_t *value[VIEWS], *count[VIEWS];
  const char **name;              /* [nfuncs] */
  uint64_t dropped;
  char exe[256];
} dump_t;

/* The name of the function a return address pc is in: its dynamic symbol,
 * else OBJECT+0xADDRESS (the address as addr2line takes it).  dladdr names
 * the nearest symbol below an address, so the symbol's size is checked: a
 * static function after an exported one is not the exported one. */
static void frame_name(dump_t *d, uintptr_t pc, char *buf, size_t size) {
  Dl_info info;
  struct link_map *map = NULL;
  const ElfW(Sym) *sym = NULL;
  uintptr_t a = pc - 1;                     /* within the call, not after it */
  if (!dladdr1((void *)a, &info, (void **)&map, RTLD_DL_LINKMAP) || !map) {
    snprintf(buf, size, "0x%lx", (unsigned long)a);
  } else if (info.dli_sname && info.dli_saddr && dladdr1((void *)a, &info, (void **)&sym, RTLD_DL_SYMENT) && sym &&
             a < (uintptr_t)info.dli_saddr + sym->st_size) {
    snprintf(buf, size, "%s", info.dli_sname);
  } else {
    const char *obj = map->l_name && map->l_name[0] ? map->l_name : d->exe;   /* (the program: its path) */
    snprintf(buf, size, "%s+0x%lx", obj, (unsigned long)(a - map->l_addr));
  }
  for (char *c = buf; *c; c++)
    if (*c == ';' || *c == '\n') *c = ':';
}

/* The number of the function named s, made if new (names: a hash table of
 * size entries). */
static bool intern(dump_t *d, uint32_t *by_name, uint32_t size, const char *s, uint32_t *f) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *c = s; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ULL;
  uint32_t j = (uint32_t)h & (size - 1);
  while (by_name[j] && strcmp(d->name[by_name[j] - 1], s)) j = (j + 1) & (size - 1);
  if (!by_name[j]) {
    char *copy = take(&d->a, strlen(s) + 1);
    if (!copy) return false;
    strcpy(copy, s);
    d->name[d->nfuncs++] = copy;
    by_name[j] = d->nfuncs;
  }
  *f = by_name[j] - 1;
  return true;
}

/* Function numbers for every frame: by address, then by name (two return
 * addresses in one function are one function). */
static bool symbolize(dump_t *d) {
  uint32_t frames = 0;
  for (uint32_t t = 0; t < d->ntraces; t++) frames += d->depth[t];
  uint32_t size = 64;
  while (size < 2 * frames) size <<= 1;
  uintptr_t *pcs = take(&d->a, size * sizeof *pcs);
  uint32_t *pc_func = take(&d->a, size * sizeof *pc_func);
  uint32_t *by_name = take(&d->a, size * sizeof *by_name);
  d->name = take(&d->a, (frames + 1) * sizeof *d->name);
  if (!pcs || !pc_func || !by_name || !d->name) return false;
  memset(pcs, 0, size * sizeof *pcs);
  memset(by_name, 0, size * sizeof *by_name);
  d->nfuncs = 0;
  for (uint32_t t = 0; t < d->ntraces; t++) {
    const uintptr_t *pc = &P.pool[P.traces[t].first];
    uint32_t n = d->depth[t];
    if (!(d->funcs[t] = take(&d->a, (n + 1) * sizeof(uint32_t)))) return false;
    for (uint32_t k = 0; k < n; k++) {
      uintptr_t x = pc[n - 1 - k];          /* root first */
      if (x == 0) {
        if (!intern(d, by_name, size, "[deeper frames]", &d->funcs[t][k])) return false;
        continue;
      }
      uint32_t i = (uint32_t)hash_ptr(x) & (size - 1);
      while (pcs[i] && pcs[i] != x) i = (i + 1) & (size - 1);
      if (!pcs[i]) {
        char buf[512];
        frame_name(d, x, buf, sizeof buf);
        if (!intern(d, by_name, size, buf, &pc_func[i])) return false;
        pcs[i] = x;
      }
      d->funcs[t][k] = pc_func[i];
    }
  }
  return true;
}

/* The stacks of one view as a tree: node 0 is the root, a node's value is
 * its stacks' bytes (its own and its callees'). */
typedef struct node_s { uint32_t func, child, sibling; uint64_t value; } node_t;

static node_t *tree(dump_t *d, int view) {
  uint32_t frames = 1;
  for (uint32_t t = 0; t < d->ntraces; t++) frames += d->depth[t];
  node_t *nodes = take(&d->a, frames * sizeof *nodes);
  if (!nodes) return NULL;
  memset(&nodes[0], 0, sizeof nodes[0]);
  uint32_t n = 1;
  for (uint32_t t = 0; t < d->ntraces; t++) {
    uint64_t v = d->value[view][t];
    if (!v) continue;
    uint32_t at = 0;
    nodes[0].value += v;
    for (uint32_t k = 0; k < d->depth[t]; k++) {
      uint32_t f = d->funcs[t][k], c = nodes[at].child;
      while (c && nodes[c].func != f) c = nodes[c].sibling;
      if (!c) {
        c = n++;
        nodes[c] = (node_t){ .func = f, .sibling = nodes[at].child };
        nodes[at].child = c;
      }
      nodes[c].value += v;
      at = c;
    }
  }
  return nodes;
}

static int open_out(out_t *o, const char *path, const char *view, const char *ext) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s.%s", path, view, ext);
  o->n = 0;
  o->bad = false;
  o->fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  return o->fd;
}

static bool close_out(out_t *o) {
  flush(o);
  return close(o->fd) == 0 && !o->bad;
}

/* Folded stacks: a line per stack with bytes of its own (self value). */
static void write_folded(out_t *o, dump_t *d, const node_t *nodes) {
  uint32_t path[FRAMES + 2], next[FRAMES + 2];
  int top = 0;
  path[0] = 0;
  next[0] = nodes[0].child;
  uint64_t self = nodes[0].value;
  for (uint32_t c = nodes[0].child; c; c = nodes[c].sibling) self -= nodes[c].value;
  if (self) putf(o, "[no stack] %llu\n", (unsigned long long)self);
  while (top >= 0) {
    uint32_t c = next[top];
    if (!c) { top--; continue; }
    next[top] = nodes[c].sibling;
    path[++top] = c;
    next[top] = nodes[c].child;
    self = nodes[c].value;
    for (uint32_t k = nodes[c].child; k; k = nodes[k].sibling) self -= nodes[k].value;
    if (!self) continue;
    for (int i = 1; i <= top; i++) {
      if (i > 1) put(o, ";", 1);
      puts_(o, d->name[nodes[path[i]].func]);
    }
    putf(o, " %llu\n", (unsigned long long)self);
  }
}

#define SVG_WIDTH 1200.0
#define SVG_ROW 16
#define SVG_TOP 40

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

/* One frame of a flame graph: a rect with its name, bytes and share on
 * hover, and a label clipped to it by a nested svg element.  A frame named
 * by address shows its object's file name without the directories. */
static void svg_frame(out_t *o, const char *name, uint64_t value, double total, double left, double y, double w) {
  uint32_t h = name_hash(name);
  const char *slash = strrchr(name, '/');
  if (name[0] == '/' && slash && strstr(slash, "+0x")) name = slash + 1;
  puts_(o, "<g><title>");
  put_xml(o, name);
  putf(o, " (%llu bytes, %.2f%%)</title><rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%d\" rx=\"2\" "
          "fill=\"rgb(%u,%u,%u)\"/>",
       (unsigned long long)value, total > 0 ? 100.0 * (double)value / total : 0.0, left, y, w, SVG_ROW - 1,
       200 + h % 55, 80 + (h >> 8) % 120, 40 + (h >> 16) % 50);
  if (w > 20) {
    putf(o, "<svg x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%d\"><text x=\"3\" y=\"11\">", left, y, w - 3, SVG_ROW);
    put_xml(o, name);
    puts_(o, "</text></svg>");
  }
  puts_(o, "</g>\n");
}

/* A flame graph: the root at the bottom, callees above their callers, each
 * frame as wide as its bytes.  Frames narrower than a tenth of a pixel are
 * left out. */
static void write_svg(out_t *o, dump_t *d, const node_t *nodes, const char *title) {
  uint32_t next[FRAMES + 2];
  double x[FRAMES + 2];
  int maxdepth = 0, top = 0;
  next[0] = nodes[0].child;
  while (top >= 0) {                        /* depth first, for the height */
    uint32_t c = next[top];
    if (!c) { top--; continue; }
    next[top] = nodes[c].sibling;
    next[++top] = nodes[c].child;
    if (top > maxdepth) maxdepth = top;
  }
  int height = SVG_TOP + (maxdepth + 1) * SVG_ROW + 30;
  double total = (double)nodes[0].value, scale = total > 0 ? (SVG_WIDTH - 20) / total : 0;
  putf(o, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
          "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\">\n"
          "<style>text { font-family: Verdana, sans-serif; font-size: 11px; fill: #000; } "
          "rect:hover { stroke: #000; stroke-width: 0.5; }</style>\n"
          "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f4ec\"/>\n"
          "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" style=\"font-size: 15px\">",
       (int)SVG_WIDTH, height, (int)SVG_WIDTH, height, (int)SVG_WIDTH / 2);
  put_xml(o, title);
  puts_(o, "</text>\n");
  if (total > 0) svg_frame(o, "all", nodes[0].value, total, 10, height - 30 - SVG_ROW, SVG_WIDTH - 20);
  top = 0;
  next[0] = nodes[0].child;
  x[0] = 10;
  while (top >= 0) {
    uint32_t c = next[top];
    if (!c) { top--; continue; }
    next[top] = nodes[c].sibling;
    double w = (double)nodes[c].value * scale, left = x[top];
    x[top] += w;
    if (w < 0.1) continue;
    svg_frame(o, d->name[nodes[c].func], nodes[c].value, total, left, height - 30 - (top + 2) * SVG_ROW, w);
    top++;                                  /* into the callees, from this frame's left edge */
    next[top] = nodes[c].child;
    x[top] = left;
  }
  puts_(o, "</svg>\n");
}

static const char *const view_name[VIEWS] = { "live", "peak", "alloc" };

/* The top call sites (the innermost frame of each stack) of one view. */
static void write_top(out_t *o, dump_t *d, int view, const char *what) {
  uint64_t *by = take(&d->a, (d->nfuncs + 1) * sizeof *by), *cnt = take(&d->a, (d->nfuncs + 1) * sizeof *cnt);
  if (!by || !cnt) return;
  memset(by, 0, (d->nfuncs + 1) * sizeof *by);
  memset(cnt, 0, (d->nfuncs + 1) * sizeof *cnt);
  uint64_t total = 0;
  for (uint32_t t = 0; t < d->ntraces; t++) {
    uint32_t f = d->depth[t] ? d->funcs[t][d->depth[t] - 1] : d->nfuncs;
    by[f] += d->value[view][t];
    cnt[f] += d->count[view][t];
    total += d->value[view][t];
  }
  putf(o, "  %s: %.1f MiB\n  %12s %6s %8s  %s\n", what, (double)total / (1 << 20), "bytes", "%", "samples", "call site");
  for (int row = 0; row < 10; row++) {
    uint32_t best = UINT32_MAX;
    for (uint32_t f = 0; f <= d->nfuncs; f++)
      if (by[f] && (best == UINT32_MAX || by[f] > by[best])) best = f;
    if (best == UINT32_MAX) break;
    putf(o, "  %12llu %5.1f%% %8llu  %s\n", (unsigned long long)by[best], 100.0 * (double)by[best] / (double)total,
         (unsigned long long)cnt[best], best < d->nfuncs ? d->name[best] : "[no stack]");
    by[best] = 0;
  }
}

#define ARENA ((size_t)256 << 20)     /* room for full tables; only what is used is touched */

/* Write PATH.{live or leaks,peak,alloc}.{folded,svg}; at exit, the top call
 * sites to stderr as well.  0, or -1 if a file could not be written. */
static int dump(const char *path, bool at_exit) {
  bool was_busy = busy;
  busy = true;
  dump_t *d = os_map(ARENA);
  int rc = -1;
  if (!d) goto out;
  d->a = (arena_t){ .base = (uint8_t *)d, .used = sizeof *d, .size = ARENA };
  ssize_t len = readlink("/proc/self/exe", d->exe, sizeof d->exe - 1);
  d->exe[len > 0 ? len : 0] = 0;
  sigset_t old = lock_all();
  uint32_t n = d->ntraces = P.ntraces;
  d->depth = take(&d->a, n * sizeof *d->depth);
  d->funcs = take(&d->a, n * sizeof *d->funcs);
  for (int v = 0; v < VIEWS; v++) {
    d->value[v] = take(&d->a, n * sizeof(uint64_t));
    d->count[v] = take(&d->a, n * sizeof(uint64_t));
  }
  if (d->count[VIEWS - 1]) {
    for (uint32_t t = 0; t < n; t++) {
      const trace_t *tr = &P.traces[t];
      d->depth[t] = tr->depth;
      d->value[VIEW_LIVE][t] = tr->live_bytes;
      d->count[VIEW_LIVE][t] = tr->live_count;
      d->value[VIEW_PEAK][t] = tr->peak_bytes;
      d->count[VIEW_PEAK][t] = tr->peak_count;
      d->value[VIEW_ALLOC][t] = tr->alloc_bytes;
      d->count[VIEW_ALLOC][t] = tr->alloc_count;
    }
  }
  d->dropped = P.dropped;
  unlock_all(old);
  if (!d->count[VIEWS - 1] || !symbolize(d)) goto unmap;
  rc = 0;
  size_t mark = d->a.used;
  for (int v = 0; v < VIEWS; v++) {
    d->a.used = mark;                       /* (each view's tree in the same room) */
    node_t *nodes = tree(d, v);
    const char *kind = v == VIEW_LIVE && at_exit ? "leaks" : view_name[v];
    char title[160];
    snprintf(title, sizeof title, "%s: %.1f MiB (hakmem heap profile, pid %d)",
             v == VIEW_LIVE ? (at_exit ? "live at exit (leaks)" : "live heap") : v == VIEW_PEAK ? "live heap at its peak" : "allocated in total",
             nodes ? (double)nodes[0].value / (1 << 20) : 0.0, (int)getpid());
    out_t *o = take(&d->a, sizeof *o);
    if (!nodes || !o) { rc = -1; break; }
    if (open_out(o, path, kind, "folded") < 0) { rc = -1; continue; }
    write_folded(o, d, nodes);
    if (!close_out(o)) rc = -1;
    if (open_out(o, path, kind, "svg") < 0) { rc = -1; continue; }
    write_svg(o, d, nodes, title);
    if (!close_out(o)) rc = -1;
  }
  if (at_exit) {
    out_t *o = take(&d->a, sizeof *o);
    if (o) {
      *o = (out_t){ .fd = P.err_fd >= 0 ? P.err_fd : 2 };
      putf(o, "hakmem: heap profile (pid %d; one sample per %ld bytes; %s.*.folded, .svg)\n", (int)getpid(), P.rate, path);
      write_top(o, d, VIEW_LIVE, "live at exit (leaks)");
      write_top(o, d, VIEW_PEAK, "live at the peak");
      write_top(o, d, VIEW_ALLOC, "allocated in total");
      if (d->dropped) putf(o, "  (%llu allocations not sampled: more than %u sampled blocks live)\n", (unsigned long long)d->dropped, SAMPLES);
      flush(o);
    }
  }
unmap:
  os_unmap(d, ARENA);
out:
  busy = was_busy;
  return rc;
}

static void dump_on_signal(void) {
  if (!atomic_exchange_explicit(&dump_wanted, 0, memory_order_relaxed)) return;
  char path[320];
  snprintf(path, sizeof path, "%s.%d.%u", P.prefix, (int)getpid(), atomic_fetch_add(&dumps, 1) + 1);
  dump(path, false);
}

/* (A program may ask before its first allocation: the options are read
 * first.) */
int hm_profile_dump(const char *path) {
  heap_process_ready();
  if (!hm_profiling || !path) return -1;
  return dump(path, false);
}

static void on_signal(int sig) { atomic_store_explicit(&dump_wanted, 1, memory_order_relaxed); }

/* At exit: a process that sampled nothing (a short child of a profiled
 * script) writes nothing. */
__attribute__((destructor)) static void profile_at_exit(void) {
  if (!hm_profiling || P.ntraces == 1) return;
  char path[320];
  snprintf(path, sizeof path, "%s.%d", P.prefix, (int)getpid());
  dump(path, true);
}

/* ---- start and statistics ------------------------------------------------------ */

void profile_init(void) {
  const char *prefix = hm_options.profile;
  if (!prefix || !prefix[0]) return;
  if (strlen(prefix) >= sizeof P.prefix) {
    hm_warn("hakmem: warning: HAKMEM_PROFILE is longer than %zu characters; profiling is off\n", sizeof P.prefix - 1);
    return;
  }
  size_t size = STACKS * sizeof(trace_t) + 2 * STACKS * sizeof(uint32_t) + FRAME_POOL * sizeof(uintptr_t) +
                2 * SAMPLES * sizeof(sample_t) + 2 * FILTER * sizeof(uint32_t);
  uint8_t *m = os_map(size);
  if (!m) {
    hm_warn("hakmem: warning: no memory for the profiler's tables; profiling is off\n");
    return;
  }
  P.map_size = size;
  P.traces = (trace_t *)m;
  P.samples = (sample_t *)(m += STACKS * sizeof(trace_t));
  P.pool = (uintptr_t *)(m += 2 * SAMPLES * sizeof(sample_t));
  P.index = (uint32_t *)(m += FRAME_POOL * sizeof(uintptr_t));
  P.filter = (_Atomic uint32_t *)(m += 2 * STACKS * sizeof(uint32_t));
  P.page_filter = P.filter + FILTER;
  P.ntraces = 1;                            /* entry 0: stacks beyond the table */
  P.rate = hm_options.profile_rate;
  P.err_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  strcpy(P.prefix, prefix);
  if (hm_options.profile_signal) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction((int)hm_options.profile_signal, &sa, NULL);
  }
  hm_profiling = true;
}

void profile_stats(int fd) {
  if (!hm_profiling) return;
  sigset_t old = lock_all();
  uint32_t samples = P.nsamples, traces = P.ntraces - 1, frames = P.npool;
  uint64_t dropped = P.dropped;
  unlock_all(old);
  size_t used = traces * sizeof(trace_t) + frames * sizeof(uintptr_t) + samples * 2 * sizeof(sample_t);
  hm_print(fd, "  profile     %u sampled blocks live (%llu not sampled: table full), %u stacks of %u, %u frames; "
               "tables %.1f MiB mapped, %zu KiB of it in use\n",
           samples, (unsigned long long)dropped, traces, STACKS - 1, frames, (double)P.map_size / (1 << 20),
           (used + 1023) / 1024);
}

HM_EXPORT_HAKMEM(profile_dump)
