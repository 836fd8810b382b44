/* Concurrent thread lineages (Larson-like): several workers each own a set of
 * blocks, replace random ones, then start a successor that inherits them and
 * exit, so segments are abandoned and reclaimed by many threads at once while
 * others free into them.  Every block's content is checked before it is
 * freed.  (Regression: a heap's exit once linked a segment into the global
 * abandoned list while it was still on the heap's list.) */
#include "test.h"
#include "hakmem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum { LINES = 4, SLOTS = 600 };
typedef struct { unsigned char *p[SLOTS]; size_t n[SLOTS]; uint64_t seed; int generations; } line_t;
static line_t lines[LINES];
static atomic_int errors, running;

static void fill(unsigned char *p, size_t n, size_t k) { for (size_t i = 0; i + 1 < n && i < 32; i++) p[i] = (unsigned char)(k + i); p[n - 1] = (unsigned char)k; }
static int intact(const unsigned char *p, size_t n, size_t k) {
  for (size_t i = 0; i + 1 < n && i < 32; i++) if (p[i] != (unsigned char)(k + i)) return 0;
  return p[n - 1] == (unsigned char)k;
}

static void *generation(void *arg) {
  line_t *l = arg;
  uint64_t s = l->seed;
  for (int r = 0; r < 3000; r++) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    size_t k = (size_t)(s % SLOTS);
    if (l->p[k]) {
      if (!intact(l->p[k], l->n[k], k)) atomic_fetch_add(&errors, 1);
      hakmem_free(l->p[k]);
    }
    l->n[k] = 8 + (size_t)((s >> 20) % (r % 97 == 0 ? 60000 : 1000));
    l->p[k] = hakmem_malloc(l->n[k]);
    if (!l->p[k]) { atomic_fetch_add(&errors, 1); break; }
    fill(l->p[k], l->n[k], k);
  }
  l->seed = s;
  if (--l->generations > 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, generation, l) == 0) { pthread_detach(t); return NULL; }
    atomic_fetch_add(&errors, 1);
  }
  atomic_fetch_sub(&running, 1);
  return NULL;
}

TEST(concurrent_lineages_inherit_blocks) {
  int gens = test_sanitized() ? 40 : 400;
  atomic_store(&running, LINES);
  for (int i = 0; i < LINES; i++) {
    lines[i].seed = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    lines[i].generations = gens;
    pthread_t t;
    pthread_create(&t, NULL, generation, &lines[i]);
    pthread_detach(t);
  }
  while (atomic_load(&running) > 0) usleep(1000);
  for (int i = 0; i < LINES; i++)
    for (size_t k = 0; k < SLOTS; k++)
      if (lines[i].p[k]) {
        if (!intact(lines[i].p[k], lines[i].n[k], k)) atomic_fetch_add(&errors, 1);
        hakmem_free(lines[i].p[k]);
      }
  CHECKF(atomic_load(&errors) == 0, "%d blocks corrupted or allocations failed", atomic_load(&errors));
}

TEST_MAIN()
