/* hardened_malloc.c — the cases of GrapheneOS hardened_malloc's test suite
 * (its test/test_smc.py and the programs it runs), in our own versions, for
 * any allocator put under the program with LD_PRELOAD.
 *
 *   hardened_malloc CASE        run one case in this process (its exit
 *                               status, or the signal it dies of)
 *   hardened_malloc             run every case in a fresh process and print
 *                               "ok - hardened_malloc.c:CASE" when the
 *                               allocator behaves as a hardened one must
 *                               (the misuse is caught: SIGABRT after a
 *                               report, or SIGSEGV/SIGBUS at the access;
 *                               or the valid program runs), else "not ok";
 *                               an allocator named hakmem* (EXT_ALLOCATOR)
 *                               must start its report with "hakmem:"
 *   hardened_malloc --outcomes  one line per case: name, what a hardened
 *                               allocator does (caught, runs), verdict
 *                               (pass, FAIL, skip), what happened; asserts
 *                               nothing (tests/ext/hardened_table.sh)
 *
 * A case that needs a function this process does not have (free_sized in
 * glibc 2.36, C++'s operators without libstdc++) or hardened_malloc's own
 * API (malloc_object_size) is skipped, with the reason.  Where a case of
 * hardened_malloc checks one of its own policies rather than the misuse,
 * ours checks what the policy is for; each such case says so below. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "test.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>

/* What a hardened allocator does with the case: catch it, or run it. */
enum expect { RUNS, CAUGHT, SKIPPED };

/* A function of this process by name (the preloaded allocator's, else the
 * C library's or libstdc++'s), or NULL. */
static void *fn_named(const char *name) {
  static bool cxx_loaded;
  if (!cxx_loaded) {
    cxx_loaded = true;
    dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
  }
  return dlsym(RTLD_DEFAULT, name);
}
typedef void *(*new_fn)(size_t);
typedef void *(*new_aligned_fn)(size_t, size_t);
typedef void (*delete_sized_fn)(void *, size_t);
typedef void (*delete_sized_aligned_fn)(void *, size_t, size_t);
typedef void (*free_sized_fn)(void *, size_t);
typedef void (*free_aligned_sized_fn)(void *, size_t, size_t);

/* Values the compiler must not fold: a pointer or size laundered through
 * a volatile. */
static void *launder(void *p) { void *volatile v = p; return v; }
static size_t launder_size(size_t n) { volatile size_t v = n; return v; }

/* ---- the cases ------------------------------------------------------------
 * Each returns its exit status (0: ran as a valid program should) or dies. */

/* C++: a 1-byte object deleted as a 32-byte one (sized delete). */
static int delete_type_size_mismatch(void) {
  new_fn nw = (new_fn)fn_named("_Znwm");
  delete_sized_fn del = (delete_sized_fn)fn_named("_ZdlPvm");
  void *p = nw(1);
  del(launder(p), 32);
  return 0;
}
/* C++: an object of 64 bytes aligned to 64, deleted with its size and
 * alignment (valid), or with 64 bytes too many. */
static int aligned_delete(size_t size, size_t align, size_t told) {
  new_aligned_fn nw = (new_aligned_fn)fn_named("_ZnwmSt11align_val_t");
  delete_sized_aligned_fn del = (delete_sized_aligned_fn)fn_named("_ZdlPvmSt11align_val_t");
  void *p = nw(size, align);
  if ((uintptr_t)p % align) return 2;
  del(launder(p), told, align);
  return 0;
}
static int aligned_sized_delete_small(void) { return aligned_delete(64, 64, 64); }
static int invalid_aligned_sized_delete_small(void) { return aligned_delete(64, 64, 128); }
/* The same for an object of 16 KiB aligned to 8 KiB, deleted with 10 bytes
 * too few. */
