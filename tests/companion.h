/* companion.h — for the unit tests that need hakmem's purger running. */
#ifndef HAKMEM_COMPANION_H
#define HAKMEM_COMPANION_H
#include "test.h"
#include "hakmem.h"

#include <pthread.h>

/* A second thread that has allocated (through hakmem's own names) and stays,
 * blocked, until the program ends: the program has two threads with heaps,
 * which is what makes hakmem start its purger (src/purge.c), at a malloc slow
 * path once they have lived 10 ms: the companion makes one 20 ms on.
 * Idempotent. */
static pthread_barrier_t test_companion_ready;
static void *test_companion(void *arg) {
  hakmem_free(hakmem_malloc(64));
  struct timespec ts = {0, 20 * 1000000L};
  nanosleep(&ts, NULL);
  hakmem_free(hakmem_malloc(1 << 20));              /* (a big block: a slow path) */
  pthread_barrier_wait(&test_companion_ready);
  for (;;) pause();
  return arg;
}
static inline void test_companion_start(void) {
  static pthread_t t;
  if (t) return;
  hakmem_free(hakmem_malloc(64));                  /* this thread's heap first (sanitizer builds) */
  pthread_barrier_init(&test_companion_ready, NULL, 2);
  if (pthread_create(&t, NULL, test_companion, NULL)) { fputs("companion.h: pthread_create failed\n", stderr); abort(); }
  pthread_barrier_wait(&test_companion_ready);      /* its heap (and segment) exists */
}

#endif
