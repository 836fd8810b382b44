/* random_mixed ITERS WS MIN MAX SEED [DIST]: a working set of WS slots; each
 * step picks a random slot and frees its block if it has one, else allocates
 * a size from DIST (uniform MIN..MAX by default, or "app", see bench.h) and
 * writes its first and last byte.  Single thread.  Reports steps per CPU second,
 * and the number of mallocs (each later freed) for the instruction counts. */
#include "bench.h"

int main(int argc, char **argv) {
  usage_if(argc < 6, "random_mixed ITERS WS MIN MAX SEED [uniform|app|mid]");
  long iters = atol(argv[1]);
  size_t ws = (size_t)atol(argv[2]), lo = (size_t)atol(argv[3]), hi = (size_t)atol(argv[4]);
  uint64_t s = seed_of(atol(argv[5]));
  enum dist d = dist_of(argc > 6 ? argv[6] : NULL);
  unsigned char **slot = calloc(ws, sizeof *slot);
  long mallocs = 0;
  double t0 = cpu_now();
  for (long i = 0; i < iters; i++) {
    uint64_t x = rnd(&s);
    size_t k = (size_t)(x % ws);
    if (slot[k]) { free(slot[k]); slot[k] = NULL; continue; }
    size_t n = pick_size(x, d, lo, hi);
    unsigned char *p = malloc(n);
    p[0] = (unsigned char)i;
    p[n - 1] = (unsigned char)i;
    slot[k] = p;
    mallocs++;
  }
  double secs = cpu_now() - t0;
  for (size_t k = 0; k < ws; k++) free(slot[k]);
  free(slot);
  result(iters, secs, "mallocs=%ld", mallocs);
  return 0;
}
