/* fixed_size ITERS SIZE BATCH [ALIGN]: the hottest path there is.  Allocate
 * BATCH blocks of SIZE bytes (touching each), free them in reverse order
 * (LIFO), repeat until ITERS malloc+free pairs are done.  With ALIGN, the
 * blocks come from posix_memalign with that alignment (what C++'s aligned
 * new and Rust's allocator call for over-aligned types).  Single thread.
 * Reports pairs per CPU second. */
#include "bench.h"

int main(int argc, char **argv) {
  usage_if(argc < 4, "fixed_size ITERS SIZE BATCH [ALIGN]");
  long iters = atol(argv[1]);
  size_t size = (size_t)atol(argv[2]);
  long batch = atol(argv[3]);
  size_t align = argc > 4 ? (size_t)atol(argv[4]) : 0;
  char **p = malloc(sizeof *p * (size_t)batch);
  long rounds = iters / batch;
  double t0 = cpu_now();
  for (long r = 0; r < rounds; r++) {
    for (long i = 0; i < batch; i++) {
      if (!align) p[i] = malloc(size);
      else if (posix_memalign((void **)&p[i], align, size)) { fprintf(stderr, "posix_memalign failed\n"); return 1; }
      p[i][0] = (char)i;
    }
    for (long i = batch - 1; i >= 0; i--) free(p[i]);
  }
  double secs = cpu_now() - t0;
  free(p);
  result(rounds * batch, secs, "mallocs=%ld", rounds * batch);
  return 0;
}
