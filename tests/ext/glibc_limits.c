/* glibc_limits.c — allocation at the limits, after glibc's tst-malloc-too-large,
 * tst-malloc-thread-fail and tst-free-errno: requests no machine can meet fail
 * with ENOMEM from every function and leave errno and the other blocks alone;
 * when the address space runs out, every thread gets NULL (posix_memalign
 * ENOMEM) instead of a crash; free keeps errno even when the kernel refuses
 * it more mappings.  Each case runs in a child: they change its limits. */
#include "ext.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* Each function asked for size (with every alignment for the aligned ones)
 * must return NULL with ENOMEM; reports the first that does not. */
static const char *too_large(size_t size, size_t *bad_align) {
  void *p, *keep;
  *bad_align = 0;
#define MUST_FAIL(call, what)                                                    \
  do {                                                                          \
    free(malloc(16));                                                           \
    errno = 0;                                                                  \
    p = (call);                                                                 \
    if (p || errno != ENOMEM) { free(p); return what; }                         \
  } while (0)
  MUST_FAIL(malloc(size), "malloc");
  keep = malloc(16);
  MUST_FAIL(realloc(keep, size), "realloc");
  for (size_t n = 1; n <= 8 && size % n == 0; n *= 2) {
    MUST_FAIL(calloc(n, size / n), "calloc(n, size/n)");
    MUST_FAIL(calloc(size / n, n), "calloc(size/n, n)");
    MUST_FAIL(reallocarray(keep, n, size / n), "reallocarray");
  }
  free(keep);
  for (size_t align = 1; align; align <<= 1) {
    *bad_align = align;
    MUST_FAIL(memalign(align, size), "memalign");
    if (align % sizeof(void *) == 0) {
      p = NULL;
      if (posix_memalign(&p, align, size) != ENOMEM || p) return "posix_memalign";
    }
    if (size % align == 0) MUST_FAIL(aligned_alloc(align, size), "aligned_alloc");
  }
  *bad_align = 0;
  MUST_FAIL(valloc(size), "valloc");
  MUST_FAIL(pvalloc(size), "pvalloc");
  return NULL;
#undef MUST_FAIL
}

/* In the child: a note for the log, exit status 1. */
static int report(size_t size, const char *fn, size_t align) {
  printf("# %s of %#zx (alignment %zu) did not fail with ENOMEM\n", fn, size, align);
  return 1;
}

/* Sizes near SIZE_MAX, just above PTRDIFF_MAX, and every 2^50 step between,
 * with the address space limited to 2^50 as glibc's test does (sampled:
 * glibc walks all 2^14 values of each range). */
static int too_large_child(void *unused) {
  struct rlimit rl = {(1ULL << 50) - 1, (1ULL << 50) - 1};
  setrlimit(RLIMIT_AS, &rl);
  const char *fn;
  size_t align;
  for (size_t i = 0; i < (1u << 14); i += i < 64 ? 1 : 97) {
    if ((fn = too_large(SIZE_MAX - i, &align))) return report(SIZE_MAX - i, fn, align);
    if (i && (fn = too_large((size_t)PTRDIFF_MAX + i, &align))) return report((size_t)PTRDIFF_MAX + i, fn, align);
  }
  for (size_t msbs = (1u << 14) - 1; msbs >= 1; msbs -= msbs > 64 ? 61 : 1) {
    size_t sizes[2] = {(msbs << 50) | ((1ULL << 50) - 1), msbs << 50};
    for (int k = 0; k < 2; k++)
      if ((fn = too_large(sizes[k], &align))) return report(sizes[k], fn, align);
  }
  return 0;
}

TEST(tst_malloc_too_large) {
  ext_result_t r = ext_child(too_large_child, NULL, 60000);
  CHECKF(ext_exited(&r, 0), "child: %s (1: a request succeeded, see the note)", r.what);
}

static long meminfo_kib(const char *key) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[128];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0 && line[n] == ':') v = atol(line + n + 1);
  if (f) fclose(f);
  return v;
}

/* Blocks larger than the machine's memory and swap together, which the
 * kernel's overcommit heuristic refuses (glibc gets NULL, ENOMEM); a block
 * that cannot be backed must not be handed out (README: NULL for a request
 * too large to satisfy). */
static int beyond_memory_child(void *unused) {
  const char *fn;
  size_t align, total = ((size_t)meminfo_kib("MemTotal") + (size_t)meminfo_kib("SwapTotal")) << 10;
  for (size_t size = 2 * total; size <= (1ULL << 46); size *= 2)
    if ((fn = too_large(size, &align))) return report(size, fn, align);
  return 0;
}

TEST(malloc_beyond_memory) {
  FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
  int mode = -1;
  if (f) { if (fscanf(f, "%d", &mode) != 1) mode = -1; fclose(f); }
  if (mode == 1) { SKIP("vm.overcommit_memory is 1: the kernel grants any mapping"); return; }
  if (meminfo_kib("MemTotal") <= 0) { SKIP("no /proc/meminfo"); return; }
  ext_result_t r = ext_child(beyond_memory_child, NULL, 60000);
  CHECKF(ext_exited(&r, 0), "child: %s (1: a request succeeded, see the note)", r.what);
}

/* ---- tst-malloc-thread-fail: every thread allocates until NULL ------------- */

