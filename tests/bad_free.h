/* bad_free.h — invalid frees and reallocs, each run in a forked child that
 * first reports the pointer it is about to misuse: the one line hakmem prints
 * must start with "hakmem: ", name the error (expect: alternatives separated
 * by '|', for the default and the hardened mode) and show that pointer, and
 * the child must die of SIGABRT.  Shared by test_api.c (default mode) and
 * test_secure.c (HAKMEM_SECURE=1). */
#ifndef HAKMEM_BAD_FREE_H
#define HAKMEM_BAD_FREE_H
#include "test.h"
#include "hakmem.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

static char global_buf[256];
static int target_fd = -1;
static void target(const void *p) {
  char b[40];
  int n = snprintf(b, sizeof b, "%p", p);
  if (write(target_fd, b, (size_t)n) != n) _exit(3);
  close(target_fd);
}
static void in_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  pthread_create(&t, NULL, fn, arg);
  pthread_join(t, NULL);
}
static void *thread_free(void *p) { hakmem_free(p); return NULL; }
static void *thread_realloc(void *p) { return hakmem_realloc(p, 300); }
static void *thread_free_twice(void *p) { hakmem_free(p); target(p); hakmem_free(p); return NULL; }

/* Another thread's frees of small and medium blocks reach their owner in
 * batches, untested (src/remote.c): the owner finds a double free among them
 * when it takes its inbox (its next malloc slow path, malloc_trim, its exit),
 * here malloc_trim.  Large blocks are caught at once. */
static void owner_takes_inbox(void) { hakmem_malloc_trim(0); }

static void double_free(size_t n) { void *p = hakmem_malloc(n); hakmem_free(p); target(p); hakmem_free(p); }
static void owner_then_remote(size_t n) {
  void *p = hakmem_malloc(n);
  hakmem_free(p);
  target(p);
  in_thread(thread_free, p);
  owner_takes_inbox();
}
static void remote_then_owner(size_t n) {
  void *p = hakmem_malloc(n);
  in_thread(thread_free, p);
  target(p);
  hakmem_free(p);
  owner_takes_inbox();
}
static void remote_twice(size_t n) { void *p = hakmem_malloc(n); in_thread(thread_free_twice, p); owner_takes_inbox(); }

static void c_double_small(void) { double_free(100); }
static void c_double_medium(void) { double_free(20000); }
static void c_double_large(void) { double_free(1 << 20); }
static void c_double_huge(void) { double_free(16 << 20); }
static void c_stack(void) { char buf[256] = {0}; target(buf + 16); hakmem_free(buf + 16); }
static void c_global(void) { target(global_buf + 16); hakmem_free(global_buf + 16); }
static void c_interior_small(void) { char *p = hakmem_malloc(100); target(p + 16); hakmem_free(p + 16); }
static void c_interior_small8(void) { char *p = hakmem_malloc(100); target(p + 8); hakmem_free(p + 8); }
static void c_interior_large(void) { char *p = hakmem_malloc(1 << 20); target(p + 4096); hakmem_free(p + 4096); }
static void c_foreign(void) {
  char *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  target(p + 64);
  hakmem_free(p + 64);
}
static void c_realloc_stack(void) { char buf[256] = {0}; target(buf + 32); void *q = hakmem_realloc(buf + 32, 100); (void)q; }
static void c_realloc_freed(void) { void *p = hakmem_malloc(100); hakmem_free(p); target(p); p = hakmem_realloc(p, 200); (void)p; }
static void c_usable_stack(void) { char buf[256] = {0}; target(buf + 16); (void)hakmem_malloc_usable_size(buf + 16); }
static void c_usable_interior(void) { char *p = hakmem_malloc(100); target(p + 16); (void)hakmem_malloc_usable_size(p + 16); }
static void c_usable_freed_large(void) { void *p = hakmem_malloc(1 << 20); hakmem_free(p); target(p); (void)hakmem_malloc_usable_size(p); }
static void usable_after_free(size_t n) { void *p = hakmem_malloc(n); hakmem_free(p); target(p); (void)hakmem_malloc_usable_size(p); }
static void c_usable_freed_small(void) { usable_after_free(100); }
static void c_usable_freed_cached(void) { usable_after_free(8192); }
/* a size the freed block would still hold: realloc's in-place check */
static void c_realloc_freed_fits(void) { void *p = hakmem_malloc(100); hakmem_free(p); target(p); p = hakmem_realloc(p, 90); (void)p; }
static void c_sized_wrong(void) { void *p = hakmem_malloc(100); target(p); hakmem_free_sized(p, 100000); }
/* Another thread's frees into pages their owner parked as full wait on the
 * owner's delayed list, linked across pages; a second free of one of them is
 * caught whatever block follows it there */
