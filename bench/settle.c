/* settle.c — run by bench/run.sh before every timed run: touches MIB MiB
 * (argument) in transparent huge pages and exits, so that each run starts with
 * that much memory freed a moment ago.
 *
 * On a VM that reports free pages to its host (free page reporting), memory
 * freed a while ago has gone back to the host, and a program that touches it
 * waits while the host supplies it again.  Without this step a run's time
 * follows the run before it: a program that freed its memory at exit leaves
 * the next one fast, one that gave it back as it went leaves it slow. */
#include <stdlib.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
  size_t n = (size_t)strtoul(argc > 1 ? argv[1] : "1024", NULL, 10) << 20;
  if (n == 0) return 0;
  volatile char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 1;
  madvise((void *)p, n, MADV_HUGEPAGE);
  for (size_t i = 0; i < n; i += 4096) p[i] = 1;
  return 0;
}
