/* Built against an installed hakmem by tests/test_install.sh: prints
 * "on hakmem" and exits 0 only if malloc is hakmem's, i.e. the memory it
 * hands out shows up in hakmem's own statistics. */
#include <hakmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  hakmem_stats_t before, after;
  size_t n = 8u << 20;
  hakmem_stats_get(&before);
  char *p = malloc(n);
  if (p) memset(p, 1, n);
  hakmem_stats_get(&after);
  int on = p && after.in_use >= before.in_use + n;
  free(p);
  puts(on ? "on hakmem" : "NOT on hakmem");
  return !on;
}
