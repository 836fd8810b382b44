/* The hardened mode (HAKMEM_SECURE=1; the program re-executes itself with it):
 * every invalid free of bad_free.h is still caught, and so are what only this
 * mode promises: an overwritten free-list link, a write to a freed block
 * (while it waits in the quarantine and after it left), an overflow into a
 * guard page, and a double free however long after the first free.  Blocks
 * of a fresh page come in random order, HAKMEM_SECURE=2 zeroes freed blocks,
 * each quarantined block leaves once when threads trim concurrently, and
 * canaries report a write past the requested size of a block, or before its
 * start, when it is freed (in both levels). */
#include "test.h"
#include "hakmem.h"
#include "bad_free.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>

TEST_ENV("HAKMEM_SECURE=1")

/* The quarantine holds 1024 blocks: this many frees push any block out. */
#define PUSH_OUT 1100
static void push_out_of_quarantine(void) {
  static void *v[PUSH_OUT];
  for (int i = 0; i < PUSH_OUT; i++) v[i] = hakmem_malloc(24);
  for (int i = 0; i < PUSH_OUT; i++) hakmem_free(v[i]);
}

static void expect_abort(void (*fn)(void), const char *what, const char *expect) {
  char msg[2048];
  int st = run_in_child(fn, msg, sizeof msg);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strncmp(msg, "hakmem: ", 8) == 0 && strstr(msg, expect),
         "%s: expected SIGABRT and \"hakmem: ...%s...\", got status %#x and \"%.200s\"", what, expect, st, msg);
}

TEST(invalid_frees_still_detected) { run_bad_cases(); }

/* ---- what only the hardened mode catches ------------------------------------ */

/* A freed block on its page's free list gets its link overwritten; the
 * allocation that would follow the link reports it instead. */
static void overwritten_link(void) {
  unsigned char *a = hakmem_malloc(48);
  hakmem_free(a);
  push_out_of_quarantine();          /* a is now on its page's free list */
  memset(a, 0x41, 8);                /* the link */
  for (int i = 0; i < 10000; i++) hakmem_malloc(48);
}
TEST(overwritten_free_list_link) { expect_abort(overwritten_link, "overwritten link", "corrupted free list"); }

static void write_in_quarantine(void) {
  unsigned char *a = hakmem_malloc(100);
  hakmem_free(a);
  a[50] = 1;                         /* use after free, while quarantined */
  push_out_of_quarantine();          /* checked when it leaves */
}
TEST(write_after_free_in_quarantine) { expect_abort(write_in_quarantine, "write in quarantine", "use after free"); }

static void write_after_release(void) {
  unsigned char *a = hakmem_malloc(100);
  hakmem_free(a);
  push_out_of_quarantine();          /* a is on its free list, unchecked since */
  a[60] = 1;                         /* use after free */
  for (int i = 0; i < 10000; i++) hakmem_malloc(100);   /* checked when handed out again */
}
TEST(write_after_free_detected_on_reuse) { expect_abort(write_after_release, "write after release", "use after free"); }

static void late_double_free(void) {
  void *a = hakmem_malloc(64);
  hakmem_free(a);
  push_out_of_quarantine();          /* released long ago: only the bitmap remembers */
  hakmem_free(a);
}
TEST(double_free_after_release) { expect_abort(late_double_free, "late double free", "double free"); }

/* ---- guard pages ---------------------------------------------------------------- */

static void overflow_large(void) {
  volatile unsigned char *p = hakmem_malloc(300000);
  size_t n = hakmem_malloc_usable_size((void *)p);
  memset((void *)p, 1, n);           /* all of it may be written */
  for (size_t i = n; i < n + (1 << 20); i++) p[i] = 1;   /* a linear overflow: through the canaries to the guard */
}
static void overflow_page(void) {
  /* The last block of a page of 4 KiB blocks ends at the page's guard. */
  unsigned char *top = NULL;
  for (int i = 0; i < 64; i++) {
    unsigned char *p = hakmem_malloc(4000);
    if (((uintptr_t)p + 4096) % 65536 == 65536 - 4096) { top = p; break; }
  }
  if (!top) _exit(3);
  memset(top, 1, 4096);
  top[4096] = 1;
}
TEST(overflow_into_guard_page_faults) {
  if (TEST_SANITIZER_BUILD) { NOTE("skipped: the sanitizer takes SIGSEGV"); return; }
  char msg[2048];
  int st = run_in_child(overflow_large, msg, sizeof msg);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "a write past a large block: status %#x", st);
  st = run_in_child(overflow_page, msg, sizeof msg);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "a write past a page's last block: status %#x", st);
}

