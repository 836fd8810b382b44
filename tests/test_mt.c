/* Blocks crossing threads: shared-slot swapping with content checks, 100 %
 * remote frees, thread churn with a bounded RSS, frees after the allocating
 * thread exited, and frees by threads that never allocated. */
#include "test.h"
#include "hakmem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

static int scale(int n) { return test_sanitized() ? n / 8 : n; }

static uint64_t next_rand(uint64_t *r) { *r ^= *r << 13; *r ^= *r >> 7; *r ^= *r << 17; return *r; }

/* A block carries its size and a stamp in its first words and a pattern after. */
static void stamp(unsigned char *p, size_t n, uint64_t tag) {
  size_t hdr = n >= 16 ? 16 : 0;
  if (hdr) { memcpy(p, &n, 8); memcpy(p + 8, &tag, 8); }
  size_t m = n - hdr < 48 ? n - hdr : 48;
  for (size_t i = 0; i < m; i++) p[hdr + i] = (unsigned char)(tag + i);
  if (n > 64) p[n - 1] = (unsigned char)tag;
}
static int verify(const unsigned char *p, size_t n, uint64_t tag) {
  size_t hdr = n >= 16 ? 16 : 0;
  if (hdr) {
    size_t n2; uint64_t t2;
    memcpy(&n2, p, 8); memcpy(&t2, p + 8, 8);
    if (n2 != n || t2 != tag) return 0;
  }
  size_t m = n - hdr < 48 ? n - hdr : 48;
  for (size_t i = 0; i < m; i++) if (p[hdr + i] != (unsigned char)(tag + i)) return 0;
  return n <= 64 || p[n - 1] == (unsigned char)tag;
}

/* ---- shared slots: any thread frees (or reallocs) any block ---------------- */
#define SLOTS 2048
typedef struct { _Atomic(uintptr_t) p; } slot_t;
static slot_t slots[SLOTS];
static size_t slot_size[SLOTS];     /* written by the thread holding the slot's block */
static uint64_t slot_tag[SLOTS];
static _Atomic int swap_errors;

typedef struct { unsigned char *p; size_t n; uint64_t tag; } rec_t;

static void *swapper(void *arg) {
  uint64_t r = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  int iters = scale(60000);
  for (int i = 0; i < iters; i++) {
    uint64_t x = next_rand(&r);
    size_t n = x % 100 < 80 ? 1 + (x >> 8) % 512 : x % 100 < 98 ? 1 + (x >> 8) % 65536 : 1 + (x >> 8) % (2u << 20);
    rec_t *rec = hakmem_malloc(sizeof *rec);
    unsigned char *p = hakmem_malloc(n);
    if (!rec || !p) { atomic_fetch_add(&swap_errors, 1); break; }
    uint64_t tag = x;
    stamp(p, n, tag);
    rec->p = p; rec->n = n; rec->tag = tag;
    rec_t *old = (rec_t *)atomic_exchange(&slots[(x >> 40) % SLOTS].p, (uintptr_t)rec);
    if (old) {
      if (!verify(old->p, old->n, old->tag)) atomic_fetch_add(&swap_errors, 1);
      if (x % 5 == 0) {                        /* a non-owner reallocs it */
        size_t m = old->n + (x >> 20) % 3000;
        unsigned char *q = hakmem_realloc(old->p, m);
        if (!q || !verify(q, old->n, old->tag)) atomic_fetch_add(&swap_errors, 1);
        hakmem_free(q);
      } else {
        hakmem_free(old->p);
      }
      hakmem_free(old);
    }
  }
  return NULL;
}

TEST(shared_slots_swap) {
  int nt = 6;
  pthread_t t[6];
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < nt; i++) pthread_create(&t[i], NULL, swapper, (void *)(uintptr_t)(i + 1 + 10 * round));
    for (int i = 0; i < nt; i++) pthread_join(t[i], NULL);
  }
  for (int i = 0; i < SLOTS; i++) {
    rec_t *rec = (rec_t *)atomic_exchange(&slots[i].p, 0);
    if (!rec) continue;
    if (!verify(rec->p, rec->n, rec->tag)) atomic_fetch_add(&swap_errors, 1);
    hakmem_free(rec->p);
    hakmem_free(rec);
  }
  (void)slot_size; (void)slot_tag;
  CHECKF(atomic_load(&swap_errors) == 0, "%d blocks failed verification or allocation", atomic_load(&swap_errors));
}

/* ---- producer/consumer: every free is remote ------------------------------- */
#define QCAP 4096
typedef struct {
  _Atomic(uintptr_t) cell[QCAP];
  _Atomic size_t head, tail;        /* single producer, single consumer */
} queue_t;
static queue_t queues[2];
static _Atomic int pc_errors;
static _Atomic long consumed;

static void *producer(void *arg) {
  queue_t *q = arg;
  uint64_t r = (uintptr_t)arg;
  long total = scale(400000);
  for (long i = 0; i < total; i++) {
    size_t n = 16 + next_rand(&r) % (i % 64 == 0 ? 100000 : 700);   /* >= 16: the size travels in the block */
    unsigned char *p = hakmem_malloc(n);
    if (!p) { atomic_fetch_add(&pc_errors, 1); break; }
    stamp(p, n, (uint64_t)i);
    while (atomic_load_explicit(&q->head, memory_order_acquire) - atomic_load_explicit(&q->tail, memory_order_acquire) >= QCAP)
      sched_yield();
    size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
    atomic_store_explicit(&q->cell[h % QCAP], (uintptr_t)p, memory_order_relaxed);
    atomic_store_explicit(&q->head, h + 1, memory_order_release);
  }
  size_t h = atomic_load(&q->head);      /* end marker */
  while (h - atomic_load(&q->tail) >= QCAP) sched_yield();
  atomic_store(&q->cell[h % QCAP], 0);
  atomic_store(&q->head, h + 1);
  return NULL;
}