static int aligned_sized_delete_large(void) { return aligned_delete(16384, 8192, 16384); }
static int invalid_aligned_sized_delete_large(void) { return aligned_delete(16384, 8192, 16374); }
/* posix_memalign of 0 bytes, freed with free_aligned_sized(p, 16, 0). */
static int aligned_sized_delete_small_min_align(void) {
  free_aligned_sized_fn f = (free_aligned_sized_fn)fn_named("free_aligned_sized");
  void *p = NULL;
  if (posix_memalign(&p, 16, 0)) return 1;
  f(p, 16, 0);
  return 0;
}
/* free_sized with the size allocated, after writing all of it. */
static int sized_free(size_t n) {
  free_sized_fn f = (free_sized_fn)fn_named("free_sized");
  char *p = malloc(n);
  if (!p) return 1;
  memset(p, 'a', n);
  f(p, n);
  return 0;
}
static int free_sized_small(void) { return sized_free(100); }
static int free_sized_large(void) { return sized_free(1 << 20); }

/* Double frees, at once or after another block's free. */
static int double_free(size_t n, bool delayed) {
  void *p = malloc(n), *q = malloc(n);
  if (!p || !q) return 1;
  free(p);
  if (delayed) free(q);
  free(launder(p));
  return 0;
}
static int double_free_large(void) { return double_free(256 << 10, false); }
static int double_free_large_delayed(void) { return double_free(256 << 10, true); }
static int double_free_small(void) { return double_free(16, false); }
static int double_free_small_delayed(void) { return double_free(16, true); }

/* A write just past the usable size, then free: at its first byte (a zero,
 * or a one), or at its eighth (one bit flipped, so it changes whatever was
 * there). */
static int overflow(size_t n, size_t at, int how) {
  volatile char *p = malloc(n);
  if (!p) return 1;
  size_t size = malloc_usable_size((void *)p);
  if (how == 0) p[size + at] = 0;
  else if (how == 1) p[size + at] = 1;
  else p[size + at] ^= 1;
  free((void *)p);
  return 0;
}
static int overflow_large_1_byte(void) { return overflow(256 << 10, 0, 0); }
static int overflow_large_8_byte(void) { return overflow(256 << 10, 7, 0); }
static int overflow_small_1_byte(void) { return overflow(8, 0, 1); }
static int overflow_small_8_byte(void) { return overflow(8, 7, 2); }

/* free of the middle of a mapping the allocator never saw, inaccessible or
 * not (after one malloc/free, so that the allocator is set up). */
