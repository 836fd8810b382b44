/* random_mixed ITERS WS MIN MAX SEED [app]: a working set of WS slots; each
 * step picks a slot, frees its block if it has one, else allocates a size
 * uniform in [MIN, MAX] (or, with "app", 80 % 16-256, 15 % 257-2048,
 * 5 % 2049-32768) and writes its first and last byte. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t s;
static uint64_t rnd(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }

int main(int argc, char **argv) {
  if (argc < 6) { fprintf(stderr, "usage: %s ITERS WS MIN MAX SEED [app]\n", argv[0]); return 2; }
  long iters = atol(argv[1]);
  size_t ws = (size_t)atol(argv[2]), lo = (size_t)atol(argv[3]), hi = (size_t)atol(argv[4]);
  s = (uint64_t)atoll(argv[5]) * 0x9E3779B97F4A7C15ull | 1;
  int app = argc > 6 && strcmp(argv[6], "app") == 0;
  unsigned char **slot = calloc(ws, sizeof *slot);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < iters; i++) {
    uint64_t x = rnd();
    size_t k = (size_t)(x % ws);
    if (slot[k]) { free(slot[k]); slot[k] = NULL; continue; }
    size_t n;
    if (app) {
      uint64_t c = (x >> 32) % 100, y = x >> 40;
      n = c < 80 ? 16 + y % 241 : c < 95 ? 257 + y % 1792 : 2049 + y % 30720;
    } else {
      n = lo + (size_t)((x >> 24) % (hi - lo + 1));
    }
    unsigned char *p = malloc(n);
    p[0] = (unsigned char)i;
    p[n - 1] = (unsigned char)i;
    slot[k] = p;
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  for (size_t k = 0; k < ws; k++) free(slot[k]);
  double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
  printf("RESULT ops=%ld secs=%.6f ops_per_sec=%.0f\n", iters, secs, (double)iters / secs);
  return 0;
}
