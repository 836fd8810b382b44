/* stats.c — counters, the census-based report (HAKMEM_STATS=1 at exit,
 * malloc_stats()), and the figures behind mallinfo2, malloc_info and the
 * hakmem_stats_* API. */
#include "internal.h"
#include "options.h"
#include "profile.h"
#include "stats.h"
#include "hakmem.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Atomic int64_t hm_stat[STAT_COUNT];
_Atomic int64_t hm_stat_peak[STAT_COUNT];

static int64_t get(int i) { return atomic_load_explicit(&hm_stat[i], memory_order_relaxed); }
static int64_t peak(int i) { return atomic_load_explicit(&hm_stat_peak[i], memory_order_relaxed); }

/* ---- per-class counts (slow mode) ----------------------------------------- */

static struct { _Atomic int64_t allocs, frees, live, peak; } count[CLASSES + 2];

void stats_count_alloc(const void *p, size_t requested) {
  segment_t *s = segment_checked(p);
  if (!s) s = segment_checked((const uint8_t *)p - SEG_SIZE);   /* huge block aligned to SEG_SIZE */
  const page_t *pg = s->pages[1].cls == CLASS_HUGE ? &s->pages[1] : page_of(s, p);
  unsigned c = pg->cls;
  stat_count(STAT_REQUESTED, (int64_t)requested);
  atomic_fetch_add_explicit(&count[c].allocs, 1, memory_order_relaxed);
  int64_t live = atomic_fetch_add_explicit(&count[c].live, 1, memory_order_relaxed) + 1;
  int64_t pk = atomic_load_explicit(&count[c].peak, memory_order_relaxed);
  while (live > pk && !atomic_compare_exchange_weak_explicit(&count[c].peak, &pk, live,
                                                             memory_order_relaxed, memory_order_relaxed)) {}
}

void stats_count_free(const page_t *pg) {
  atomic_fetch_add_explicit(&count[pg->cls].frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&count[pg->cls].live, 1, memory_order_relaxed);
}

static int64_t cget(_Atomic int64_t *v) { return atomic_load_explicit(v, memory_order_relaxed); }

/* ---- the report ------------------------------------------------------------ */

/* The census of every segment (registry.c), less the blocks waiting in
 * thread caches: free, though used on their pages. */
static void census(census_t *c) {
  registry_census(c);
  uint64_t cached[CLASSES] = { 0 };
  tcache_census(cached);
  for (size_t k = TC_MIN; k < TC_MIN + TC_CLASSES; k++) {
    uint64_t n = cached[k] < c->cls[k].used ? cached[k] : c->cls[k].used;
    c->cls[k].used -= n;
    c->in_use -= n * class_size(k);
    c->thread_cached += n * class_size(k);
  }
}

/* The text of a /proc file, NUL-terminated, without allocating; false if
 * unreadable. */
static bool read_proc(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  return true;
}

/* The process's resident set; 0 if unreadable. */
static uint64_t process_rss(void) {
  char buf[128];
  unsigned long long size, rss;
  if (!read_proc("/proc/self/statm", buf, sizeof buf) || sscanf(buf, "%llu %llu", &size, &rss) != 2) return 0;
  return rss * OS_PAGE;
}

/* The process's memory in transparent huge pages (AnonHugePages of
 * smaps_rollup, Linux 4.14); 0 if unreadable. */
static uint64_t process_huge_pages(void) {
  char buf[2048];
  if (!read_proc("/proc/self/smaps_rollup", buf, sizeof buf)) return 0;
  const char *at = strstr(buf, "\nAnonHugePages:");
  unsigned long long kib;
  return at && sscanf(at + 1, "AnonHugePages: %llu kB", &kib) == 1 ? kib << 10 : 0;
}

static double mib(uint64_t b) { return (double)b / (1 << 20); }
static size_t kind_size(unsigned c) { return c < CLASSES ? class_size(c) : 0; }
static const char *kind_name(unsigned c, char *buf, size_t n) {
  if (c == CLASS_LARGE) return "large";
  if (c == CLASS_HUGE) return "huge";
  snprintf(buf, n, "%zu", kind_size(c));
  return buf;
}

