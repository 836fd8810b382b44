/* report.c — messages to stderr.  Nothing here allocates: messages are
 * formatted into a stack buffer and written with write(2). */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void vprint(int fd, const char *fmt, va_list ap) {
  char buf[1024];
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
  ssize_t w = write(fd, buf, (size_t)n);
  (void)w;
}

void hm_print(int fd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprint(fd, fmt, ap);
  va_end(ap);
}

void hm_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprint(STDERR_FILENO, fmt, ap);
  va_end(ap);
}

void hm_fatal(const char *what, const void *p, const page_t *pg) {
  if (pg && pg->slices && pg->cls < CLASSES)
    hm_warn("hakmem: %s: pointer %p (size class %u, block size %zu)\n", what, p, pg->cls, pg->block_size);
  else if (pg && pg->slices && pg->cls == CLASS_LARGE)
    hm_warn("hakmem: %s: pointer %p (large block of %zu bytes)\n", what, p, pg->block_size);
  else if (pg && pg->slices && pg->cls == CLASS_HUGE)
    hm_warn("hakmem: %s: pointer %p (huge block of %zu bytes)\n", what, p, pg->block_size);
  else
    hm_warn("hakmem: %s: pointer %p\n", what, p);
  abort();
}

#if HM_DEBUG_ON
void hm_assert_fail(const char *expr, const char *file, int line) {
  hm_warn("hakmem: assertion failed: %s (%s:%d)\n", expr, file, line);
  abort();
}
#endif
