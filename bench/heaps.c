/* heaps.c — per-request allocation: each request builds a structure of many
 * small objects (a parse tree, a request's state: 16-256 B, linked and
 * touched) and then drops all of it.  Built three ways (bench/heaps.sh):
 *   HEAP_HAKMEM    a hakmem_heap_new per request, hakmem_heap_destroy at the end
 *   HEAP_MIMALLOC  a mi_heap_new per request, mi_heap_destroy at the end
 *   (neither)      malloc per object and free per object, under any allocator
 *
 *   heaps REQUESTS OBJECTS      e.g. heaps 20000 2000
 *
 * Prints the RESULT line: requests per second (CPU time), and the time the
 * ends of the heaps took (destroy_ns, per request; with malloc_free: the
 * frees). */
#include "bench.h"

#if defined(HEAP_HAKMEM)
#include "hakmem.h"
#define HEAP_T hakmem_heap_t
#define HEAP_NEW() hakmem_heap_new()
#define HEAP_MALLOC(h, n) hakmem_heap_malloc(h, n)
#define HEAP_END(h) hakmem_heap_destroy(h)
#define MODE "hakmem_heap"
#elif defined(HEAP_MIMALLOC)
#include <mimalloc.h>
#define HEAP_T mi_heap_t
#define HEAP_NEW() mi_heap_new()
#define HEAP_MALLOC(h, n) mi_heap_malloc(h, n)
#define HEAP_END(h) mi_heap_destroy(h)
#define MODE "mi_heap"
#else
#define MODE "malloc_free"
#endif

typedef struct node {
  struct node *next;
  uint64_t payload[];
} node_t;

int main(int argc, char **argv) {
  long requests = argc > 1 ? atol(argv[1]) : 20000;
  long objects = argc > 2 ? atol(argv[2]) : 2000;
  uint64_t s = seed_of(0), sum = 0;
  double t0 = cpu_now(), ending = 0;
  for (long r = 0; r < requests; r++) {
#ifdef HEAP_T
    HEAP_T *h = HEAP_NEW();
#endif
    node_t *list = NULL;
    for (long i = 0; i < objects; i++) {
      size_t n = 16 + (rnd(&s) % 241);
#ifdef HEAP_T
      node_t *o = HEAP_MALLOC(h, n);
#else
      node_t *o = malloc(n);
#endif
      o->next = list;
      o->payload[0] = (uint64_t)i;
      list = o;
    }
    for (node_t *o = list; o; o = o->next) sum += o->payload[0];
    double e0 = cpu_now();
#ifdef HEAP_T
    HEAP_END(h);
#else
    for (node_t *o = list, *next; o; o = next) {
      next = o->next;
      free(o);
    }
#endif
    ending += cpu_now() - e0;
  }
  double secs = cpu_now() - t0;
  if (sum != (uint64_t)requests * (uint64_t)(objects * (objects - 1) / 2)) { fprintf(stderr, "wrong sum\n"); return 1; }
  result(requests, secs, "mode=%s objects=%ld destroy_ns=%.0f", MODE, objects, ending / (double)requests * 1e9);
  return 0;
}
