/* hardening_probes.c — the probes of issue 34 (items 1-9), for any allocator
 * put under the program with LD_PRELOAD, side by side with hardened_malloc.c
 * in tests/ext/hardened_table.sh.
 *
 *   hardening_probes PROBE        run one probe in this process
 *   hardening_probes --outcomes   one line per probe: name, what it does,
 *                                 what passes, verdict (pass, FAIL, n/a),
 *                                 what happened
 *
 * A probe of a misuse passes when the misuse is caught (the process dies of
 * SIGABRT, SIGSEGV or SIGBUS) or, for a forged free-list link, when malloc
 * never returns the attacker's address.  Item 2 counts the distinct heap
 * addresses of fresh processes, item 9 the 1 MiB blocks a process gets under
 * an address-space limit against glibc's count under the same limit; item
 * 8 is hakmem's own variable (n/a elsewhere). */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "test.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>

static void *launder(void *p) { void *volatile v = p; return v; }

/* ---- item 1: free-list forgery from a use-after-free ------------------------ */

static _Alignas(64) unsigned char target[4096];

/* Four mallocs of n after a forgery: exit 3 if one returns the target, 4 if
 * one overlaps a block still in use or is misaligned, else 0. */
static int follow(size_t n, uintptr_t live) {
  for (int i = 0; i < 4; i++) {
    uintptr_t q = (uintptr_t)malloc(n);
    if (q == (uintptr_t)target) return 3;
    if (q % 16 || (live && q != live && q < live + n && live < q + n)) return 4;
  }
  return 0;
}
/* The attacker reads a freed 64-byte block and writes a link made from what
 * it read alone (it knows no heap address): the target in both first words,
 * or the target XOR the first word into the second (the mark-as-key scheme
 * hakmem had). */
static int forge(int how) {
  uintptr_t *a = malloc(64), *b = malloc(64);
  free(b);
  free(a);
  a = launder(a);
  if (how == 0) a[0] = a[1] = (uintptr_t)target;
  else a[1] = (uintptr_t)target ^ a[0];
  return follow(64, 0);
}
static int forged_link_raw(void) { return forge(0); }
static int forged_link_mark_key(void) { return forge(1); }
/* One byte of a freed 16-byte block's second word changed. */
static int link_byte_changed(void) {
  unsigned char *a = malloc(16), *b = malloc(16);
  uintptr_t live = (uintptr_t)malloc(16);
  free(b);
  free(a);
  ((volatile unsigned char *)a)[8] ^= 0x18;
  return follow(16, live);
}

/* ---- item 2: heap address entropy ---------------------------------------------- */

static int print_address(void) {
  fprintf(stderr, "%p\n", malloc(16));
  return 0;
}

/* ---- items 3-7 ------------------------------------------------------------------ */

/* A 1 MiB block freed while the process has one thread, then freed again or
 * realloc'ed by a thread created afterwards. */
static void *p_large;
static void *free_again(void *arg) { free(p_large); return arg; }
static void *realloc_again(void *arg) { return realloc(p_large, 2 << 20) == NULL ? arg : NULL; }
static int large_reuse_from_new_thread(void *(*fn)(void *)) {
  p_large = malloc(1 << 20);
  free(p_large);
  pthread_t t;
  if (pthread_create(&t, NULL, fn, NULL) || pthread_join(t, NULL)) return 1;
  return 0;
}
static int large_double_free_new_thread(void) { return large_reuse_from_new_thread(free_again); }
static int large_realloc_freed_new_thread(void) { return large_reuse_from_new_thread(realloc_again); }
/* C++: operator new(24), sized delete of 4096 bytes. */
static void *cxx_fn(const char *name) {
  dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
  return dlsym(RTLD_DEFAULT, name);
}
static int sized_delete_larger(void) {
  void *(*nw)(size_t) = (void *(*)(size_t))cxx_fn("_Znwm");
  void (*del)(void *, size_t) = (void (*)(void *, size_t))cxx_fn("_ZdlPvm");
  if (!nw || !del) return 5;
  void *p = nw(24);
  del(launder(p), 4096);
  return 0;
}
static int usable_size_of_freed(void) {
  void *p = malloc(100);
  free(p);
  return malloc_usable_size(launder(p)) == 12345;
}
/* A write 300 bytes into a freed 1 KiB block, then 2000 more blocks of its
 * size allocated and freed. */