static void *thread_free_pair_twice(void *arg) {
  void **p = arg;
  hakmem_free(p[0]);
  hakmem_free(p[1]);
  target(p[1]);
  hakmem_free(p[1]);
  return NULL;
}
static void c_small_delayed_twice(void) {
  static void *p[4096];
  for (int i = 0; i < 4096; i++) p[i] = hakmem_malloc(100);   /* 112 B: 7 pages, the full ones parked */
  void *pair[2] = { p[0], p[1000] };
  in_thread(thread_free_pair_twice, pair);
  owner_takes_inbox();
}
/* another thread frees blocks p[0..n) of its owner's, then p[again] a
 * second time */
struct free_again { void **p; int n, again; };
static void *thread_free_then_again(void *arg) {
  struct free_again *f = arg;
  for (int i = 0; i < f->n; i++) hakmem_free(f->p[i]);
  target(f->p[f->again]);
  hakmem_free(f->p[f->again]);
  return NULL;
}
/* a block, 99 more (the buffer holding the first is sent: src/remote.c),
 * then the first again */
static void c_small_remote_twice_apart(void) {
  static void *p[100];
  for (int i = 0; i < 100; i++) p[i] = hakmem_malloc(100);
  in_thread(thread_free_then_again, &(struct free_again){p, 100, 0});
  owner_takes_inbox();
}
/* 8 of 16 blocks of one page and the third again, all in one buffer: the
 * owner takes them as a run of the page's blocks (src/remote.c), the page
 * still in use */
static void c_small_remote_twice_in_run(void) {
  static void *p[16];
  for (int i = 0; i < 16; i++) p[i] = hakmem_malloc(100);
  in_thread(thread_free_then_again, &(struct free_again){p, 8, 2});
  owner_takes_inbox();
}
/* another thread frees a block twice, the frees sent in two batches; the
 * owner collects the first, gives the emptied page back and carves 48 B
 * blocks over it before the second arrives, which then points into one of
 * them */
static pthread_barrier_t reuse_bar;
static void *thread_free_twice_batched(void *p) {
  hakmem_free(p);
  hakmem_collect(0);                            /* the first batch goes */
  hakmem_free(p);                               /* the second waits in the buffer */
  pthread_barrier_wait(&reuse_bar);
  pthread_barrier_wait(&reuse_bar);
  return NULL;                                  /* (sent as the thread exits) */
}
static void c_small_remote_twice_page_reused(void) {
  static char *p[256];
  for (int i = 0; i < 256; i++) p[i] = hakmem_malloc(1024);
  char *b = p[129];
  target(b);                                    /* (the hardened mode reports the second free itself) */
  pthread_t t;
  pthread_barrier_init(&reuse_bar, NULL, 2);
  pthread_create(&t, NULL, thread_free_twice_batched, b);
  pthread_barrier_wait(&reuse_bar);
  for (int i = 1; i < 256; i++)                /* (p[0] keeps the segment) */
    if (p[i] != b) hakmem_free(p[i]);
  hakmem_collect(0);                            /* the first batch: b's page empties and goes */
  char *q = NULL;
  for (int i = 0; i < 200000 && !(q && b >= q && b < q + 48); i++) {
    q = hakmem_malloc(48);
    memset(q, 0x5a, 48);
  }
  if (!(b >= q && b < q + 48)) { fprintf(stderr, "the 48 B blocks never covered the page\n"); _exit(3); }
  pthread_barrier_wait(&reuse_bar);
  pthread_join(t, NULL);
  hakmem_collect(0);                            /* the second batch */
}
static void c_small_owner_remote(void) { owner_then_remote(100); }
static void c_small_remote_owner(void) { remote_then_owner(100); }
static void c_small_remote_twice(void) { remote_twice(100); }
static void c_medium_owner_remote(void) { owner_then_remote(20000); }
static void c_large_remote_owner(void) { remote_then_owner(1 << 20); }
static void c_large_remote_twice(void) { remote_twice(1 << 20); }
/* below 1 MiB a large block another thread frees travels in that thread's
 * buffer; its page's freed flag is set as it goes in */
static void c_large_buffered_remote_owner(void) { remote_then_owner(512 << 10); }
static void c_large_buffered_remote_twice(void) { remote_twice(512 << 10); }
static void c_realloc_remote_freed(void) { void *p = hakmem_malloc(100); hakmem_free(p); target(p); in_thread(thread_realloc, p); }
/* a 1 MiB block another thread freed, realloc'd to n */
static void realloc_large_freed(size_t n) {
  void *p = hakmem_malloc(1 << 20);
  in_thread(thread_free, p);
  target(p);
  p = hakmem_realloc(p, n);
  (void)p;
}
static void c_realloc_large_freed(void) { realloc_large_freed(2 << 20); }
static void c_realloc_large_freed_fits(void) { realloc_large_freed(3 << 18); }
/* A large block freed, its memory then used for other blocks before the
 * second free or the realloc: by small blocks made at once, or by a
 * thread's start (the new thread frees it or reallocs it). */
