/* false_sharing THREADS ITERS SIZE WRITES: passive false sharing, after
 * cache-scratch.  The main thread allocates one SIZE-byte block per thread,
 * back to back, so they share cache lines.  Each thread frees its block (a
 * remote free), then ITERS times mallocs a SIZE-byte block, writes it WRITES
 * times and frees it.  An allocator that hands a thread memory another thread
 * is writing makes the cache line bounce between cores.  Reports malloc+write
 * rounds per second, and shared_lines: how many threads' blocks shared a cache
 * line with another thread's (0 is the good answer). */
#include "bench.h"

#include <pthread.h>

static long iters, writes;
static size_t size;
static char **gift;       /* gift[i]: thread i's block from the main thread */
static uintptr_t *seen;   /* seen[i]: the first block thread i allocated itself */

static void *worker(void *arg) {
  intptr_t me = (intptr_t)arg;
  free(gift[me]);
  for (long i = 0; i < iters; i++) {
    volatile char *p = malloc(size);
    if (i == 0) seen[me] = (uintptr_t)p;
    for (long w = 0; w < writes; w++) p[w % (long)size] = (char)w;
    free((void *)p);
  }
  return NULL;
}

int main(int argc, char **argv) {
  usage_if(argc < 5, "false_sharing THREADS ITERS SIZE WRITES");
  int threads = atoi(argv[1]);
  iters = atol(argv[2]); size = (size_t)atol(argv[3]); writes = atol(argv[4]);
  gift = malloc(sizeof *gift * (size_t)threads);
  seen = calloc((size_t)threads, sizeof *seen);
  for (int i = 0; i < threads; i++) gift[i] = malloc(size);
  pthread_t *t = malloc(sizeof *t * (size_t)threads);
  double t0 = now();
  for (intptr_t i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  double secs = now() - t0;
  int shared = 0;
  for (int i = 0; i < threads; i++)
    for (int j = 0; j < threads; j++)
      if (i != j && seen[i] / 64 == seen[j] / 64) { shared++; break; }
  result(iters * threads, secs, "shared_lines=%d", shared);
  free(t);
  free(seen);
  free(gift);
  return 0;
}