static void *consumer(void *arg) {
  queue_t *q = arg;
  for (long i = 0;; i++) {
    size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
    while (atomic_load_explicit(&q->head, memory_order_acquire) == t) sched_yield();
    unsigned char *p = (unsigned char *)atomic_load_explicit(&q->cell[t % QCAP], memory_order_relaxed);
    atomic_store_explicit(&q->tail, t + 1, memory_order_release);
    if (!p) break;
    size_t n; memcpy(&n, p, sizeof n);
    if (!verify(p, n, (uint64_t)i)) atomic_fetch_add(&pc_errors, 1);
    hakmem_free(p);
    atomic_fetch_add(&consumed, 1);
  }
  return NULL;
}

TEST(producer_consumer_all_remote) {
  pthread_t p[2], c[2];
  for (int i = 0; i < 2; i++) {
    pthread_create(&p[i], NULL, producer, &queues[i]);
    pthread_create(&c[i], NULL, consumer, &queues[i]);
  }
  for (int i = 0; i < 2; i++) { pthread_join(p[i], NULL); pthread_join(c[i], NULL); }
  CHECKF(atomic_load(&pc_errors) == 0, "%d corrupted blocks", atomic_load(&pc_errors));
  CHECKF(atomic_load(&consumed) == 2L * scale(400000), "consumed %ld", atomic_load(&consumed));
}

/* ---- thread churn: each thread frees half of its predecessor's blocks ------ */
#define HAND 512
static unsigned char *handed[HAND];
static size_t handed_n[HAND];

static void *churner(void *arg) {
  uint64_t r = (uintptr_t)arg + 7;
  unsigned char *mine[HAND];
  size_t mine_n[HAND];
  for (int i = 0; i < HAND; i++) {        /* free what the previous thread left */
    if (handed[i]) {
      if (!verify(handed[i], handed_n[i], handed_n[i])) atomic_fetch_add(&swap_errors, 1);
      hakmem_free(handed[i]);
      handed[i] = NULL;
    }
  }
  for (int i = 0; i < HAND; i++) {
    size_t n = 16 + next_rand(&r) % (i % 50 == 0 ? 200000 : 3000);
    mine[i] = hakmem_malloc(n);
    mine_n[i] = n;
    stamp(mine[i], n, n);
  }
  for (int i = 0; i < HAND; i++) {        /* keep half for the next thread */
    if (i % 2) { handed[i] = mine[i]; handed_n[i] = mine_n[i]; }
    else hakmem_free(mine[i]);
  }
  return NULL;
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long a = 0, b = 0;
  if (f) { if (fscanf(f, "%ld %ld", &a, &b) != 2) b = 0; fclose(f); }
  return b * (sysconf(_SC_PAGESIZE) / 1024);
}

TEST(thread_churn_bounded_rss) {
  int total = scale(3000), warm = total / 10;
  long rss_warm = 0;
  for (int i = 0; i < total; i++) {
    pthread_t t;
    pthread_create(&t, NULL, churner, (void *)(uintptr_t)i);
    pthread_join(t, NULL);
    if (i == warm) rss_warm = rss_kib();
  }
  long rss_end = rss_kib();
  for (int i = 0; i < HAND; i++) { hakmem_free(handed[i]); handed[i] = NULL; }
  CHECKF(atomic_load(&swap_errors) == 0, "%d corrupted blocks", atomic_load(&swap_errors));
  if (!test_sanitized())
    CHECKF(rss_end - rss_warm < 64 * 1024, "RSS grew from %ld KiB to %ld KiB over %d threads", rss_warm, rss_end, total - warm);
}

/* ---- frees after the owner exited; frees by threads that never allocated --- */
static void *alloc_many(void *arg) {
  void **v = arg;
  for (int i = 0; i < 5000; i++) { size_t n = 1 + (size_t)i * 13 % 20000; v[i] = hakmem_malloc(n); stamp(v[i], n, n); }
  return NULL;
}
static void *free_many(void *arg) {
  void **v = arg;
  for (int i = 0; i < 5000; i++) {
    size_t n = 1 + (size_t)i * 13 % 20000;
    if (!verify(v[i], n, n)) atomic_fetch_add(&swap_errors, 1);
    hakmem_free(v[i]);
  }
  return NULL;
}

TEST(free_after_owner_exit) {
  static void *v[5000];
  for (int round = 0; round < 20; round++) {
    pthread_t t;
    pthread_create(&t, NULL, alloc_many, v);
    pthread_join(t, NULL);                 /* owner gone: its segments are abandoned */
    if (round % 2) free_many(v);           /* freed by the main thread... */
    else { pthread_create(&t, NULL, free_many, v); pthread_join(t, NULL); }  /* ...or a fresh thread */
  }
  CHECKF(atomic_load(&swap_errors) == 0, "%d corrupted blocks", atomic_load(&swap_errors));
}

TEST_MAIN()