/* ---- the quarantine under concurrent trims ------------------------------------ */

/* Threads allocate, check and free blocks of many sizes while each calls
 * malloc_trim, which empties its own quarantine and those of the others,
 * and short-lived threads exit (emptying theirs) meanwhile.  Every quarantined
 * block must leave exactly once: a block released twice is handed out twice,
 * and its second owner's writes are reported as writes to a freed block.  (A
 * plain run meets the race in a few runs of ten; ThreadSanitizer in each.) */
enum { TRIM_SLOTS = 256, TRIM_OPS = 20000, TRIM_THREADS = 6 };
static void *trim_worker(void *arg) {
  uint64_t r = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  unsigned char *slot[TRIM_SLOTS] = {0};
  size_t len[TRIM_SLOTS];
  int ops = (arg ? TRIM_OPS : TRIM_OPS / 20) / (test_sanitized() ? 4 : 1);
  for (int i = 0; i < ops; i++) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    size_t k = r % TRIM_SLOTS;
    if (slot[k]) {
      if (slot[k][0] != (unsigned char)k || slot[k][len[k] - 1] != (unsigned char)k) {
        fprintf(stderr, "block %p of %zu bytes was changed while in use\n", (void *)slot[k], len[k]);
        abort();
      }
      hakmem_free(slot[k]);
      slot[k] = NULL;
    } else {
      len[k] = 16 + (r >> 20) % 40000;
      slot[k] = hakmem_malloc(len[k]);
      if (slot[k]) memset(slot[k], (int)k, len[k]);
    }
    if (i % 97 == 0) hakmem_malloc_trim(0);
  }
  for (size_t k = 0; k < TRIM_SLOTS; k++) hakmem_free(slot[k]);
  return NULL;
}
static void trims_and_exits(void) {
  int rounds = test_sanitized() ? 1 : 3, exits = test_sanitized() ? 30 : 100;   /* (TSan: 20x slower) */
  for (int round = 0; round < rounds; round++) {
    pthread_t t[TRIM_THREADS];
    for (uintptr_t i = 0; i < TRIM_THREADS; i++)
      if (pthread_create(&t[i], NULL, trim_worker, (void *)(i + 1))) _exit(3);
    for (int i = 0; i < exits; i++) {                   /* threads that exit while the others trim */
      pthread_t e;
      if (pthread_create(&e, NULL, trim_worker, NULL) || pthread_join(e, NULL)) _exit(3);
    }
    for (int i = 0; i < TRIM_THREADS; i++) pthread_join(t[i], NULL);
  }
}
TEST(quarantine_under_concurrent_trims) {
  char msg[2048];
  int st = run_in_child(trims_and_exits, msg, sizeof msg);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0 && !msg[0], "status %#x, \"%.200s\"", st, msg);
}

/* ---- randomised order and zero-on-free --------------------------------------------- */

TEST(fresh_blocks_in_random_order) {
  enum { N = 64 };
  uintptr_t a[N];
  int inversions = 0;
  for (int i = 0; i < N; i++) a[i] = (uintptr_t)hakmem_malloc(208);   /* a class nothing else uses here */
  for (int i = 1; i < N; i++) inversions += a[i] < a[i - 1];
  NOTE("%d of %d consecutive allocations went down in address", inversions, N - 1);
  CHECKF(inversions >= 8, "only %d of %d consecutive allocations went down: not shuffled", inversions, N - 1);
  for (int i = 0; i < N; i++) hakmem_free((void *)a[i]);
}

/* Level 2, in a child re-executed with HAKMEM_SECURE=2: a freed block reads
 * as zero (past its first word) while it waits in the quarantine, and a
 * write anywhere in it, here 300 bytes in, is reported when it leaves. */
__attribute__((constructor)) static void level_2_probe(int argc, char **argv) {
  if (argc < 2) return;
  if (strcmp(argv[1], "--zero-probe") == 0) {
    unsigned char *p = hakmem_malloc(1000);
    memset(p, 0xab, 1000);
    hakmem_free(p);
    for (int i = 8; i < 1000; i++) if (p[i]) _exit(1);
    _exit(0);
  }
  if (strcmp(argv[1], "--write-probe") == 0) {
    unsigned char *p = hakmem_malloc(1024);
    hakmem_free(p);
    p[300] = 1;
    push_out_of_quarantine();
    _exit(0);
  }
}
/* A child re-executed with HAKMEM_SECURE=2 running probe (run_in_child: its
 * wait status and the first line of its stderr). */