static int write_300_into_freed_1k(void) {
  volatile unsigned char *p = malloc(1024);
  free((void *)p);
  p[300] = 1;
  for (int i = 0; i < 2000; i++) free(malloc(1024));
  return 0;
}
/* Writes of 'A' past the requested size or before the block, then free. */
static int write_then_free(size_t n, long off, size_t len) {
  unsigned char *p = malloc(n);
  memset(p, 0x5a, n);
  memset(launder(p + off), 'A', len);
  free(p);
  return 0;
}
static int overflow_1_past_16(void) { return write_then_free(16, 16, 1); }
static int overflow_16_past_1k(void) { return write_then_free(1024, 1024, 16); }
static int underflow_16_before_1k(void) { return write_then_free(1024, -16, 16); }

/* ---- item 8: a malformed HAKMEM_SECURE -------------------------------------- */

/* Re-executed with HAKMEM_SECURE=yes (whatever it was): the overflow of
 * item 7 must be caught. */
static int secure_yes(void) {
  setenv("HAKMEM_SECURE", "yes", 1);
  char *argv[] = {"hardening_probes", "overflow_1_past_16", NULL};
  execv("/proc/self/exe", argv);
  return 127;
}

/* ---- item 9: an address-space limit ------------------------------------------ */

#define AS_LIMIT ((rlim_t)204800 << 10)        /* ulimit -v 204800 */
static int count_1m_blocks(void) {
  int n = 0;
  while (n < 100000 && malloc(1 << 20)) n++;
  fprintf(stderr, "%d\n", n);
  return 0;
}

/* ---- running them --------------------------------------------------------------- */

static const struct probe {
  const char *name;
  int (*fn)(void);
  const char *what;
} probes[] = {
  {"forged_link_raw", forged_link_raw, "1: a freed 64 B block's first words overwritten with a global's address"},
  {"forged_link_mark_key", forged_link_mark_key, "1: a freed 64 B block's link forged as target ^ its first word"},
  {"link_byte_changed", link_byte_changed, "1: one byte of a freed 16 B block's second word changed"},
  {"heap_entropy", NULL, "2: malloc(16)'s address in 300 fresh processes"},
  {"large_double_free_new_thread", large_double_free_new_thread, "3: a 1 MiB block freed, then freed by a thread made afterwards"},
  {"large_realloc_freed_new_thread", large_realloc_freed_new_thread, "3: a 1 MiB block freed, then realloc'ed by a thread made afterwards"},
  {"sized_delete_larger", sized_delete_larger, "4: C++ operator new(24), sized delete of 4096 bytes"},
  {"usable_size_of_freed", usable_size_of_freed, "5: malloc_usable_size of a freed block"},
  {"write_300_into_freed_1k", write_300_into_freed_1k, "6: a write 300 bytes into a freed 1 KiB block"},
  {"overflow_1_past_16", overflow_1_past_16, "7: 1 byte written past malloc(16), then free"},
  {"overflow_16_past_1k", overflow_16_past_1k, "7: 16 bytes written past malloc(1024), then free"},
  {"underflow_16_before_1k", underflow_16_before_1k, "7: 16 bytes written before malloc(1024), then free"},
  {"secure_yes", secure_yes, "8: HAKMEM_SECURE=yes, then 1 byte written past malloc(16)"},
  {"ulimit_v", NULL, "9: 1 MiB blocks under ulimit -v 204800 (glibc's count beside)"},
};
#define PROBES (sizeof probes / sizeof probes[0])

static const char *current;
static bool no_preload, limit_as;
static void exec_probe(void) {
  if (no_preload) unsetenv("LD_PRELOAD");
  if (limit_as) {
    struct rlimit r = {AS_LIMIT, AS_LIMIT};
    setrlimit(RLIMIT_AS, &r);
  }
  char *argv[] = {"hardening_probes", (char *)current, NULL};
  execv("/proc/self/exe", argv);
  _exit(127);
}
/* Run probe name in a fresh process: its wait status, the first line of
 * its stderr in out. */