static void *small_blocks(void) {
  void *q[8];
  for (int i = 0; i < 8; i++) q[i] = hakmem_malloc(16 << i);
  return q[0];
}
static void c_large_freed_then_small(void) {
  void *p = hakmem_malloc(1 << 20);
  hakmem_free(p);
  (void)small_blocks();
  target(p);
  hakmem_free(p);
}
static void c_large_freed_new_thread(void) { void *p = hakmem_malloc(1 << 20); hakmem_free(p); target(p); in_thread(thread_free, p); }
static void c_large_freed_realloc_new_thread(void) { void *p = hakmem_malloc(1 << 20); hakmem_free(p); target(p); in_thread(thread_realloc, p); }
/* 4-256 KiB blocks wait in the thread cache after free: a is second there */
static void double_cached(size_t n) {
  void *a = hakmem_malloc(n), *b = hakmem_malloc(n);
  hakmem_free(a);
  hakmem_free(b);
  target(a);
  hakmem_free(a);
}
static void c_double_cached(void) { double_cached(8192); }
static void c_double_cached_big(void) { double_cached(100 << 10); }
static void c_realloc_cached(void) { void *p = hakmem_malloc(8192); hakmem_free(p); target(p); p = hakmem_realloc(p, 9000); (void)p; }
/* a write into a freed block's link, found when a double free makes the
 * owner walk its free list (the message shows the bad link, not a block) */
static void c_corrupt_link(void) {
  char *a = hakmem_malloc(100), *b = hakmem_malloc(100);
  hakmem_free(a);
  hakmem_free(b);                               /* free list: b -> a */
  memset(b, 0x41, 8);                           /* use after free */
  hakmem_free(a);                               /* a double free: the walk meets the bad link */
}

static const struct bad_case {
  const char *name, *expect;
  void (*run)(void);
  int check_pointer;                            /* the message shows the target pointer */
  int fresh;                                    /* run in a process exec'd for it, not a fork */
} bad_cases[] = {
  {"double free (100 B)", "double free", c_double_small, 1},
  {"another thread's double free, sent in two batches, the page carved for 48 B blocks in between", "middle of a block|double free", c_small_remote_twice_page_reused, 1, 1},
  {"double free (20 KB)", "double free", c_double_medium, 1},
  {"double free (1 MiB)", "not an allocated block|double free", c_double_large, 1},
  {"double free (16 MiB)", "did not allocate", c_double_huge, 1},
  {"free of a stack address", "did not allocate", c_stack, 1},
  {"free of a global", "did not allocate", c_global, 1},
  {"free of p+16 (100 B block)", "middle of a block", c_interior_small, 1},
  {"free of p+8 (100 B block)", "middle of a block", c_interior_small8, 1},
  {"free of p+4096 (1 MiB block)", "middle of a block", c_interior_large, 1},
  {"free of an mmap'd page", "did not allocate", c_foreign, 1},
  {"realloc of a stack address", "realloc of a pointer hakmem did not allocate", c_realloc_stack, 1},
  {"realloc after free", "realloc of a freed block", c_realloc_freed, 1},
  {"realloc after free, to a size the block holds (100 B)", "realloc of a freed block", c_realloc_freed_fits, 1},
  {"realloc after another thread freed, to a size the block holds (1 MiB)", "realloc of a freed block|not an allocated block", c_realloc_large_freed_fits, 1},
  {"double free of a block deep in the thread cache (8 KiB)", "double free", c_double_cached, 1},
  {"double free of a block deep in the thread cache (100 KiB)", "double free", c_double_cached_big, 1},
  {"realloc after free (8 KiB, in the thread cache)", "realloc of a freed block", c_realloc_cached, 1},
  {"malloc_usable_size of a stack address", "malloc_usable_size of a pointer hakmem did not allocate", c_usable_stack, 1},
  {"malloc_usable_size of p+16 (100 B block)", "malloc_usable_size of a pointer into the middle", c_usable_interior, 1},
  {"malloc_usable_size after free (1 MiB)",
   "malloc_usable_size of a pointer that is not an allocated block (already freed, or never allocated): pointer|malloc_usable_size of a freed block",
   c_usable_freed_large, 1},
  {"malloc_usable_size after free (100 B)", "malloc_usable_size of a freed block", c_usable_freed_small, 1},
  {"malloc_usable_size after free (8 KiB, in the thread cache)", "malloc_usable_size of a freed block", c_usable_freed_cached, 1},
  {"free_sized with a too large size", "sized free", c_sized_wrong, 1},
  {"double free: owner, then another thread (100 B)", "double free", c_small_owner_remote, 1},
  {"double free: another thread, then the owner (100 B)", "double free", c_small_remote_owner, 1},
  {"double free: another thread twice (100 B)", "double free", c_small_remote_twice, 1},
  {"double free: another thread twice, 100 frees apart (100 B)", "double free", c_small_remote_twice_apart, 1},
  {"double free: another thread twice in one run of a page's blocks (100 B)", "double free", c_small_remote_twice_in_run, 1},
  {"double free: another thread twice, the block on its owner's delayed list (100 B)", "double free", c_small_delayed_twice, 1},
  {"double free: owner, then another thread (20 KB)", "double free", c_medium_owner_remote, 1},
  {"double free: another thread, then the owner (1 MiB)", "double free", c_large_remote_owner, 1},
  {"double free: another thread twice (1 MiB)", "double free", c_large_remote_twice, 1},
  {"double free: another thread, then the owner (512 KiB)", "double free", c_large_buffered_remote_owner, 1},
  {"double free: another thread twice (512 KiB)", "double free", c_large_buffered_remote_twice, 1},
  {"realloc by another thread after free (100 B)", "realloc of a freed block", c_realloc_remote_freed, 1},
  {"realloc after another thread freed (1 MiB)", "realloc of a freed block", c_realloc_large_freed, 1},
  {"double free after small blocks were made (1 MiB)", "not an allocated block|double free", c_large_freed_then_small, 1, 1},
  {"double free by a thread made after the free (1 MiB)", "not an allocated block|double free", c_large_freed_new_thread, 1, 1},
  {"realloc by a thread made after the free (1 MiB)", "not an allocated block|realloc of a freed block", c_large_freed_realloc_new_thread, 1, 1},
  {"corrupted free-list link", "corrupted free list|double free", c_corrupt_link, 0},
};