enum fn { F_MALLOC, F_REALLOC, F_CALLOC, F_VALLOC, F_PVALLOC, F_MEMALIGN, F_POSIX_MEMALIGN, F_ALIGNED_ALLOC, F_COUNT };
static const char *const fn_names[] = {"malloc", "realloc", "calloc", "valloc", "pvalloc", "memalign", "posix_memalign", "aligned_alloc"};
static struct { enum fn fn; size_t size, align; } job;
static pthread_barrier_t fail_start, fail_end;
static volatile int fail_error;    /* 1 misaligned, 2 not zeroed, 3 posix_memalign: bad errno */

static void *one(void) {
  void *p = NULL;
  size_t a = _Alignof(max_align_t), pg = (size_t)sysconf(_SC_PAGESIZE);
  switch (job.fn) {
    case F_MALLOC: p = malloc(job.size); break;
    case F_REALLOC: p = realloc(NULL, 16); if (p) { void *q = realloc(p, job.size); if (!q) free(p); p = q; } break;
    case F_CALLOC:
      p = calloc(1, job.size);
      if (p && !ext_zero(p, job.size)) fail_error = 2;
      break;
    case F_VALLOC: p = valloc(job.size); a = pg; break;
    case F_PVALLOC: p = pvalloc(job.size); a = pg; break;
    case F_MEMALIGN: p = memalign(job.align, job.size); a = job.align; break;
    case F_ALIGNED_ALLOC: p = aligned_alloc(job.align, job.size); a = job.align; break;
    case F_POSIX_MEMALIGN:
      a = job.align;
      errno = 0;
      if (posix_memalign(&p, job.align, job.size)) {
        if (errno != ENOMEM) fail_error = 3;
        p = NULL;
      }
      break;
    default: break;
  }
  if (((uintptr_t)p & (a - 1)) != 0) fail_error = 1;
  return p;
}

static void *exhaust(void *unused) {
  pthread_barrier_wait(&fail_start);
  void **head = NULL, **e;
  while ((e = one())) { *e = head; head = e; }
  pthread_barrier_wait(&fail_end);
  while (head) { e = *head; free(head); head = e; }
  return NULL;
}

static int exhaust_child(void *unused) {
  enum { THREADS = 8 };
  struct rlimit rl;
  getrlimit(RLIMIT_AS, &rl);
  rl.rlim_cur = 200u << 20;          /* as glibc's test */
  if (setrlimit(RLIMIT_AS, &rl)) return 10;
  pthread_attr_t small;
  pthread_attr_init(&small);
  pthread_attr_setstacksize(&small, 256 << 10);
  pthread_barrier_init(&fail_start, NULL, THREADS + 1);
  pthread_barrier_init(&fail_end, NULL, THREADS + 1);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], &small, exhaust, NULL)) return 11;
  exhaust(NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  return fail_error;
}

TEST(tst_malloc_thread_fail) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  const struct { size_t size, align; } params[] = {{144, 0}, {pg, 0}, {512, 128}, {pg, 128}, {17 * pg, 128}};
  for (size_t k = 0; k < sizeof params / sizeof params[0]; k++)
    for (enum fn f = 0; f < F_COUNT; f++) {
      bool aligned = f >= F_MEMALIGN;
      if (aligned != (params[k].align != 0)) continue;
      job.fn = f;
      job.size = params[k].size;
      job.align = params[k].align;
      ext_result_t r = ext_child(exhaust_child, NULL, 60000);
      CHECKF(ext_exited(&r, 0), "%s(size %zu, alignment %zu) until it fails, in 9 threads: %s "
             "(1 misaligned, 2 not zeroed, 3 posix_memalign left errno unset, 10/11 set-up)",
             fn_names[f], job.size, job.align, r.what);
    }
}

/* ---- tst-free-errno ----------------------------------------------------- */

static int get_errno(void) { return *(volatile int *)&errno; }

/* free keeps errno, also when the process has no mapping left to give (munmap
 * or mprotect of part of a mapping then fails with ENOMEM). */
static int free_errno_child(void *unused) {
  static const size_t sizes[] = {16, 1000, 40000, 300000, 5318153, 40u << 20};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *blocks[2][N];
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < N; i++) { blocks[k][i] = malloc(sizes[i]); if (!blocks[k][i]) return 2; memset(blocks[k][i], 1, sizes[i]); }
  errno = 1789;
  free(NULL);
  if (get_errno() != 1789) return 3;
  for (int i = 0; i < N; i++) { errno = 1789; free(blocks[0][i]); if (get_errno() != 1789) return 4; }
  /* use up the mappings: single pages of one file at offset 0 never merge */
  int fd = memfd_create("free-errno", 0);
  if (fd < 0 || ftruncate(fd, 4096)) return 5;
  int mapped = 0;
  while (mapped < 200000 && mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) != MAP_FAILED) mapped++;
  for (int i = 0; i < N; i++) { errno = 1789; free(blocks[1][i]); if (get_errno() != 1789) return 6; }
  /* and allocation in that state gives a block or NULL with ENOMEM */
  for (int i = 0; i < N; i++) {
    errno = 0;
    void *p = malloc(sizes[i]);
    if (!p && errno != ENOMEM) return 7;
    if (p) memset(p, 2, sizes[i]);
    errno = 1789;
    free(p);
    if (get_errno() != 1789) return 8;
  }
  return 0;
}

TEST(tst_free_errno) {
  ext_result_t r = ext_child(free_errno_child, NULL, 60000);
  CHECKF(ext_exited(&r, 0), "child: %s (3 free(NULL), 4 free, 6 free with no mapping left, 7 malloc's errno, 8 free after; 2/5 set-up)", r.what);
}

TEST_MAIN()
