/* mimalloc_stress.c — our version of mimalloc's test/test-stress.c: rounds of
 * N threads that allocate blocks of random sizes (item counts spread over
 * powers of two, 1% large, 0.1% huge, 0.01% giant) with calloc, fill them,
 * free most at random, keep some until the thread ends, and swap blocks with
 * a shared transfer array so blocks are freed by other threads, also in
 * later rounds (half the transfer slots survive each round).  Every block's
 * contents are checked when it is freed, and calloc's zeroing when it is
 * handed out.  One case per thread count; each runs its rounds until it has
 * done them all or its time budget is spent (at least one round); fewer
 * threads do more each (mimalloc's test: 32 threads at scale 10, 50 rounds). */
#include "ext.h"

#include <pthread.h>
#include <stdatomic.h>

enum { TRANSFERS = 1000, ROUNDS = 50, BUDGET_MS = 1500 };
static int scale;
static const uintptr_t cookie = 0x9e3779b97f4a7c15u;
static _Atomic(uintptr_t *) transfer[TRANSFERS];
static atomic_long corrupt, unzeroed, failed;

static uint64_t next(uint64_t *r) { return test_rand(r); }
static bool percent(uint64_t *r, unsigned p) { return next(r) % 100 < p; }

/* A block of items words: word i holds (items - i) ^ cookie, so the first
 * says how long the block is. */
static uintptr_t *alloc_items(size_t items, uint64_t *r) {
  if (percent(r, 1)) items *= percent(r, 1) ? 10000 : percent(r, 10) ? 1000 : 100;
  if (items == 0) items = 1;
  uintptr_t *p = calloc(items, sizeof *p);
  if (!p) { atomic_fetch_add(&failed, 1); return NULL; }
  if (!ext_zero(p, items * sizeof *p)) atomic_fetch_add(&unzeroed, 1);
  for (size_t i = 0; i < items; i++) p[i] = (items - i) ^ cookie;
  return p;
}

static void free_items(uintptr_t *p) {
  if (!p) return;
  size_t items = p[0] ^ cookie;
  for (size_t i = 0; i < items; i++)
    if ((p[i] ^ cookie) != items - i) { atomic_fetch_add(&corrupt, 1); break; }
  free(p);
}

static void *stress_thread(void *arg) {
  intptr_t tid = (intptr_t)arg;
  uint64_t r = (uint64_t)tid * 43 + 1;
  size_t allocs = 100 * (size_t)scale * (size_t)(tid % 8 + 1), retain = allocs / 2;
  uintptr_t **data = NULL, **retained = calloc(retain, sizeof *retained);
  size_t data_size = 0, data_top = 0, retain_top = 0;
  while (allocs > 0 || retain > 0) {
    if (retain == 0 || (percent(&r, 50) && allocs > 0)) {
      allocs--;
      if (data_top >= data_size) {
        data_size += 100000;
        data = realloc(data, data_size * sizeof *data);
      }
      data[data_top++] = alloc_items((size_t)1 << (next(&r) % 5), &r);
    } else {
      retained[retain_top++] = alloc_items((size_t)1 << (next(&r) % 7), &r);
      retain--;
    }
    if (percent(&r, 66) && data_top > 0) {
      size_t i = next(&r) % data_top;
      free_items(data[i]);
      data[i] = NULL;
    }
    if (percent(&r, 25) && data_top > 0) {
      size_t i = next(&r) % data_top;
      data[i] = atomic_exchange(&transfer[next(&r) % TRANSFERS], data[i]);
    }
  }
  for (size_t i = 0; i < retain_top; i++) free_items(retained[i]);
  for (size_t i = 0; i < data_top; i++) free_items(data[i]);
  free(retained);
  free(data);
  return NULL;
}

static void stress(int threads) {
  uint64_t r = 0x7feb352d;
  uint64_t deadline = test_now_ms() + BUDGET_MS;
  int round = 0;
  scale = threads >= 32 ? 10 : 50;
  atomic_store(&corrupt, 0);
  atomic_store(&unzeroed, 0);
  atomic_store(&failed, 0);
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  for (bool last = false; !last; round++) {
    last = round + 1 == ROUNDS || test_now_ms() >= deadline;
    CONTEXT("round %d of %d threads", round, threads);
    for (int i = 0; i < threads; i++)
      if (pthread_create(&t[i], NULL, stress_thread, (void *)(intptr_t)i)) { CHECK(!"pthread_create"); threads = i; }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < TRANSFERS; i++)      /* half survive into the next round */
      if (last || percent(&r, 50)) free_items(atomic_exchange(&transfer[i], NULL));
  }
  CONTEXT_CLEAR();
  free(t);
  NOTE("%d threads, scale %d: %d rounds", threads, scale, round);
  CHECKF(atomic_load(&corrupt) == 0, "%ld blocks changed before they were freed", atomic_load(&corrupt));
  CHECKF(atomic_load(&unzeroed) == 0, "%ld blocks from calloc not zeroed", atomic_load(&unzeroed));
  CHECKF(atomic_load(&failed) == 0, "%ld allocations failed", atomic_load(&failed));
}

TEST(stress_1_thread) { stress(1); }
TEST(stress_2_threads) { stress(2); }
TEST(stress_8_threads) { stress(8); }
TEST(stress_32_threads) { stress(32); }

TEST_MAIN()