/* Does msg contain one of the '|'-separated alternatives of expect? */
static int names_error(const char *msg, const char *expect) {
  char alt[128];
  for (const char *p = expect; *p;) {
    size_t n = strcspn(p, "|");
    if (n >= sizeof alt) n = sizeof alt - 1;
    memcpy(alt, p, n);
    alt[n] = 0;
    if (strstr(msg, alt)) return 1;
    p += n + (p[n] == '|');
  }
  return 0;
}

/* Run one case in a child: its stderr's first line, the target it reported,
 * and how it ended. */

/* A fresh case's process: argv "--bad-case", its index, the target's fd.
 * The heap a fork inherits from the cases before would decide where its
 * blocks go; a fresh process's heap is the one a program starts with. */
static const struct bad_case *bad_current;
__attribute__((constructor)) static void bad_case_fresh(int argc, char **argv) {
  if (argc != 4 || strcmp(argv[1], "--bad-case")) return;
  target_fd = atoi(argv[3]);
  bad_cases[atoi(argv[2])].run();
  _exit(0);
}
static void bad_case_exec(void) {
  char idx[16], fd[16];
  snprintf(idx, sizeof idx, "%d", (int)(bad_current - bad_cases));
  snprintf(fd, sizeof fd, "%d", target_fd);
  char *argv[] = {"bad_case", "--bad-case", idx, fd, NULL};
  execv(test_self_exe(), argv);
  _exit(4);
}

static void run_bad_case(const struct bad_case *c) {
  int tgt[2];
  if (pipe(tgt)) { CHECK(0); return; }
  target_fd = tgt[1];                      /* the child reports its target here */
  bad_current = c;
  char msg[2048], want[64];
  int st = run_in_child(c->fresh ? bad_case_exec : c->run, msg, sizeof msg);
  close(tgt[1]);
  ssize_t k = read(tgt[0], want, sizeof want - 1);
  want[k > 0 ? k : 0] = 0;
  close(tgt[0]);
  int aborted = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
  if (WIFEXITED(st)) CHECKF(0, "%s: not detected (child exited with %d)", c->name, WEXITSTATUS(st));
  else if (!aborted) CHECKF(0, "%s: child died of signal %d, not SIGABRT", c->name, WTERMSIG(st));
  else {
    CHECKF(strncmp(msg, "hakmem: ", 8) == 0 && names_error(msg, c->expect), "%s: expected \"hakmem: ...%s...\", got \"%.200s\"",
           c->name, c->expect, msg);
    CHECKF(!c->check_pointer || (want[0] && strstr(msg, want)), "%s: the message does not show the pointer %s: \"%.200s\"",
           c->name, want, msg);
  }
}

static void run_bad_cases(void) {
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) run_bad_case(&bad_cases[i]);
}

#endif
