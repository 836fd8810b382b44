/* mt_remote THREADS ITERS WS MIN MAX REMOTE_PCT [DIST]: each thread runs a
 * working set like random_mixed (ITERS steps each, sizes from DIST); with
 * probability REMOTE_PCT a block it would free is instead handed (in batches
 * of 64) to a random other thread still running, which frees it.  A sender
 * waits (draining its own mailbox) while the receiver has more than 16
 * batches pending, so the benchmark measures the allocator, not queue growth.
 * Reports steps per second over all threads and the remote percentage
 * actually achieved (a little under REMOTE_PCT: the last thread running has
 * no one to send to).
 * With REMOTE_PCT 0 and DIST "mid" it is the mid_large_mt load. */
#include "bench.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define BATCH 64
#define MAX_PENDING 16
typedef struct batch { struct batch *next; int n; void *p[BATCH]; } batch_t;
typedef struct { _Atomic(batch_t *) inbox; _Atomic int pending, done; char pad[48]; } mailbox_t;

static int threads, pct;
static long iters;
static size_t ws, lo, hi;
static enum dist dist;
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

/* Hand batch b to a random thread other than me that is still running; a
 * finished thread frees nothing more, so sending to it would pile blocks up
 * until the end and measure the scheduler instead.  Returns 0 (and b is
 * untouched) when every other thread has finished. */
static int post(int me, uint64_t x, batch_t *b) {
  int to = -1;
  for (int i = 0; i < threads - 1 && to < 0; i++) {
    int t = (me + 1 + (int)((x + (uint64_t)i) % (uint64_t)(threads - 1))) % threads;
    if (!atomic_load(&box[t].done)) to = t;
  }
  if (to < 0) return 0;
  while (atomic_load(&box[to].pending) >= MAX_PENDING && !atomic_load(&box[to].done)) { drain(me); sched_yield(); }
  atomic_fetch_add(&box[to].pending, 1);
  batch_t *h = atomic_load(&box[to].inbox);
  do b->next = h; while (!atomic_compare_exchange_weak(&box[to].inbox, &h, b));
  return 1;
}

static void *worker(void *arg) {
  int me = (int)(intptr_t)arg;
  uint64_t s = seed_of(me);
  void **slot = calloc(ws, sizeof *slot);
  batch_t *out = malloc(sizeof *out);
  out->n = 0;
  long my_sent = 0, my_frees = 0;
  for (long i = 0; i < iters; i++) {
    uint64_t x = rnd(&s);
    size_t k = (size_t)(x % ws);
    if (slot[k]) {
      my_frees++;
      if ((int)((x >> 32) % 100) < pct && threads > 1) {
        out->p[out->n++] = slot[k];
        if (out->n == BATCH) {
          if (post(me, x >> 48, out)) {
            my_sent += BATCH;
            out = malloc(sizeof *out);
          } else {
            for (int j = 0; j < BATCH; j++) free(out->p[j]);
          }
          out->n = 0;
        }
      } else {
        free(slot[k]);
      }
      slot[k] = NULL;
    } else {
      char *p = malloc(pick_size(x, dist, lo, hi));
      p[0] = 1;
      slot[k] = p;
    }
    if ((i & 127) == 0) drain(me);
  }
  atomic_store(&box[me].done, 1);   /* senders stop choosing us; main drains the rest */
  for (int i = 0; i < out->n; i++) free(out->p[i]);
  free(out);
  for (size_t k = 0; k < ws; k++) free(slot[k]);
  free(slot);
  atomic_fetch_add(&sent, my_sent);
  atomic_fetch_add(&frees, my_frees);
  return NULL;
}

int main(int argc, char **argv) {
  usage_if(argc < 7, "mt_remote THREADS ITERS WS MIN MAX REMOTE_PCT [uniform|app|mid]");
  threads = atoi(argv[1]); iters = atol(argv[2]); ws = (size_t)atol(argv[3]);
  lo = (size_t)atol(argv[4]); hi = (size_t)atol(argv[5]); pct = atoi(argv[6]);
  dist = dist_of(argc > 7 ? argv[7] : NULL);
  box = calloc((size_t)threads, sizeof *box);
  pthread_t *t = malloc(sizeof *t * (size_t)threads);
  double t0 = now();
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < threads; i++) drain(i);
  double secs = now() - t0;
  result(iters * threads, secs, "remote_pct=%.1f", frees ? 100.0 * (double)sent / (double)frees : 0.0);
  free(t);
  free(box);
  return 0;
}