static int invalid_free_mapping(int prot) {
  free(malloc(16));
  char *p = mmap(NULL, 4096 * 16, prot, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (p == MAP_FAILED) return 1;
  free(launder(p + 4096 * 8));
  return 0;
}
static int invalid_free_protected(void) { return invalid_free_mapping(PROT_NONE); }
static int invalid_free_unprotected(void) { return invalid_free_mapping(PROT_READ | PROT_WRITE); }
/* free of an address 16 KiB or 1 GiB past a small block. */
static int invalid_free_small_region(void) {
  char *p = malloc(16);
  if (!p) return 1;
  free(launder(p + 4096 * 4));
  return 0;
}
static int invalid_free_small_region_far(void) {
  char *p = malloc(16);
  if (!p) return 1;
  free(launder(p + (1 << 30)));
  return 0;
}
/* malloc_usable_size of an address 16 KiB past a small block, and of a
 * freed block. */
static int invalid_malloc_usable_size_small(void) {
  char *p = malloc(16);
  if (!p) return 1;
  return malloc_usable_size(launder(p + 4096 * 4)) == 12345;
}
static int invalid_malloc_usable_size_small_quarantine(void) {
  void *p = malloc(16);
  if (!p) return 1;
  free(p);
  return malloc_usable_size(launder(p)) == 12345;
}

/* Reading a freed block.  A large one: the original expects a fault at
 * the read.  A small one: the original expects zeros (hardened_malloc
 * zeroes freed blocks); ours, what that is for: the data written is no
 * longer there to read (exit 1 if 4 or more of its 16 bytes are: words an
 * allocator writes into a freed block, pointers or random keys, match a
 * byte of it by chance, 1 in 256 each). */
static int read_after_free_large(void) {
  volatile char *p = malloc(256 << 10);
  if (!p) return 1;
  memset((void *)p, 'a', 16);
  free((void *)p);
  unsigned sum = 0;
  for (size_t i = 0; i < (256 << 10); i++) sum += (unsigned char)p[i];
  return sum == 12345 ? 2 : 0;
}
static int read_after_free_small(void) {
  volatile char *p = malloc(16);
  if (!p) return 1;
  for (int i = 0; i < 16; i++) p[i] = (char)('a' + i);
  free((void *)p);
  int left = 0;
  for (int i = 0; i < 16; i++) left += p[i] == (char)('a' + i);
  return left >= 4;
}
/* Reading or writing the block of malloc(0). */
static int read_zero_size(void) {
  volatile char *p = malloc(0);
  if (!p) return 1;
  return p[0] == 123 ? 2 : 0;
}
static int write_zero_size(void) {
  volatile char *p = malloc(0);
  if (!p) return 1;
  p[0] = 5;
  return 0;
}
/* strlen of a block filled to its usable size with no terminator: the
 * original expects the string to end right there (exit 1 otherwise). */
static int string_overflow(void) {
  char *p = malloc(16);
  if (!p) return 1;
  size_t size = malloc_usable_size(p);
  memset(p, 'a', size);
  return strlen(p) != size;
}
/* free and malloc_usable_size of a pointer one byte into a block. */
static int unaligned_free_large(void) {
  char *p = malloc(256 << 10);
  if (!p) return 1;
  free(launder(p + 1));
  return 0;
}
static int unaligned_free_small(void) {
  char *p = malloc(16);
  if (!p) return 1;
  free(launder(p + 1));
  return 0;
}
static int unaligned_malloc_usable_size_small(void) {
  char *p = malloc(16);
  if (!p) return 1;
  return malloc_usable_size(launder(p + 1)) == 12345;
}
/* The calls on a wild pointer (1). */
static int uninitialized_free(void) { free(launder((void *)1)); return 0; }
static int uninitialized_malloc_usable_size(void) { return malloc_usable_size(launder((void *)1)) == 12345; }
static int uninitialized_realloc(void) { return realloc(launder((void *)1), 16) == NULL; }
/* A write to a freed block of 256 KiB (the original expects a fault at the
 * write), after another block of its size was allocated or not. */
static int write_after_free_large_case(bool reuse) {
  volatile char *p = malloc(256 << 10);
  if (!p) return 1;
  free((void *)p);
  void *volatile q = reuse ? malloc(256 << 10) : NULL;
  (void)q;
  p[64 * 1024 + 1] = 'a';
  return 0;
}
static int write_after_free_large(void) { return write_after_free_large_case(false); }
static int write_after_free_large_reuse(void) { return write_after_free_large_case(true); }
/* A write to a freed 128-byte block, then 100,000 mallocs and frees of its
 * size: the write must be reported before the program ends. */
static int write_after_free_small_case(bool reuse) {
  volatile char *p = malloc(128);
  if (!p) return 1;
  free((void *)p);
  void *volatile q = reuse ? malloc(128) : NULL;
  (void)q;
  p[65] = 'a';
  for (int i = 0; i < 100000; i++) free(malloc(launder_size(128)));
  return 0;
}
static int write_after_free_small(void) { return write_after_free_small_case(false); }
static int write_after_free_small_reuse(void) { return write_after_free_small_case(true); }

/* malloc(-8) fails (returns NULL). */
static int impossibly_large_malloc(void) { return malloc(launder_size((size_t)-8)) != NULL; }
/* A new block reads as zero (the first block of its size in the process:
 * the original checks that hardened_malloc hands out zeroed memory). */
static int uninitialized_read(size_t n) {
  volatile char *p = malloc(n);
  if (!p) return 1;
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 1;
  free((void *)p);
  return 0;
}
static int uninitialized_read_small(void) { return uninitialized_read(8); }
static int uninitialized_read_large(void) { return uninitialized_read(256 << 10); }
/* realloc(NULL, 12) on one thread, realloc to 1 KiB and free on another. */
static void *realloc_other(void *p) {
  p = realloc(p, 1024);
  if (!p) exit(1);
  free(p);
  return NULL;
}
static int realloc_init(void) {
  void *p = realloc(NULL, 12);
  pthread_t t;
  if (!p || pthread_create(&t, NULL, realloc_other, p) || pthread_join(t, NULL)) return 1;
  return 0;
}
/* A buffer grown by realloc from 256 KiB by half its size each time,
 * written in full each time (16 steps, to 110 MiB: the original's 20 reach
 * 570 MiB). */
static int large_array_growth(void) {
  void *p = NULL;
  size_t size = 256 << 10;
  for (int i = 0; i < 16; i++) {
    if (!(p = realloc(p, size))) return 1;
    memset(p, 'a', size);
    size = size * 3 / 2;
  }
  free(p);
  return 0;
}
static int calloc_overflow(void) {
  errno = 0;
  void *p = calloc(launder_size(SIZE_MAX), 2);
  return !(p == NULL && errno == ENOMEM);
}
static int calloc_zeroed(void) {
  unsigned char *p = calloc(128, 16);
  if (!p) return 1;
  for (size_t i = 0; i < 128 * 16; i++)
    if (p[i]) return 1;
  free(p);
  return 0;
}
static int malloc_zero_different(void) { return malloc(0) == malloc(0); }
/* A 64-byte block is never malloc(0)'s pointer. */
static int malloc_noreuse(void) {
  char *p = malloc(0);
  for (int i = 0; i < 512; i++) {
    char *q = malloc(launder_size(64));
    if (p == q) return 1;
    free(q);
  }
  return 0;
}

/* ---- the list ------------------------------------------------------------- */

/* Caught, or run clean; _WITH: the function the case calls by name. */
#define CATCH(name) {#name, name, CAUGHT, NULL}
#define RUN(name) {#name, name, RUNS, NULL}
#define CATCH_WITH(name, fn) {#name, name, CAUGHT, fn}
#define RUN_WITH(name, fn) {#name, name, RUNS, fn}
#define OWN_API(name) {#name, NULL, SKIPPED, "malloc_object_size is hardened_malloc's own function"}
static const struct hm_case {
  const char *name;
  int (*fn)(void);
  enum expect expect;
  const char *needs;       /* a function the case calls by name, or why it is skipped */
} cases[] = {
  CATCH_WITH(delete_type_size_mismatch, "_ZdlPvm"),
  RUN_WITH(aligned_sized_delete_small, "_ZdlPvmSt11align_val_t"),
  RUN_WITH(aligned_sized_delete_small_min_align, "free_aligned_sized"),
  CATCH_WITH(invalid_aligned_sized_delete_small, "_ZdlPvmSt11align_val_t"),
  RUN_WITH(aligned_sized_delete_large, "_ZdlPvmSt11align_val_t"),
  CATCH_WITH(invalid_aligned_sized_delete_large, "_ZdlPvmSt11align_val_t"),
  RUN_WITH(free_sized_small, "free_sized"), RUN_WITH(free_sized_large, "free_sized"),
  CATCH(double_free_large_delayed), CATCH(double_free_large), CATCH(double_free_small_delayed),
  CATCH(double_free_small), CATCH(overflow_large_1_byte), CATCH(overflow_large_8_byte),
  CATCH(overflow_small_1_byte), CATCH(overflow_small_8_byte), CATCH(invalid_free_protected),
  CATCH(invalid_free_small_region_far), CATCH(invalid_free_small_region), CATCH(invalid_free_unprotected),
  CATCH(invalid_malloc_usable_size_small_quarantine), CATCH(invalid_malloc_usable_size_small),
  CATCH(read_after_free_large), RUN(read_after_free_small), CATCH(read_zero_size), RUN(string_overflow),
  CATCH(unaligned_free_large), CATCH(unaligned_free_small), CATCH(unaligned_malloc_usable_size_small),
  CATCH(uninitialized_free), CATCH(uninitialized_malloc_usable_size), CATCH(uninitialized_realloc),
  CATCH(write_after_free_large_reuse), CATCH(write_after_free_large), CATCH(write_after_free_small_reuse),
  CATCH(write_after_free_small), CATCH(write_zero_size), OWN_API(malloc_object_size),
  OWN_API(malloc_object_size_offset), OWN_API(invalid_malloc_object_size_small),
  OWN_API(invalid_malloc_object_size_small_quarantine), RUN(impossibly_large_malloc),
  RUN(uninitialized_read_small), RUN(uninitialized_read_large), RUN(realloc_init),
  RUN(large_array_growth), OWN_API(malloc_object_size_zero), RUN(calloc_overflow), RUN(calloc_zeroed),
  RUN(malloc_zero_different), RUN(malloc_noreuse),
};
#define CASES (sizeof cases / sizeof cases[0])

/* ---- running them ---------------------------------------------------------- */

static const struct hm_case *current;
static void exec_case(void) {
  char *argv[] = {"hardened_malloc", (char *)current->name, NULL};
  execv("/proc/self/exe", argv);
  _exit(127);
}

/* Run case c in a fresh process; its verdict and what happened in what. */
static const char *verdict(const struct hm_case *c, char *what, size_t cap) {
  if (c->expect == SKIPPED) { snprintf(what, cap, "%s", c->needs); return "skip"; }
  if (c->needs && !fn_named(c->needs)) { snprintf(what, cap, "this process has no %s", c->needs); return "skip"; }
  char msg[2048];
  current = c;
  int st = run_in_child(exec_case, msg, sizeof msg);
  const char *a = getenv("EXT_ALLOCATOR");
  bool hakmem = a && strncmp(a, "hakmem", 6) == 0;
  bool caught = false;
  if (WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS)) {
    snprintf(what, cap, "%s at the access", WTERMSIG(st) == SIGSEGV ? "SIGSEGV" : "SIGBUS");
    caught = true;
  } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) {
    snprintf(what, cap, "SIGABRT: %.150s", msg[0] ? msg : "(no message)");
    caught = !hakmem || strncmp(msg, "hakmem: ", 8) == 0;
  } else if (WIFSIGNALED(st)) {
    snprintf(what, cap, "killed by signal %d", WTERMSIG(st));
  } else {
    snprintf(what, cap, "exit status %d%s%.150s", WEXITSTATUS(st), msg[0] ? ", stderr: " : "", msg);
  }
  bool pass = c->expect == CAUGHT ? caught : WIFEXITED(st) && WEXITSTATUS(st) == 0;
  return pass ? "pass" : "FAIL";
}

