/* larson THREADS SECONDS SLOTS MIN MAX ROUNDS: a server-like load after
 * Larson and Krishnan.  Each of THREADS workers owns SLOTS blocks and
 * replaces a random one ROUNDS times (free, then malloc a size in
 * [MIN, MAX]); then it starts a successor thread that inherits the blocks (so
 * blocks outlive the thread that allocated them) and exits.  Runs for
 * SECONDS and reports replacements per second. */
#include "bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

typedef struct {
  void **slot;
  uint64_t seed;
  int id;
} work_t;

static int nslots, rounds;
static size_t lo, hi;
static atomic_int stop;
static _Atomic long total_ops, generations;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int live;

static void *worker(void *arg) {
  work_t *w = arg;
  uint64_t s = w->seed;
  long ops = 0;
  for (int r = 0; r < rounds && !atomic_load_explicit(&stop, memory_order_relaxed); r++) {
    rnd(&s);
    int k = (int)(s % (uint64_t)nslots);
    free(w->slot[k]);
    size_t n = lo + (size_t)((s >> 24) % (hi - lo + 1));
    char *p = malloc(n);
    p[0] = (char)r;
    w->slot[k] = p;
    ops++;
  }
  atomic_fetch_add(&total_ops, ops);
  if (!atomic_load(&stop)) {               /* hand the blocks to a successor */
    w->seed = s;
    atomic_fetch_add(&generations, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, w) == 0) { pthread_detach(t); return NULL; }
  }
  pthread_mutex_lock(&lock);
  live--;
  pthread_cond_signal(&cond);
  pthread_mutex_unlock(&lock);
  return NULL;
}

int main(int argc, char **argv) {
  usage_if(argc < 7, "larson THREADS SECONDS SLOTS MIN MAX ROUNDS");
  int threads = atoi(argv[1]);
  double seconds = atof(argv[2]);
  nslots = atoi(argv[3]); lo = (size_t)atol(argv[4]); hi = (size_t)atol(argv[5]); rounds = atoi(argv[6]);
  work_t *w = calloc((size_t)threads, sizeof *w);
  for (int i = 0; i < threads; i++) {      /* the initial blocks come from the main thread */
    w[i].slot = malloc(sizeof(void *) * (size_t)nslots);
    w[i].seed = seed_of(i);
    w[i].id = i;
    for (int k = 0; k < nslots; k++) w[i].slot[k] = malloc(lo + (size_t)k % (hi - lo + 1));
  }
  double t0 = now();
  live = threads;
  for (int i = 0; i < threads; i++) {
    pthread_t t;
    pthread_create(&t, NULL, worker, &w[i]);
    pthread_detach(t);
  }
  usleep((useconds_t)(seconds * 1e6));
  atomic_store(&stop, 1);
  pthread_mutex_lock(&lock);
  while (live > 0) pthread_cond_wait(&cond, &lock);
  pthread_mutex_unlock(&lock);
  double secs = now() - t0;
  for (int i = 0; i < threads; i++) {
    for (int k = 0; k < nslots; k++) free(w[i].slot[k]);
    free(w[i].slot);
  }
  result(atomic_load(&total_ops), secs, "threads_created=%ld", atomic_load(&generations));
  return 0;
}
