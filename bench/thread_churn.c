/* thread_churn ROUNDS THREADS PER_THREAD: short-lived threads.  Each round
 * starts THREADS threads; each allocates PER_THREAD blocks of 16-1024 bytes,
 * frees seven in eight of them and leaves the rest to the main thread, which
 * frees them after the thread has exited.  Measures the allocator's cost of
 * setting up and tearing down a thread's heap.  Reports threads per second. */
#include "bench.h"

#include <pthread.h>

static long per_thread;

static void *worker(void *arg) {
  void **keep = arg;
  uint64_t s = seed_of((long)(uintptr_t)arg);
  void **p = malloc(sizeof *p * (size_t)per_thread);
  for (long i = 0; i < per_thread; i++) {
    size_t n = 16 + rnd(&s) % 1009;
    p[i] = malloc(n);
    ((char *)p[i])[0] = 1;
  }
  for (long i = 0; i < per_thread; i++) {
    if (i % 8 == 0) keep[i / 8] = p[i];
    else free(p[i]);
  }
  free(p);
  return NULL;
}

int main(int argc, char **argv) {
  usage_if(argc < 4, "thread_churn ROUNDS THREADS PER_THREAD");
  long rounds = atol(argv[1]);
  int threads = atoi(argv[2]);
  per_thread = atol(argv[3]);
  long kept = (per_thread + 7) / 8;
  pthread_t *t = malloc(sizeof *t * (size_t)threads);
  void ***keep = malloc(sizeof *keep * (size_t)threads);
  for (int i = 0; i < threads; i++) keep[i] = malloc(sizeof **keep * (size_t)kept);
  double t0 = now();
  for (long r = 0; r < rounds; r++) {
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, keep[i]);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < threads; i++)
      for (long k = 0; k < kept; k++) free(keep[i][k]);
  }
  double secs = now() - t0;
  result(rounds * threads, secs, NULL);
  for (int i = 0; i < threads; i++) free(keep[i]);
  free(keep);
  free(t);
  return 0;
}
