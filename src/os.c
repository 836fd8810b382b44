/* os.c — every mmap, munmap, mremap and madvise hakmem makes goes through here,
 * so the calls can be counted (stats) and reasoned about in one place; and
 * the other system calls it needs (membarrier, the clock, random bits). */
#include "internal.h"
#include "stats.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

size_t os_page_size(void) {
  static _Atomic size_t page;                 /* (any thread may be first: relaxed is enough) */
  size_t p = atomic_load_explicit(&page, memory_order_relaxed);
  if (!p) atomic_store_explicit(&page, p = (size_t)sysconf(_SC_PAGESIZE), memory_order_relaxed);
  return p;
}

static _Atomic int space_limited = -1;       /* os_space_limited; -1: to be read */

/* Anonymous read-write memory at addr (a hint, or exact with
 * MAP_FIXED_NOREPLACE in flags); NULL with mmap's errno on failure.  Not
 * MAP_NORESERVE: the kernel's overcommit check then refuses a request that
 * RAM and swap could never back (malloc fails with ENOMEM, as glibc's does). */
static void *map_at(void *addr, size_t size, int flags) {
  void *p = mmap(addr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  stat_os(STAT_OS_MMAP);
  if (p == MAP_FAILED) {
    if (errno == ENOMEM) atomic_store_explicit(&space_limited, -1, memory_order_relaxed);
    return NULL;
  }
  stat_add(STAT_MAPPED, size);
  return p;
}

void *os_map(size_t size) { return map_at(NULL, size, 0); }

void os_unmap(void *p, size_t size) {
  if (!p || !size) return;
  stat_os(STAT_OS_MUNMAP);
  if (munmap(p, size) == 0) stat_sub(STAT_MAPPED, size);
}

/* Aligned mappings are first asked for at a hint: an address in a region
 * ordinary mmaps do not reach, advanced by each mapping's size.  The region
 * starts at a random segment among HINT_STARTS from HINT_LO (2 to 34 TiB,
 * below the programs, libraries and stacks, and below where ordinary mmaps
 * go up from in the legacy layout) and is HINT_SPAN long, half the segment
 * map's window, which is centred on the first segment (internal.h): where a
 * process's segments lie has 23 random bits.  MAP_FIXED_NOREPLACE maps
 * exactly there or fails without mapping, so an aligned mapping costs one
 * mmap instead of mmap + munmaps.  A taken range (a huge block grown in
 * place, say) moves on to the next hint; four misses in a row, or a kernel
 * that treats the flag as a mere hint, turn hinting off for good.  A mapping
 * that does not fit in what is left of the region, or that the kernel
 * refuses for want of memory, is mapped (or refused) by the fallback. */
#define HINT_LO     ((uintptr_t)2 << 40)
#define HINT_STARTS ((uintptr_t)1 << 23)
#define HINT_SPAN   ((uintptr_t)SEGMAP_SIZE / 2 * SEG_SIZE)
#define HINT_TRIES  4
#define HINT_OFF (HM_ASAN || HM_TSAN)        /* the sanitizers own that range */
#define HINT_DONE UINTPTR_MAX
static _Atomic uintptr_t hint_start;         /* 0: not picked yet */
static _Atomic uintptr_t hint_next = HINT_OFF ? HINT_DONE : 0;   /* 0: not started */

/* The region's start, picked at the first call; 0 once hinting is off. */
uintptr_t os_hint_start(void) {
  uintptr_t h = atomic_load_explicit(&hint_next, memory_order_relaxed);
  if (h == 0) {
    uintptr_t start = HINT_LO + (uintptr_t)(os_random() % HINT_STARTS) * SEG_SIZE, none = 0;
    if (!atomic_compare_exchange_strong(&hint_start, &none, start)) start = none;
    atomic_compare_exchange_strong(&hint_next, &h, start);
    h = atomic_load_explicit(&hint_next, memory_order_relaxed);
  }
  return h == HINT_DONE ? 0 : atomic_load_explicit(&hint_start, memory_order_relaxed);
}

static void *map_hinted(size_t size, size_t align) {
  uintptr_t start = os_hint_start(), h = atomic_load_explicit(&hint_next, memory_order_relaxed);
  if (!start) return NULL;
  uintptr_t end = start + HINT_SPAN;
  size_t step = (size + align - 1) & ~(align - 1);
  if (step > HINT_SPAN) return NULL;
  int saved = errno;                         /* a refused hint is not the caller's error */
  for (int tries = 0; tries < HINT_TRIES; tries++) {
    do {
      if ((h & (align - 1)) || h > end - step) goto out;
    } while (!atomic_compare_exchange_weak(&hint_next, &h, h + step));
    void *p = map_at((void *)h, size, MAP_FIXED_NOREPLACE);
    if (p == (void *)h) {
      errno = saved;
      return p;
    }
    if (p) {                                 /* an old kernel: the flag was only a hint */
      os_unmap(p, size);
      break;
    }
    if (errno != EEXIST) {                   /* out of memory: the fallback says so, */
      uintptr_t next = h + step;             /* and the range is for the next mapping */
      atomic_compare_exchange_strong(&hint_next, &next, h);
      goto out;
    }
    h += step;
  }
  atomic_store_explicit(&hint_next, HINT_DONE, memory_order_relaxed);
out:
  errno = saved;
  return NULL;
}

/* Map size bytes aligned to align (a power of two >= the page size): at the
 * hint, else over-map and trim both ends, which leaves one mapping and costs
 * at most two munmaps. */
void *os_map_aligned(size_t size, size_t align) {
  if (size > SIZE_MAX - align) return NULL;
  uint8_t *p = map_hinted(size, align);
  if (p) return p;
  if (!(p = os_map(size + align))) return NULL;
  uint8_t *a = (uint8_t *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
  if (a > p) os_unmap(p, (size_t)(a - p));
  size_t tail = (size_t)(p + size + align - (a + size));
  if (tail) os_unmap(a + size, tail);
  return a;
}

/* Is the address space limited (RLIMIT_AS, ulimit -v)?  Read at the first
 * call, and again after a mapping was refused for want of memory (the
 * program may have set a limit since). */
bool os_space_limited(void) {
  int v = atomic_load_explicit(&space_limited, memory_order_relaxed);
  if (v < 0) {
    struct rlimit r;
    v = getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
    atomic_store_explicit(&space_limited, v, memory_order_relaxed);
  }
  return v;
}

/* Drop the contents of whole pages.  MADV_DONTNEED (not MADV_FREE) so that RSS
 * falls at once and the next touch sees zeroes, which calloc relies on. */
void os_purge(void *p, size_t size) {
  if (!size) return;
  stat_os(STAT_OS_MADVISE);
  if (madvise(p, size, MADV_DONTNEED) == 0) stat_add(STAT_PURGED, size);
}

/* Ask the kernel to back [p, p + size) with transparent huge pages, or not
 * (where THP is in "madvise" mode, as on Debian and Ubuntu, it does so only
 * when asked): a fault then maps 2 MiB at once, and the TLB holds 512 times
 * as much of the block.  For huge blocks and segments the program fills
 * (huge.c, segment.c); off again for a segment's half its decay found
 * mostly free. */
void os_hugepage(void *p, size_t size, bool on) {
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  stat_os(STAT_OS_MADVISE);
  madvise(p, size, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
}

/* A transparent huge page's size: what one entry of the level above the
 * pages' table maps (2 MiB with 4 KiB pages). */
size_t os_hugepage_size(void) { return OS_PAGE / sizeof(uint64_t) * OS_PAGE; }

/* How many OS pages of [p, p + size) (whole pages) are resident, in *pages;
 * false if the kernel cannot tell. */
bool os_resident(void *p, size_t size, size_t *pages) {
  unsigned char vec[1024];                     /* (1024 pages a call: free may run on a small stack) */
  uintptr_t at = (uintptr_t)p, end = at + size;
  *pages = 0;
  while (at < end) {
    size_t n = end - at < sizeof vec * OS_PAGE ? end - at : sizeof vec * OS_PAGE;
    if (mincore((void *)at, n, vec) != 0) return false;
    for (size_t i = 0; i < (n + OS_PAGE - 1) / OS_PAGE; i++) *pages += vec[i] & 1;
    at += n;
  }
  return true;
}

/* Make whole pages accessible again, or a guard that faults on any access
 * (secure mode).  A failure (e.g. vm.max_map_count reached) leaves them as
 * they were: an unguarded page still works. */
void os_protect(void *p, size_t size, bool access) {
  stat_os(STAT_OS_MPROTECT);
  mprotect(p, size, access ? PROT_READ | PROT_WRITE : PROT_NONE);
}

/* Move or resize a mapping; with fixed != NULL the result lands exactly there
 * (replacing what was mapped at fixed).  NULL on failure, old mapping intact. */
void *os_remap(void *old, size_t old_size, size_t new_size, void *fixed) {
  stat_os(STAT_OS_MREMAP);
  void *p = fixed ? mremap(old, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, fixed)
                  : mremap(old, old_size, new_size, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) return NULL;
  stat_add(STAT_MAPPED, new_size);
  stat_sub(STAT_MAPPED, old_size);
  return p;
}

bool os_resize_in_place(void *p, size_t old_size, size_t new_size) {
  stat_os(STAT_OS_MREMAP);
  if (mremap(p, old_size, new_size, 0) == MAP_FAILED) return false;
  stat_add(STAT_MAPPED, new_size);
  stat_sub(STAT_MAPPED, old_size);
  return true;
}

uint64_t os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The same clock as of its last tick (one read of memory, no rdtsc: 3 ns
 * against 20 here): whether a deadline may have come, tested on every big
 * malloc and free, before os_now_ms for the work and the next deadlines. */
uint64_t os_coarse_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t os_random(void) {
  uint64_t r = 0;
  int saved = errno;                         /* (malloc's callers keep theirs) */
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uintptr_t)&r ^ (uint64_t)getpid() << 32;
  }
  errno = saved;
  return r;
}

/* Expedited private membarrier (Linux 4.14 on) needs registering once; the
 * registration outlives fork. */
bool os_membarrier_init(void) {
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
         syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool os_membarrier(void) { return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0; }
