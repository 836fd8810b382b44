/* walk NODES ROUNDS SIZE: a big heap read in an order unrelated to its
 * addresses (a linked structure built over time: a tree, a graph, an
 * interpreter's objects).  Allocate NODES blocks of SIZE bytes, link them
 * in random order, and follow the links ROUNDS times.  The walk misses the
 * TLB at nearly every node when the heap is in 4 KiB pages: it measures
 * what huge pages (HAKMEM_HUGEPAGES=2) give.  Reports nodes visited per
 * CPU second. */
#include "bench.h"

typedef struct node {
  struct node *next;
  uint64_t value;
} node_t;

int main(int argc, char **argv) {
  usage_if(argc < 4, "walk NODES ROUNDS SIZE");
  long nodes = atol(argv[1]), rounds = atol(argv[2]);
  size_t size = (size_t)atol(argv[3]);
  if (nodes < 2 || size < sizeof(node_t)) usage_if(1, "walk NODES>=2 ROUNDS SIZE>=16");
  node_t **order = malloc(sizeof *order * (size_t)nodes);
  for (long i = 0; i < nodes; i++) {
    order[i] = malloc(size);
    order[i]->value = (uint64_t)i;
  }
  uint64_t s = seed_of(nodes);
  for (long i = nodes - 1; i > 0; i--) {
    long j = (long)(rnd(&s) % (uint64_t)(i + 1));
    node_t *t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (long i = 0; i < nodes - 1; i++) order[i]->next = order[i + 1];
  order[nodes - 1]->next = NULL;
  node_t *first = order[0];
  free(order);
  uint64_t sum = 0;
  double t0 = cpu_now();
  for (long r = 0; r < rounds; r++)
    for (node_t *p = first; p; p = p->next) sum += p->value;
  double secs = cpu_now() - t0;
  if (sum != (uint64_t)rounds * (uint64_t)nodes * (uint64_t)(nodes - 1) / 2) { fprintf(stderr, "wrong sum\n"); return 1; }
  result(nodes * rounds, secs, "nodes=%ld", nodes);
  return 0;
}
