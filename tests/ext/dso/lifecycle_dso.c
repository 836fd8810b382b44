/* lifecycle_dso.c — a library that tests/ext/lifecycle.c loads and unloads
 * with dlopen/dlclose: it allocates in its constructor and frees in its
 * destructor, hands out blocks the program frees, frees blocks the program
 * allocated, and has a large thread-local array, which glibc allocates with
 * malloc for each thread that touches it (dynamic TLS) and frees when the
 * thread exits. */
#include <stdlib.h>
#include <string.h>

static char **table;
static __thread char tls_buffer[64 << 10];

__attribute__((constructor)) static void dso_init(void) {
  table = calloc(256, sizeof *table);
  for (int i = 0; i < 256; i++) table[i] = strdup("allocated in the library's constructor");
}

__attribute__((destructor)) static void dso_fini(void) {
  for (int i = 0; i < 256; i++) free(table[i]);
  free(table);
}

void *dso_alloc(size_t n, int fill) {
  void *p = malloc(n);
  if (p) memset(p, fill, n);
  return p;
}

void dso_free(void *p) { free(p); }

void *dso_realloc(void *p, size_t n) { return realloc(p, n); }

/* Touch this thread's copy of the array; returns its checksum. */
long dso_tls_touch(int fill) {
  memset(tls_buffer, fill, sizeof tls_buffer);
  long sum = 0;
  for (size_t i = 0; i < sizeof tls_buffer; i += 4096) sum += tls_buffer[i];
  return sum;
}
