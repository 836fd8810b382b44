/* mt_remote THREADS ITERS WS MIN MAX REMOTE_PCT: each thread runs a working
 * set like random_mixed; with probability REMOTE_PCT a block it would free is
 * instead handed (in batches of 64) to another thread, which frees it.  A
 * sender waits (draining its own mailbox) while the receiver has more than 16
 * batches pending, so the benchmark measures the allocator, not queue growth. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BATCH 64
typedef struct batch { struct batch *next; int n; void *p[BATCH]; } batch_t;
#define MAX_PENDING 16
typedef struct { _Atomic(batch_t *) inbox; _Atomic int pending, done; char pad[48]; } mailbox_t;

static int threads, pct;
static long iters;
static size_t ws, lo, hi;
static mailbox_t *box;
static _Atomic long sent, frees;

static void drain(int me) {
  batch_t *b = atomic_exchange(&box[me].inbox, NULL);
  while (b) {
    atomic_fetch_sub(&box[me].pending, 1);
    batch_t *next = b->next;
    for (int i = 0; i < b->n; i++) free(b->p[i]);
    free(b);
    b = next;
  }
}

static void post(int me, int to, batch_t *b) {
  while (atomic_load(&box[to].pending) >= MAX_PENDING && !atomic_load(&box[to].done)) { drain(me); sched_yield(); }
  atomic_fetch_add(&box[to].pending, 1);
  batch_t *h = atomic_load(&box[to].inbox);
  do b->next = h; while (!atomic_compare_exchange_weak(&box[to].inbox, &h, b));
}

static void *worker(void *arg) {
  int me = (int)(intptr_t)arg;
  uint64_t s = (uint64_t)(me + 1) * 0x9E3779B97F4A7C15ull;
  void **slot = calloc(ws, sizeof *slot);
  batch_t *out = malloc(sizeof *out);
  out->n = 0;
  long my_sent = 0, my_frees = 0;
  for (long i = 0; i < iters; i++) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    size_t k = (size_t)(s % ws);
    if (slot[k]) {
      my_frees++;
      if ((int)((s >> 32) % 100) < pct && threads > 1) {
        out->p[out->n++] = slot[k];
        my_sent++;
        if (out->n == BATCH) {
          post(me, (me + 1 + (int)((s >> 48) % (uint64_t)(threads - 1))) % threads, out);
          out = malloc(sizeof *out);
          out->n = 0;
        }
      } else {
        free(slot[k]);
      }
      slot[k] = NULL;
    } else {
      size_t n = lo + (size_t)((s >> 24) % (hi - lo + 1));
      char *p = malloc(n);
      p[0] = 1;
      slot[k] = p;
    }
    if ((i & 127) == 0) drain(me);
  }
  atomic_store(&box[me].done, 1);   /* senders stop waiting on us; main drains the rest */
  for (int i = 0; i < out->n; i++) free(out->p[i]);
  free(out);
  for (size_t k = 0; k < ws; k++) free(slot[k]);
  free(slot);
  atomic_fetch_add(&sent, my_sent);
  atomic_fetch_add(&frees, my_frees);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 7) { fprintf(stderr, "usage: %s THREADS ITERS WS MIN MAX REMOTE_PCT\n", argv[0]); return 2; }
  threads = atoi(argv[1]); iters = atol(argv[2]); ws = (size_t)atol(argv[3]);
  lo = (size_t)atol(argv[4]); hi = (size_t)atol(argv[5]); pct = atoi(argv[6]);
  box = calloc((size_t)threads, sizeof *box);
  pthread_t *t = malloc(sizeof *t * (size_t)threads);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < threads; i++) drain(i);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
  long ops = iters * threads;
  printf("RESULT ops=%ld secs=%.6f ops_per_sec=%.0f remote_pct=%.1f\n", ops, secs, (double)ops / secs,
         frees ? 100.0 * (double)sent / (double)frees : 0.0);
  return 0;
}
