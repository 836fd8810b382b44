/* rss_free THREADS MB idle|exit: does memory go back to the OS after a burst?
 * THREADS threads together allocate MB MiB of mixed-size blocks (70 % 16-256 B,
 * 25 % 257 B-4 KiB, 5 % 4-256 KiB, each written); then each frees half of
 * its own blocks and the other half of its neighbour's (remote frees).  Once
 * the last block is freed the threads either stay alive but idle ("idle",
 * like a server's workers between bursts) or exit ("exit"), and the main
 * thread samples its RSS from /proc/self/statm at 0, 50, 100 and 200 ms,
 * doing a little malloc/free meanwhile as a real program would (no
 * malloc_trim).  Reports blocks per second of the build and free, and the RSS
 * samples in KiB. */
#include "bench.h"

#include <pthread.h>
#include <unistd.h>

static int threads;
static size_t budget;          /* bytes per thread */
static void ***blocks;         /* blocks[t]: thread t's blocks */
static long *count;
static int stay_idle;
static pthread_barrier_t built, remote_done, freed, done;

static size_t rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) { if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0; fclose(f); }
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE) / 1024;
}

static size_t burst_size(uint64_t x) {
  uint64_t c = (x >> 32) % 100, y = x >> 40;
  return c < 70 ? 16 + y % 241 : c < 95 ? 257 + y % 3840 : 4097 + y % (256 * 1024 - 4096);
}

static void *worker(void *arg) {
  int me = (int)(intptr_t)arg, next = (me + 1) % threads;
  uint64_t s = seed_of(me);
  size_t cap = 1024, total = 0;
  long n = 0;
  void **b = malloc(sizeof *b * cap);
  while (total < budget) {
    size_t sz = burst_size(rnd(&s));
    if ((size_t)n == cap) b = realloc(b, sizeof *b * (cap *= 2));
    b[n] = malloc(sz);
    memset(b[n++], 1, sz);
    total += sz;
  }
  blocks[me] = b;
  count[me] = n;
  pthread_barrier_wait(&built);
  for (long i = 0; i < count[me]; i += 2) free(blocks[me][i]);
  for (long i = 1; i < count[next]; i += 2) free(blocks[next][i]);
  pthread_barrier_wait(&remote_done);   /* the neighbour no longer reads b */
  free(b);
  pthread_barrier_wait(&freed);
  if (stay_idle) pthread_barrier_wait(&done);   /* until the sampling is over */
  return NULL;
}

/* A little activity between samples: what an idle program still does. */
static void idle_until(double t) {
  while (now() < t) {
    void *a = malloc(64), *b = malloc(1024), *c = malloc(16384);
    ((char *)a)[0] = ((char *)b)[0] = ((char *)c)[0] = 1;
    free(c); free(b); free(a);
    usleep(1000);
  }
}

int main(int argc, char **argv) {
  usage_if(argc < 4 || (strcmp(argv[3], "idle") != 0 && strcmp(argv[3], "exit") != 0), "rss_free THREADS MB idle|exit");
  threads = atoi(argv[1]);
  budget = (size_t)atol(argv[2]) * 1024 * 1024 / (size_t)threads;
  blocks = calloc((size_t)threads, sizeof *blocks);
  count = calloc((size_t)threads, sizeof *count);
  stay_idle = strcmp(argv[3], "idle") == 0;
  pthread_barrier_init(&built, NULL, (unsigned)threads);
  pthread_barrier_init(&remote_done, NULL, (unsigned)threads);
  pthread_barrier_init(&freed, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
  pthread_t *t = malloc(sizeof *t * (size_t)threads);
  double t0 = now();
  for (intptr_t i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  pthread_barrier_wait(&freed);
  double last_free = now();
  static const int at_ms[] = { 0, 50, 100, 200 };
  size_t rss[4];
  for (int i = 0; i < 4; i++) {
    idle_until(last_free + at_ms[i] / 1000.0);
    rss[i] = rss_kib();
  }
  if (stay_idle) pthread_barrier_wait(&done);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  long ops = 0;
  for (int i = 0; i < threads; i++) ops += count[i];
  result(ops, last_free - t0, "rss0_kib=%zu rss50_kib=%zu rss100_kib=%zu rss200_kib=%zu", rss[0], rss[1], rss[2],
         rss[3]);
  free(t);
  return 0;
}
