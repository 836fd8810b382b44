/* 10,000 threads alive at once, each allocating; malloc never fails. */
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define NTHREADS 10000
static pthread_barrier_t all_alive;
static atomic_int failures;

static void *worker(void *arg) {
  size_t i = (size_t)(uintptr_t)arg;
  size_t sizes[4] = {16 + i % 1000, 4000 + i % 3000, 40000, 300000};
  unsigned char *p[4];
  for (int k = 0; k < 4; k++) {
    p[k] = malloc(sizes[k]);
    if (!p[k]) { atomic_fetch_add(&failures, 1); continue; }
    memset(p[k], (int)(i & 0xff), sizes[k] < 4096 ? sizes[k] : 4096);
  }
  pthread_barrier_wait(&all_alive);
  for (int k = 0; k < 4; k++) {
    if (p[k] && (p[k][0] != (unsigned char)i || p[k][sizes[k] < 4096 ? sizes[k] - 1 : 4095] != (unsigned char)i))
      atomic_fetch_add(&failures, 1);
    free(p[k]);
  }
  return NULL;
}

TEST(ten_thousand_live_threads) {
  pthread_t *t = malloc(sizeof(pthread_t) * NTHREADS);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_barrier_init(&all_alive, NULL, NTHREADS + 1);
  int created = 0, err = 0;
  for (; created < NTHREADS; created++)
    if ((err = pthread_create(&t[created], &attr, worker, (void *)(uintptr_t)created)) != 0) break;
  CHECKF(created == NTHREADS, "pthread_create failed (error %d) after %d threads: a system limit (ulimit -u, threads-max, vm.max_map_count)?", err, created);
  if (created < NTHREADS) {   /* release the ones we have: the barrier expects all */
    printf("not ok - test_threads.c:ten_thousand_live_threads: %s\n", test_reason);
    exit(1);
  }
  pthread_barrier_wait(&all_alive);
  for (int i = 0; i < created; i++) pthread_join(t[i], NULL);
  free(t);
  CHECKF(atomic_load(&failures) == 0, "%d allocations failed or lost content", atomic_load(&failures));
}

TEST_MAIN()