static int run_probe(const char *name, char *out, size_t cap) {
  current = name;
  return run_in_child(exec_probe, out, cap);
}

static const char *verdict(const struct probe *p, char *what, size_t cap) {
  const char *a = getenv("EXT_ALLOCATOR");
  bool hakmem = a && strncmp(a, "hakmem", 6) == 0;
  char out[65536];
  if (strcmp(p->name, "heap_entropy") == 0) {
    enum { RUNS = 300 };
    static uintptr_t seen[RUNS];
    int pairs = 0;
    for (int i = 0; i < RUNS; i++) {
      run_probe("print_address", out, sizeof out);
      seen[i] = (uintptr_t)strtoull(out, NULL, 16);
      for (int j = 0; j < i; j++) pairs += seen[j] == seen[i];
    }
    snprintf(what, cap, "%d of %d pairs of processes had the same address", pairs, RUNS * (RUNS - 1) / 2);
    return pairs == 0 ? "pass" : "FAIL";
  }
  if (strcmp(p->name, "ulimit_v") == 0) {
    limit_as = true;
    int st = run_probe("count_1m_blocks", out, sizeof out);
    long here = atol(out);
    no_preload = true;
    run_probe("count_1m_blocks", out, sizeof out);
    long glibc = atol(out);
    no_preload = limit_as = false;
    if (WIFSIGNALED(st)) snprintf(what, cap, "%s before it counted (glibc %ld blocks)", strsignal(WTERMSIG(st)), glibc);
    else snprintf(what, cap, "%ld blocks (glibc %ld)", here, glibc);
    return here * 10 >= glibc * 9 ? "pass" : "FAIL";
  }
  if (strcmp(p->name, "secure_yes") == 0 && !hakmem) { snprintf(what, cap, "hakmem's variable"); return "n/a"; }
  int st = run_probe(p->name, out, sizeof out);
  bool caught = WIFSIGNALED(st) && (WTERMSIG(st) == SIGABRT || WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS);
  bool forgery = strncmp(p->name, "forged", 6) == 0 || strcmp(p->name, "link_byte_changed") == 0;
  if (WIFSIGNALED(st)) snprintf(what, cap, "%s", strsignal(WTERMSIG(st)));
  else if (WEXITSTATUS(st) == 3) snprintf(what, cap, "malloc returned the attacker's address");
  else if (WEXITSTATUS(st) == 4) snprintf(what, cap, "malloc returned a misaligned or overlapping block");
  else if (WEXITSTATUS(st) == 5) { snprintf(what, cap, "no C++ runtime"); return "n/a"; }
  else if (forgery && WEXITSTATUS(st) == 0) snprintf(what, cap, "not followed, not reported");
  else snprintf(what, cap, "not caught (exit status %d)", WEXITSTATUS(st));
  return caught || (forgery && WIFEXITED(st) && WEXITSTATUS(st) == 0) ? "pass" : "FAIL";
}

int main(int argc, char **argv) {
  if (argc == 2 && argv[1][0] != '-') {
    if (strcmp(argv[1], "print_address") == 0) return print_address();
    if (strcmp(argv[1], "count_1m_blocks") == 0) return count_1m_blocks();
    for (size_t i = 0; i < PROBES; i++)
      if (probes[i].fn && strcmp(argv[1], probes[i].name) == 0) return probes[i].fn();
    fprintf(stderr, "hardening_probes: no probe %s\n", argv[1]);
    return 127;
  }
  if (argc != 2 || strcmp(argv[1], "--outcomes") != 0) {
    fprintf(stderr, "usage: hardening_probes --outcomes | PROBE\n");
    return 2;
  }
  for (size_t i = 0; i < PROBES; i++) {
    char what[512];
    const char *v = verdict(&probes[i], what, sizeof what);
    const char *expect = strncmp(probes[i].name, "forged", 6) == 0 || strcmp(probes[i].name, "link_byte_changed") == 0
                         ? "not followed" : strcmp(probes[i].name, "heap_entropy") == 0 ? "no two equal"
                         : strcmp(probes[i].name, "ulimit_v") == 0 ? "90 % of glibc's" : "caught";
    printf("%s\t%s\t%s\t%s\t%s\n", probes[i].name, probes[i].what, expect, v, what);
  }
  return 0;
}