int main(int argc, char **argv) {
  if (argc == 2 && argv[1][0] != '-') {
    for (size_t i = 0; i < CASES; i++)
      if (cases[i].fn && strcmp(argv[1], cases[i].name) == 0) return cases[i].fn();
    fprintf(stderr, "hardened_malloc: no case %s\n", argv[1]);
    return 127;
  }
  bool outcomes = argc == 2 && strcmp(argv[1], "--outcomes") == 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int failed = 0;
  for (size_t i = 0; i < CASES; i++) {
    char what[512];
    const char *v = verdict(&cases[i], what, sizeof what);
    if (outcomes) printf("%s\t%s\t%s\t%s\n", cases[i].name, cases[i].expect == CAUGHT ? "caught" : cases[i].expect == RUNS ? "runs" : "-", v, what);
    else if (strcmp(v, "skip") == 0) printf("ok - hardened_malloc.c:%s # SKIP %s\n", cases[i].name, what);
    else if (strcmp(v, "pass") == 0) printf("ok - hardened_malloc.c:%s\n", cases[i].name);
    else {
      failed++;
      printf("not ok - hardened_malloc.c:%s: expected %s, got %s\n", cases[i].name,
             cases[i].expect == CAUGHT ? "the misuse caught" : "a clean run", what);
    }
  }
  return failed != 0;
}