static const char *level_2_probe_name;
static void exec_level_2(void) {
  char *argv[] = {"test_secure", (char *)level_2_probe_name, NULL};
  char *env[] = {"HAKMEM_SECURE=2", NULL};
  execve("/proc/self/exe", argv, env);
  _exit(2);
}
static int run_level_2(const char *probe, char *msg, size_t cap) {
  level_2_probe_name = probe;
  return run_in_child(exec_level_2, msg, cap);
}
TEST(level_2_zeroes_freed_blocks) {
  char msg[512];
  int st = run_level_2("--zero-probe", msg, sizeof msg);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a freed block was not zeroed (status %#x)", st);
}
TEST(level_2_checks_the_whole_block) {
  char msg[512];
  int st = run_level_2("--write-probe", msg, sizeof msg);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(msg, "use after free"),
         "a write 300 bytes into a freed 1 KiB block: expected SIGABRT and \"use after free\", got status %#x and \"%.200s\"",
         st, msg);
}

/* ---- canaries ------------------------------------------------------------------- */

/* A child re-executed with HAKMEM_SECURE=level runs
 *     test_secure --canary <how> <size> <offset>
 * it allocates size bytes and writes all of them, writes 16 bytes from
 * offset (past the end: offset >= size; before the start: offset < 0),
 * then frees the block (how: "free", "realloc" to twice the size, "remote":
 * freed by another thread, "sized": free_sized with its size, "first": of
 * 256 blocks the lowest, which is its page's first if the page is fresh),
 * and exits 0 if nothing stopped it. */
#define CANARY_SPAN 16
static void canary_probe(const char *how, size_t size, long off, size_t span) {
  unsigned char *v[256], *p = NULL;
  if (strcmp(how, "first") == 0) {
    for (int i = 0; i < 256; i++) {
      v[i] = hakmem_malloc(size);
      if (!p || v[i] < p) p = v[i];
    }
  } else {
    p = hakmem_malloc(size);
  }
  if (!p) _exit(4);
  memset(p, 0x5a, size);
  memset(p + off, 0x41, span);
  if (strcmp(how, "realloc") == 0) {
    p = hakmem_realloc(p, 2 * size);
  } else if (strcmp(how, "sized") == 0) {
    hakmem_free_sized(p, size);
  } else if (strcmp(how, "remote") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, (void *(*)(void *))hakmem_free, p) || pthread_join(t, NULL)) _exit(3);
  } else {
    hakmem_free(p);
  }
  _exit(0);
}
__attribute__((constructor)) static void canary_probe_args(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "--canary") == 0)
    canary_probe(argv[2], strtoul(argv[3], NULL, 10), strtol(argv[4], NULL, 10), strtoul(argv[5], NULL, 10));
}

static struct { const char *level, *how; size_t size; long off; size_t span; } canary_run;
static void exec_canary(void) {
  char size[32], off[32], span[32], env[32];
  snprintf(size, sizeof size, "%zu", canary_run.size);
  snprintf(off, sizeof off, "%ld", canary_run.off);
  snprintf(span, sizeof span, "%zu", canary_run.span);
  snprintf(env, sizeof env, "HAKMEM_SECURE=%s", canary_run.level);
  char *argv[] = {"test_secure", "--canary", (char *)canary_run.how, size, off, span, NULL};
  char *envp[] = {env, NULL};
  execve("/proc/self/exe", argv, envp);
  _exit(2);
}
/* Run the probe; its wait status, the first line of its stderr in msg. */
static int canary_child(const char *level, const char *how, size_t size, long off, size_t span, char *msg, size_t cap) {
  canary_run.level = level;
  canary_run.how = how;
  canary_run.size = size;
  canary_run.off = off;
  canary_run.span = span;
  return run_in_child(exec_canary, msg, cap);
}
/* The write must be reported: SIGABRT, "hakmem: <expect>...", and the
 * block's address in the message (checked by its "0x"). */
static void expect_canary(const char *level, const char *how, size_t size, long off, size_t span, const char *expect) {
  char msg[2048];
  int st = canary_child(level, how, size, off, span, msg, sizeof msg);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strncmp(msg, "hakmem: ", 8) == 0 && strstr(msg, expect) &&
         strstr(msg, "pointer 0x"),
         "HAKMEM_SECURE=%s, %s of a %zu-byte block after %zu bytes written at offset %ld: expected SIGABRT and "
         "\"hakmem: %s... pointer 0x...\", got status %#x and \"%.200s\"", level, how, size, span, off, expect, st, msg);
}