static void stats_write(int fd) {
  census_t c;
  census(&c);
  int64_t mallocs = 0, frees = 0;
  uint64_t pages = 0;
  for (unsigned k = 0; k < CLASSES + 2; k++) {
    mallocs += cget(&count[k].allocs);
    frees += cget(&count[k].frees);
    pages += c.cls[k].pages;
  }
  hm_print(fd, "hakmem: statistics (pid %d)\n"
           "  memory      %.1f MiB in blocks in use, %.1f MiB in thread caches, %.1f MiB committed, %.1f MiB mapped (peak %.1f, cached %.1f); process RSS %.1f MiB, %.1f MiB in huge pages\n"
           "  returned    %.1f MiB purged in total\n"
           "  segments    %lld now, %lld peak; pages %llu; huge blocks %lld now, %lld peak, %lld cached\n"
           "  threads     %lld live, %lld peak; segments abandoned %lld, reclaimed %lld; %lld pages taken back from quiet threads\n"
           "  os calls    mmap %lld, munmap %lld, madvise %lld, mremap %lld, mprotect %lld\n",
           (int)getpid(), mib(c.in_use), mib(c.thread_cached), mib(c.committed), mib(c.mapped), mib((uint64_t)peak(STAT_MAPPED)),
           mib(c.cached), mib(process_rss()), mib(process_huge_pages()), mib((uint64_t)get(STAT_PURGED)),
           (long long)get(STAT_SEGMENTS), (long long)peak(STAT_SEGMENTS),
           (unsigned long long)pages,
           (long long)get(STAT_HUGE), (long long)peak(STAT_HUGE), (long long)get(STAT_HUGE_CACHED),
           (long long)get(STAT_THREADS), (long long)peak(STAT_THREADS),
           (long long)get(STAT_ABANDONED), (long long)get(STAT_RECLAIMED), (long long)get(STAT_TRIMMED),
           (long long)get(STAT_OS_MMAP), (long long)get(STAT_OS_MUNMAP),
           (long long)get(STAT_OS_MADVISE), (long long)get(STAT_OS_MREMAP), (long long)get(STAT_OS_MPROTECT));
  if (hm_counting) {
    int64_t hits = get(STAT_HITS), refills = get(STAT_REFILLS), tc_hits = get(STAT_TC_HITS), tc_all = tc_hits + get(STAT_TC_MISSES);
    hm_print(fd, "  calls       %lld mallocs, %lld frees; %.1f %% of 4-256 KiB mallocs served by the thread cache, "
             "and %.1f %% of the other class mallocs by the current page\n"
             "  remote      %lld frees of other threads' blocks, %lld taken back by their owners\n"
             "  requested   %.1f MiB in total\n",
             (long long)mallocs, (long long)frees, tc_all ? 100.0 * (double)tc_hits / (double)tc_all : 0.0,
             hits + refills ? 100.0 * (double)hits / (double)(hits + refills) : 100.0,
             (long long)get(STAT_REMOTE_SENT), (long long)get(STAT_REMOTE_RECEIVED),
             mib((uint64_t)get(STAT_REQUESTED)));
  }
  profile_stats(fd);
  hm_print(fd, "  %-8s %6s %12s %12s %10s %10s %10s\n", "class", "pages", "in use", "capacity",
           hm_counting ? "allocs" : "", hm_counting ? "frees" : "", hm_counting ? "peak" : "");
  for (unsigned k = 0; k < CLASSES + 2; k++) {
    char name[24];
    int64_t allocs = cget(&count[k].allocs);
    if (!c.cls[k].pages && !allocs) continue;
    if (hm_counting)
      hm_print(fd, "  %-8s %6llu %12llu %12llu %10lld %10lld %10lld\n", kind_name(k, name, sizeof name),
               (unsigned long long)c.cls[k].pages, (unsigned long long)c.cls[k].used,
               (unsigned long long)c.cls[k].capacity, (long long)allocs,
               (long long)cget(&count[k].frees), (long long)cget(&count[k].peak));
    else
      hm_print(fd, "  %-8s %6llu %12llu %12llu\n", kind_name(k, name, sizeof name),
               (unsigned long long)c.cls[k].pages, (unsigned long long)c.cls[k].used,
               (unsigned long long)c.cls[k].capacity);
  }
}

