/* prodcons PAIRS ITERS MIN MAX [fanin]: producer/consumer, after xmalloc-test.
 * Each of PAIRS producers allocates ITERS blocks of MIN..MAX bytes and passes
 * them through a ring to its consumer, which frees them: every free is remote
 * and the freeing thread never allocates.  With "fanin" one consumer serves
 * every ring, a block of each in turn, so that consecutive frees are of
 * different threads' blocks.  Reports blocks per second. */
#include "bench.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define RING 4096          /* a power of two */
#define PUBLISH 32         /* the producer publishes its index every 32 blocks */
typedef struct {
  _Alignas(64) _Atomic long tail;   /* written by the producer */
  _Alignas(64) _Atomic long head;   /* written by the consumer */
  void *slot[RING];
} ring_t;

static long iters;
static size_t lo, hi;
static ring_t *ring;

static void *producer(void *arg) {
  ring_t *r = &ring[(intptr_t)arg];
  uint64_t s = seed_of((intptr_t)arg);
  long head = 0;
  for (long i = 0; i < iters; i++) {
    while (i - head >= RING) {                     /* full: publish, wait for the consumer */
      atomic_store_explicit(&r->tail, i, memory_order_release);
      head = atomic_load_explicit(&r->head, memory_order_acquire);
      if (i - head >= RING) sched_yield();
    }
    uint64_t x = rnd(&s);
    char *p = malloc(lo + (size_t)((x >> 24) % (hi - lo + 1)));
    p[0] = 1;
    r->slot[i & (RING - 1)] = p;
    if ((i + 1) % PUBLISH == 0) atomic_store_explicit(&r->tail, i + 1, memory_order_release);
  }
  atomic_store_explicit(&r->tail, iters, memory_order_release);
  return NULL;
}

static void *consumer(void *arg) {
  ring_t *r = &ring[(intptr_t)arg];
  long head = 0;
  while (head < iters) {
    long tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (tail == head) { sched_yield(); continue; }
    for (; head < tail; head++) free(r->slot[head & (RING - 1)]);
    atomic_store_explicit(&r->head, head, memory_order_release);
  }
  return NULL;
}

/* one consumer for every ring: a block of each in turn */
static int rings;
static void *fan_in(void *arg) {
  (void)arg;
  long *head = calloc((size_t)rings, sizeof *head), left = iters * rings;
  while (left) {
    long freed = 0;
    for (int k = 0; k < rings; k++) {
      ring_t *r = &ring[k];
      if (head[k] == atomic_load_explicit(&r->tail, memory_order_acquire)) continue;
      free(r->slot[head[k]++ & (RING - 1)]);
      freed++;
      if (head[k] % PUBLISH == 0 || head[k] == iters) atomic_store_explicit(&r->head, head[k], memory_order_release);
    }
    if (!freed) sched_yield();
    left -= freed;
  }
  free(head);
  return NULL;
}

int main(int argc, char **argv) {
  usage_if(argc < 5, "prodcons PAIRS ITERS MIN MAX [fanin]");
  int pairs = atoi(argv[1]);
  iters = atol(argv[2]); lo = (size_t)atol(argv[3]); hi = (size_t)atol(argv[4]);
  ring = aligned_alloc(64, sizeof *ring * (size_t)pairs);
  memset(ring, 0, sizeof *ring * (size_t)pairs);
  int fanin = argc > 5 && strcmp(argv[5], "fanin") == 0;
  rings = pairs;
  pthread_t *t = malloc(sizeof *t * 2 * (size_t)pairs);
  int n = 0;
  double t0 = now();
  for (intptr_t i = 0; i < pairs; i++) {
    pthread_create(&t[n++], NULL, producer, (void *)i);
    if (!fanin) pthread_create(&t[n++], NULL, consumer, (void *)i);
  }
  if (fanin) pthread_create(&t[n++], NULL, fan_in, NULL);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  double secs = now() - t0;
  result(iters * pairs, secs, NULL);
  free(t);
  free(ring);
  return 0;
}
