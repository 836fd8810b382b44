/* bench.h — what every benchmark program shares: a fast random generator,
 * a monotonic clock, the size distributions, and the one RESULT line that
 * bench/run.sh parses. */
#ifndef HAKMEM_BENCH_H
#define HAKMEM_BENCH_H
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* xorshift64: a few instructions, so the generator does not hide the allocator. */
static inline uint64_t rnd(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13; x ^= x >> 7; x ^= x << 17;
  return *s = x;
}

static inline uint64_t seed_of(long n) { return (uint64_t)(n + 1) * 0x9E3779B97F4A7C15ull | 1; }

static inline double clock_secs(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Wall-clock time, for multi-threaded runs: their waiting and contention are
 * part of what they measure. */
static inline double now(void) { return clock_secs(CLOCK_MONOTONIC); }

/* The process's CPU time, for single-thread runs: unlike wall time it does not
 * grow while a busy shared machine has the process waiting for a core. */
static inline double cpu_now(void) { return clock_secs(CLOCK_PROCESS_CPUTIME_ID); }

/* Size distributions, chosen by name on the command line:
 *   uniform  MIN..MAX
 *   app      80 % 16-256 B, 15 % 257 B-2 KiB, 5 % 2-32 KiB (a typical program)
 *   mid      75 % MIN..MAX, 25 % 16-512 B (mid-size buffers among small objects) */
enum dist { UNIFORM, APP, MID };

static inline enum dist dist_of(const char *name) {
  if (!name || strcmp(name, "uniform") == 0) return UNIFORM;
  if (strcmp(name, "app") == 0) return APP;
  if (strcmp(name, "mid") == 0) return MID;
  fprintf(stderr, "unknown distribution %s (uniform, app, mid)\n", name);
  exit(2);
}

/* x is a fresh random word; its low bits are left to the caller's slot choice. */
static inline size_t pick_size(uint64_t x, enum dist d, size_t lo, size_t hi) {
  uint64_t c = (x >> 32) % 100, y = x >> 40;
  if (d == APP) return c < 80 ? 16 + y % 241 : c < 95 ? 257 + y % 1792 : 2049 + y % 30720;
  if (d == MID && c >= 75) return 16 + y % 497;
  return lo + (size_t)((x >> 24) % (hi - lo + 1));
}

/* The RESULT line: ops, seconds, ops per second, then "key=value" extras. */
static inline void result(long ops, double secs, const char *extra_fmt, ...) {
  printf("RESULT ops=%ld secs=%.6f ops_per_sec=%.0f", ops, secs, (double)ops / secs);
  if (extra_fmt) {
    va_list ap;
    va_start(ap, extra_fmt);
    putchar(' ');
    vprintf(extra_fmt, ap);
    va_end(ap);
  }
  putchar('\n');
}

static inline void usage_if(int bad, const char *usage) {
  if (bad) { fprintf(stderr, "usage: %s\n", usage); exit(2); }
}
#endif
