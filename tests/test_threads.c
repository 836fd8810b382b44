/* 10,000 threads alive at once (64 KiB stacks), each allocating blocks of
 * several sizes with plain malloc (hakmem in the normal build), all waiting
 * until every thread is alive, then allocating again, verifying and freeing.
 * malloc must never return NULL.  A system limit that stops thread creation
 * is a failure that names the limit values and the count reached. */
#define TEST_DEFAULT_TIMEOUT 240      /* one long case; slow machines */
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>

#define NTHREADS 10000
#define NSIZES 5

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open;                 /* 1: go on; under gate_lock */
static atomic_int alive, failures, nulls;

static size_t size_of(size_t i, int k) {
  switch (k) {
  case 0: return 1 + i % 200;
  case 1: return 16 + i % 1000;
  case 2: return 4000 + i % 3000;
  case 3: return 40000;
  default: return 300000;
  }
}
static unsigned char tag_of(size_t i, int k) { return (unsigned char)(i * 7 + (size_t)k * 31 + 1); }

static void *worker(void *arg) {
  size_t i = (size_t)(uintptr_t)arg;
  unsigned char *p[NSIZES];
  for (int k = 0; k < NSIZES; k++) {
    size_t n = size_of(i, k);
    p[k] = malloc(n);
    if (!p[k]) { atomic_fetch_add(&nulls, 1); continue; }
    memset(p[k], tag_of(i, k), n < 8192 ? n : 8192);
    p[k][n - 1] = tag_of(i, k);
  }
  atomic_fetch_add(&alive, 1);
  pthread_mutex_lock(&gate_lock);
  while (!gate_open) pthread_cond_wait(&gate_cond, &gate_lock);
  pthread_mutex_unlock(&gate_lock);
  /* all threads alive: allocate once more, concurrently */
  void *extra = malloc(64 + i % 4000);
  if (!extra) atomic_fetch_add(&nulls, 1);
  else memset(extra, 1, 64);
  for (int k = 0; k < NSIZES; k++) {
    if (!p[k]) continue;
    size_t n = size_of(i, k), m = n < 8192 ? n : 8192;
    unsigned char t = tag_of(i, k);
    int ok = p[k][n - 1] == t;
    for (size_t j = 0; j < m && ok; j++) ok = p[k][j] == t;
    if (!ok) atomic_fetch_add(&failures, 1);
    free(p[k]);
  }
  free(extra);
  return NULL;
}

static long read_long(const char *path) {
  FILE *f = fopen(path, "r");
  long v = -1;
  if (f) { if (fscanf(f, "%ld", &v) != 1) v = -1; fclose(f); }
  return v;
}

TEST(ten_thousand_live_threads) {
  struct rlimit rl;
  getrlimit(RLIMIT_NPROC, &rl);
  char nproc[64];
  if (rl.rlim_cur == RLIM_INFINITY) snprintf(nproc, sizeof nproc, "unlimited");
  else snprintf(nproc, sizeof nproc, "%llu", (unsigned long long)rl.rlim_cur);
  long threads_max = read_long("/proc/sys/kernel/threads-max"), pid_max = read_long("/proc/sys/kernel/pid_max");
  long map_count = read_long("/proc/sys/vm/max_map_count");
  NOTE("limits: ulimit -u %s, threads-max %ld, pid_max %ld, vm.max_map_count %ld", nproc, threads_max, pid_max, map_count);

  pthread_t *t = malloc(sizeof(pthread_t) * NTHREADS);
  CHECK(t != NULL);
  if (!t) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  int created = 0, err = 0;
  for (; created < NTHREADS; created++)
    if ((err = pthread_create(&t[created], &attr, worker, (void *)(uintptr_t)created)) != 0) break;
  pthread_attr_destroy(&attr);
  CHECKF(created == NTHREADS,
         "pthread_create failed with %s after %d of %d threads (ulimit -u %s, threads-max %ld, pid_max %ld, "
         "vm.max_map_count %ld): raise the limit", err == EAGAIN ? "EAGAIN" : strerror(err), created, NTHREADS,
         nproc, threads_max, pid_max, map_count);
  /* Wait until every created thread has allocated and is waiting. */
  for (int spins = 0; atomic_load(&alive) < created && spins < 60000; spins++) usleep(1000);
  int peak = atomic_load(&alive);
  CHECKF(peak == created, "only %d of %d threads reached the gate", peak, created);
  if (created == NTHREADS) NOTE("%d threads alive at once", peak);
  pthread_mutex_lock(&gate_lock);
  gate_open = 1;
  pthread_cond_broadcast(&gate_cond);
  pthread_mutex_unlock(&gate_lock);
  for (int i = 0; i < created; i++) pthread_join(t[i], NULL);
  free(t);
  CHECKF(atomic_load(&nulls) == 0, "malloc returned NULL %d times", atomic_load(&nulls));
  CHECKF(atomic_load(&failures) == 0, "%d blocks lost their content", atomic_load(&failures));
}

TEST_MAIN()