/* A 16 B, a 1 KiB, a medium (64 KiB) block, and the largest request a class
 * serves with its canaries (the next ones are large blocks, in runs of
 * their own that end at a guard page). */
static const size_t canary_sizes[] = {16, 1024, 65536, (256 << 10) - 16};
static const char *const levels[] = {"1", "2"};

TEST(overflow_by_1_8_16_bytes_reported_at_free) {
  for (size_t l = 0; l < 2; l++)
    for (size_t i = 0; i < sizeof canary_sizes / sizeof *canary_sizes; i++)
      for (size_t span = 1; span <= 16; span *= 2) {
        if (span == 2 || span == 4) continue;      /* 1, 8, 16 */
        expect_canary(levels[l], "free", canary_sizes[i], (long)canary_sizes[i], span, "heap overflow");
      }
}

TEST(underflow_by_16_bytes_reported_at_free) {
  for (size_t l = 0; l < 2; l++)
    for (size_t i = 0; i < sizeof canary_sizes / sizeof *canary_sizes; i++) {
      expect_canary(levels[l], "free", canary_sizes[i], -16, 16, "heap underflow");
      expect_canary(levels[l], "first", canary_sizes[i], -16, 16, "heap underflow");
    }
}

/* Sizes other than a class's, and the other ways a block goes back: an
 * overflow is reported there too (by realloc, before it copies). */
TEST(overflow_reported_by_realloc_sized_and_remote_free) {
  static const size_t sizes[] = {1, 100, 5000, 100000};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    expect_canary("1", "realloc", sizes[i], (long)sizes[i], 1, "heap overflow");
    expect_canary("1", "sized", sizes[i], (long)sizes[i], 1, "heap overflow");
    expect_canary("1", "remote", sizes[i], (long)sizes[i], 16, "heap overflow");
    expect_canary("1", "remote", sizes[i], -16, 16, "heap underflow");
  }
}

/* Every byte a program was given may be written, in both levels: blocks of
 * sizes at and around each class size, made by every allocating call,
 * written in full (malloc_usable_size's bytes included), resized, and
 * freed in every way, reported nowhere. */
static void canary_clean_run(void) {
  static const size_t sizes[] = {0, 1, 15, 16, 17, 31, 32, 48, 100, 128, 1000, 1024, 4096, 4608, 8192,
                                 32768, 65536, 200000, (256 << 10) - 17, (256 << 10) - 16, 256 << 10, 300000};
  void *keep[64];
  size_t kept = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t n = sizes[i];
    unsigned char *p = hakmem_malloc(n);
    size_t u = hakmem_malloc_usable_size(p);
    if (u < n) _exit(10);
    memset(p, 0x77, u);
    p = hakmem_realloc(p, n + 40);
    memset(p, 0x78, hakmem_malloc_usable_size(p));
    p = hakmem_realloc(p, n / 2 + 1);
    memset(p, 0x79, hakmem_malloc_usable_size(p));
    hakmem_free(p);
    unsigned char *c = hakmem_calloc(1, n);
    for (size_t k = 0; k < n; k++) if (c[k]) _exit(11);
    memset(c, 0x7a, hakmem_malloc_usable_size(c));
    hakmem_free_sized(c, n);
    static const size_t aligns[] = {32, 64, 256, 4096, 8192};
    for (size_t a = 0; a < sizeof aligns / sizeof *aligns; a++) {
      void *q = NULL;
      if (hakmem_posix_memalign(&q, aligns[a], n) || (uintptr_t)q % aligns[a]) _exit(12);
      memset(q, 0x7b, hakmem_malloc_usable_size(q));
      hakmem_free_aligned_sized(q, aligns[a], n);
      unsigned char *r = hakmem_aligned_alloc(aligns[a], n + 1);
      if (!r || (uintptr_t)r % aligns[a]) _exit(13);
      memset(r, 0x7c, hakmem_malloc_usable_size(r));
      if (kept < 64) keep[kept++] = r;
      else hakmem_free(r);
    }
  }
  for (size_t i = 0; i < kept; i++) {          /* freed by another thread */
    pthread_t t;
    if (pthread_create(&t, NULL, (void *(*)(void *))hakmem_free, keep[i]) || pthread_join(t, NULL)) _exit(3);
  }
  hakmem_malloc_trim(0);
}
__attribute__((constructor)) static void canary_clean_args(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--canary-clean") == 0) {
    canary_clean_run();
    _exit(0);
  }
}
static const char *clean_level;
static void exec_clean(void) {
  char env[32];
  snprintf(env, sizeof env, "HAKMEM_SECURE=%s", clean_level);
  char *argv[] = {"test_secure", "--canary-clean", NULL};
  char *envp[] = {env, NULL};
  execve("/proc/self/exe", argv, envp);
  _exit(2);
}
TEST(blocks_written_in_full_are_not_reported) {
  for (size_t l = 0; l < 2; l++) {
    char msg[2048];
    clean_level = levels[l];
    int st = run_in_child(exec_clean, msg, sizeof msg);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0 && !msg[0], "HAKMEM_SECURE=%s: status %#x, \"%.200s\"",
           levels[l], st, msg);
  }
}

