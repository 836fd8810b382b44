/* Where blocks lie is random across runs (issue 34, item 2): 300 fresh
 * processes (this program run again, with execve: a fork would inherit its
 * parent's layout) each print the address of their first block of several
 * kinds, and for each kind the test counts the distinct addresses and
 * estimates how many bits of randomness they have, two ways, and takes the
 * lower: the sum over address bits of each bit's entropy as observed (bits
 * that never vary count 0; correlated bits would count too much, which the
 * other estimate bounds), and the logarithm of the spread of the addresses
 * (max - min) in units of the coarsest step they all differ by (what a
 * uniform choice among that many addresses would have). */
#include "test.h"
#include "hakmem.h"
#include "internal.h"

#include <spawn.h>

#define RUNS 300
#define KINDS 5
static const struct { const char *name; size_t size; double min_bits; } kinds[KINDS] = {
  { "16 B", 16, 28 },
  { "1 KiB", 1024, 28 },
  { "8 KiB (thread cache)", 8192, 28 },
  { "1 MiB (large)", 1 << 20, 28 },
  { "16 MiB (huge)", 16 << 20, 28 },
};

/* The child: its first block of each kind, one address a line. */
__attribute__((constructor)) static void child(void) {
  if (!getenv("TEST_ENTROPY_CHILD")) return;
  for (int k = 0; k < KINDS; k++) printf("%lx\n", (unsigned long)(uintptr_t)hakmem_malloc(kinds[k].size));
  fflush(stdout);
  _exit(0);
}

extern char **environ;

/* One child's addresses; false if it did not give them all. */
static bool run_child(uintptr_t out[KINDS]) {
  int fd[2];
  if (pipe(fd)) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
  posix_spawn_file_actions_addclose(&fa, fd[0]);
  char *argv[] = { "test_entropy", NULL };
  char *envp[] = { "TEST_ENTROPY_CHILD=1", NULL };
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  close(fd[1]);
  if (rc) { close(fd[0]); return false; }
  FILE *f = fdopen(fd[0], "r");
  int got = 0;
  unsigned long a;
  while (got < KINDS && f && fscanf(f, "%lx", &a) == 1) out[got++] = a;
  if (f) fclose(f);
  int st;
  waitpid(pid, &st, 0);
  return got == KINDS && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* lg(x), x > 0, to 2^-40 (no libm): the exponent, then the mantissa's
 * bits one by one by squaring. */
static double lg(double x) {
  double r = 0;
  while (x >= 2) { x /= 2; r++; }
  while (x < 1) { x *= 2; r--; }
  for (double bit = 0.5; bit > 1e-12; bit /= 2) {
    x *= x;
    if (x >= 2) { x /= 2; r += bit; }
  }
  return r;
}

static double bit_entropy(double p) { return p <= 0 || p >= 1 ? 0 : -(p * lg(p) + (1 - p) * lg(1 - p)); }

static int cmp_addr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

TEST(heap_addresses_vary_across_runs) {
  if (TEST_SANITIZER_BUILD) {
    SKIP("sanitizer build: segments go where the sanitizer's mmap puts them (os.c: HINT_OFF)");
    return;
  }
  static uintptr_t addr[KINDS][RUNS];
  for (int r = 0; r < RUNS; r++) {
    uintptr_t one[KINDS];
    if (!run_child(one)) { CHECKF(0, "run %d: the child gave no addresses", r); return; }
    for (int k = 0; k < KINDS; k++) addr[k][r] = one[k];
  }
  for (int k = 0; k < KINDS; k++) {
    uintptr_t *v = addr[k];
    double per_bit = 0;
    for (int b = 0; b < 64; b++) {
      int ones = 0;
      for (int r = 0; r < RUNS; r++) ones += (int)(v[r] >> b & 1);
      per_bit += bit_entropy((double)ones / RUNS);
    }
    uintptr_t step = 0;
    for (int r = 1; r < RUNS; r++) step |= v[r] ^ v[0];
    step &= -step;                             /* the lowest bit any two differ in */
    qsort(v, RUNS, sizeof v[0], cmp_addr);
    int distinct = 1;
    for (int r = 1; r < RUNS; r++) distinct += v[r] != v[r - 1];
    double spread = step ? lg((double)((v[RUNS - 1] - v[0]) / step) + 1) : 0;
    double bits = per_bit < spread ? per_bit : spread;
    NOTE("%-22s %3d distinct of %d; %.1f bits (bit by bit %.1f, spread %.1f, in steps of %#lx)", kinds[k].name,
         distinct, RUNS, bits, per_bit, spread, (unsigned long)step);
    CHECKF(bits >= kinds[k].min_bits, "%s: %.1f bits of randomness, fewer than %.0f", kinds[k].name, bits,
           kinds[k].min_bits);
    CHECKF(distinct >= RUNS - 1, "%s: only %d distinct addresses in %d runs", kinds[k].name, distinct, RUNS);
  }
}

TEST_MAIN()
