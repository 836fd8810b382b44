/* as_limit SIZE: how many blocks of SIZE bytes malloc gives before it fails,
 * printed as one number (tests/test_addrspace.sh runs it under `ulimit -v`,
 * under glibc and under hakmem).  It opens a stream first, as any program
 * does, and checks that malloc fails with ENOMEM.  The blocks are not
 * touched: only address space is measured, not memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 2) return 64;
  size_t size = strtoul(argv[1], NULL, 0);
  FILE *f = fopen("/dev/null", "w");
  if (!f || fprintf(f, "%zu\n", size) < 0 || fclose(f) != 0) {
    fprintf(stderr, "as_limit: fopen failed\n");
    return 2;
  }
  size_t n = 0;
  for (;;) {
    errno = 0;
    void *p = malloc(size);
    if (!p) break;
    *(volatile char *)p = 1;            /* one page: the block is really usable */
    n++;
  }
  if (errno != ENOMEM) {
    fprintf(stderr, "as_limit: malloc failed with errno %d, not ENOMEM\n", errno);
    return 3;
  }
  printf("%zu\n", n);
  return 0;
}
