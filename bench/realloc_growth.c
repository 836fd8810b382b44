/* realloc_growth ITERS BUFS MAX STEP: buffers that grow by appending, as
 * string builders and vectors without capacity do.  Each step picks one of
 * BUFS buffers at random and grows it by 1..STEP bytes with realloc, writing
 * the new last byte; a buffer past MAX bytes is freed and starts again empty.
 * The buffers interleave, so growing in place is not free.  Single thread.
 * Reports reallocs per CPU second and the percentage that moved the block. */
#include "bench.h"

int main(int argc, char **argv) {
  usage_if(argc < 5, "realloc_growth ITERS BUFS MAX STEP");
  long iters = atol(argv[1]);
  int bufs = atoi(argv[2]);
  size_t max = (size_t)atol(argv[3]), step = (size_t)atol(argv[4]);
  char **buf = calloc((size_t)bufs, sizeof *buf);
  size_t *len = calloc((size_t)bufs, sizeof *len);
  uint64_t s = seed_of(0);
  long moved = 0;
  double t0 = cpu_now();
  for (long i = 0; i < iters; i++) {
    uint64_t x = rnd(&s);
    int k = (int)(x % (uint64_t)bufs);
    if (len[k] > max) { free(buf[k]); buf[k] = NULL; len[k] = 0; }
    len[k] += 1 + (x >> 32) % step;
    char *p = realloc(buf[k], len[k]);
    moved += buf[k] != NULL && p != buf[k];
    p[len[k] - 1] = (char)i;
    buf[k] = p;
  }
  double secs = cpu_now() - t0;
  for (int k = 0; k < bufs; k++) free(buf[k]);
  result(iters, secs, "moved_pct=%.1f", 100.0 * (double)moved / (double)iters);
  free(buf);
  free(len);
  return 0;
}