/* The report is written with cancellation off: open and write are
 * cancellation points, and a pending cancel must not cut it (it acts at the
 * thread's next cancellation point, as after glibc's malloc_stats). */
void stats_print(int fd) {
  int old;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  stats_write(fd);
  pthread_setcancelstate(old, NULL);
}

/* Programs may close stderr before exiting (coreutils do): the report goes to
 * a private duplicate taken when the options were read. */
int hm_stats_fd = -1;

__attribute__((destructor)) static void stats_at_exit(void) {
  if (options_stats()) stats_print(hm_stats_fd >= 0 ? hm_stats_fd : 2);
}

/* ---- the API ------------------------------------------------------------------ */

void hm_stats_get(hakmem_stats_t *st) {
  census_t c;
  census(&c);
  memset(st, 0, sizeof *st);
  st->in_use = c.in_use;
  st->committed = c.committed;
  st->mapped = c.mapped;
  st->peak_mapped = (size_t)peak(STAT_MAPPED);
  st->cached = c.cached;
  st->thread_cached = c.thread_cached;
  st->thread_cache_hits = (size_t)get(STAT_TC_HITS);
  st->thread_cache_misses = (size_t)get(STAT_TC_MISSES);
  st->purged = (size_t)get(STAT_PURGED);
  st->segments = c.segments;
  st->huge_blocks = c.cls[CLASS_HUGE].used;
  st->threads = (size_t)get(STAT_THREADS);
  st->mmap_calls = (size_t)get(STAT_OS_MMAP);
  st->munmap_calls = (size_t)get(STAT_OS_MUNMAP);
  st->madvise_calls = (size_t)get(STAT_OS_MADVISE);
  st->mremap_calls = (size_t)get(STAT_OS_MREMAP);
  st->mprotect_calls = (size_t)get(STAT_OS_MPROTECT);
  for (unsigned k = 0; k < CLASSES + 2; k++) {
    st->mallocs += (size_t)cget(&count[k].allocs);
    st->frees += (size_t)cget(&count[k].frees);
  }
  st->requested = (size_t)get(STAT_REQUESTED);
  st->remote_frees = (size_t)get(STAT_REMOTE_SENT);
  st->huge_page_resident = (size_t)process_huge_pages();
}

int hm_stats_class(unsigned k, hakmem_class_stats_t *out) {
  if (k >= CLASSES + 2) return -1;
  census_t c;
  census(&c);
  memset(out, 0, sizeof *out);
  out->block_size = kind_size(k);
  out->pages = c.cls[k].pages;
  out->in_use = c.cls[k].used;
  out->capacity = c.cls[k].capacity;
  out->mallocs = (size_t)cget(&count[k].allocs);
  out->frees = (size_t)cget(&count[k].frees);
  out->peak = (size_t)cget(&count[k].peak);
  return 0;
}

void hm_stats_print(int fd) { stats_print(fd); }

/* glibc's view: the "arena" is hakmem's segments (and caches), the mmapped
 * regions its huge blocks; keepcost is what malloc_trim could return now. */
struct mallinfo2 hm_mallinfo2(void) {
  census_t c;
  census(&c);
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  uint64_t free_blocks = 0;
  for (unsigned k = 0; k < CLASSES; k++) free_blocks += c.cls[k].capacity - c.cls[k].used;
  mi.arena = c.mapped - c.huge_mapped;
  mi.ordblks = free_blocks;
  mi.hblks = c.cls[CLASS_HUGE].used;
  mi.hblkhd = c.huge_mapped;
  mi.uordblks = c.in_use - c.huge_bytes;
  mi.fordblks = mi.arena - mi.uordblks;
  mi.keepcost = c.purgeable;
  return mi;
}