/* realloc records the size asked for, also when it moves a growing buffer
 * to a block with headroom: the usable size follows the buffer, a sized
 * free of that size is accepted, and the buffer still moves rarely. */
TEST(realloc_records_the_size_asked_for) {
  size_t len = 33 << 10;
  unsigned char *p = hakmem_malloc(len);
  int moves = 0, wrong = 0;
  while (len < (200 << 10)) {
    unsigned char *q = hakmem_realloc(p, len + 64);
    if (!q) break;
    moves += q != p;
    p = q;
    len += 64;
    memset(p + len - 64, 7, 64);
    wrong += hakmem_malloc_usable_size(p) != len;
  }
  CHECKF(wrong == 0, "%d of the sizes after realloc were not the size asked for", wrong);
  CHECKF(moves <= 7, "%d moves growing a buffer from 33 to 200 KiB in 64-byte appends", moves);
  hakmem_free_sized(p, len);
}

/* malloc_usable_size is the size asked for: the bytes after it are the
 * canaries' (a program that writes all it is told it may stays correct). */
TEST(usable_size_is_the_requested_size) {
  static const size_t sizes[] = {1, 16, 24, 1000, 1024, 65536};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    void *p = hakmem_malloc(sizes[i]);
    CHECKF(hakmem_malloc_usable_size(p) == sizes[i], "malloc(%zu): usable size %zu", sizes[i], hakmem_malloc_usable_size(p));
    hakmem_free(p);
  }
}

/* A thread that frees and then waits keeps no quarantine: the purger
 * releases a quiet heap's quarantine, so the pages of its blocks go back
 * (they stayed resident for as long as the thread waited). */
#define QUIET_BLOCKS 1000
static pthread_barrier_t qbar;
static void *quiet_freer(void *arg) {
  (void)arg;
  static void *v[QUIET_BLOCKS];
  for (int i = 0; i < QUIET_BLOCKS; i++)
    if ((v[i] = hakmem_malloc(8192)) != NULL) memset(v[i], 1, 8192);
  pthread_barrier_wait(&qbar);                 /* allocated: main reads the peak */
  for (int i = 0; i < QUIET_BLOCKS; i++) hakmem_free(v[i]);
  pthread_barrier_wait(&qbar);                 /* freed: 4 MiB of them in the quarantine */
  pthread_barrier_wait(&qbar);                 /* wait, calling nothing, until main is done */
  return NULL;
}

TEST(quiet_thread_quarantine_released) {
  hakmem_free(hakmem_malloc(16));              /* main has a heap: the purger's two threads */
  long base = test_rss_kib();
  pthread_barrier_init(&qbar, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, quiet_freer, NULL);
  pthread_barrier_wait(&qbar);
  long peak = test_rss_kib();
  pthread_barrier_wait(&qbar);
  uint64_t t0 = test_now_ms(), waited = 0;
  long now = peak;
  while (waited < 3000) {
    now = test_rss_kib();
    if (now - base < 2048) break;
    hakmem_free(hakmem_malloc(16));            /* (a slow path: the purger starts from one) */
    test_sleep_ms(5);
    waited = test_now_ms() - t0;
  }
  pthread_barrier_wait(&qbar);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&qbar);
  NOTE("RSS %ld KiB before, %ld KiB with %d blocks of 8 KiB, %ld KiB %llu ms after their thread freed them and "
       "went quiet", base, peak, QUIET_BLOCKS, now, (unsigned long long)waited);
  CHECKF(peak - base > 6 * 1024, "the blocks should hold > 6 MiB, held %ld KiB", peak - base);
  if (test_sanitized()) SKIP("RSS under a sanitizer");
  else CHECKF(now - base < 2048, "%ld KiB above the start still resident %llu ms after the thread went quiet",
              now - base, (unsigned long long)waited);
}

TEST_MAIN()