static int clamp_int(size_t v) { return v > INT32_MAX ? INT32_MAX : (int)v; }

/* glibc's tuning parameters have no meaning here (hakmem has no arenas, no
 * top chunk, no mmap threshold): the known ones are accepted, as glibc
 * accepts them, and change nothing; an unknown one fails (0). */
int hm_mallopt(int param, int value) {
  (void)value;
  switch (param) {
  case M_MXFAST: case M_TRIM_THRESHOLD: case M_TOP_PAD: case M_MMAP_THRESHOLD: case M_MMAP_MAX:
  case M_CHECK_ACTION: case M_PERTURB: case M_ARENA_TEST: case M_ARENA_MAX:
    return 1;
  default:
    return 0;
  }
}

struct mallinfo hm_mallinfo(void) {
  struct mallinfo2 m = hm_mallinfo2();
  struct mallinfo mi = {
    .arena = clamp_int(m.arena), .ordblks = clamp_int(m.ordblks), .hblks = clamp_int(m.hblks),
    .hblkhd = clamp_int(m.hblkhd), .uordblks = clamp_int(m.uordblks), .fordblks = clamp_int(m.fordblks),
    .keepcost = clamp_int(m.keepcost),
  };
  return mi;
}

void hm_malloc_stats(void) { stats_print(STDERR_FILENO); }

/* glibc's XML layout, one <heap> for the whole process: the free blocks of
 * each class, then the totals.  (The census is taken before any output:
 * fprintf may allocate.) */
int hm_malloc_info(int options, FILE *fp) {
  if (options != 0 || !fp) return EINVAL;      /* (glibc's way: the error number, errno untouched) */
  census_t c;
  census(&c);
  uint64_t free_blocks = 0, free_bytes = 0;
  fprintf(fp, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
  for (unsigned k = 0; k < CLASSES; k++) {
    uint64_t n = c.cls[k].capacity - c.cls[k].used;
    if (!n) continue;
    size_t lo = k ? class_size(k - 1) + 1 : 1, hi = class_size(k);
    fprintf(fp, "<size from=\"%zu\" to=\"%zu\" total=\"%llu\" count=\"%llu\"/>\n", lo, hi,
            (unsigned long long)(n * hi), (unsigned long long)n);
    free_blocks += n;
    free_bytes += n * hi;
  }
  uint64_t arena = c.mapped - c.huge_mapped;
  fprintf(fp, "</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n"
          "<system type=\"current\" size=\"%llu\"/>\n<system type=\"max\" size=\"%llu\"/>\n"
          "<aspace type=\"total\" size=\"%llu\"/>\n<aspace type=\"mprotect\" size=\"%llu\"/>\n</heap>\n",
          (unsigned long long)free_blocks, (unsigned long long)free_bytes, (unsigned long long)c.committed,
          (unsigned long long)peak(STAT_MAPPED), (unsigned long long)arena, (unsigned long long)arena);
  fprintf(fp, "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n"
          "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n"
          "<system type=\"current\" size=\"%llu\"/>\n<system type=\"max\" size=\"%llu\"/>\n"
          "<aspace type=\"total\" size=\"%llu\"/>\n<aspace type=\"mprotect\" size=\"%llu\"/>\n</malloc>\n",
          (unsigned long long)free_blocks, (unsigned long long)free_bytes,
          (unsigned long long)c.cls[CLASS_HUGE].used, (unsigned long long)c.huge_mapped,
          (unsigned long long)c.committed, (unsigned long long)peak(STAT_MAPPED),
          (unsigned long long)c.mapped, (unsigned long long)c.mapped);
  return 0;
}

HM_EXPORT_HAKMEM(stats_get) HM_EXPORT_HAKMEM(stats_class) HM_EXPORT_HAKMEM(stats_print)
