/* options.c — the one home of hakmem's settings.  Each option is read once,
 * at start-up, from its HAKMEM_* environment variable.  A malformed or
 * out-of-range value is reported once and the default is used. */
#include "internal.h"
#include "options.h"

#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

options_t hm_options;
bool hm_slow_mode;
uint8_t hm_page_flags;

static const struct option_def {
  const char *name;
  long *value;
  long def, min, max;
  const char *doc;
} table[] = {
  { "HAKMEM_PURGE_DELAY_MS", &hm_options.purge_delay_ms, 10, 0, 60000,
    "milliseconds a free page stays resident before its memory is returned to the OS" },
  { "HAKMEM_SEGMENT_CACHE", &hm_options.segment_cache, 8, 0, 1024,
    "empty 4 MiB segments kept mapped (and purged) for reuse before unmapping" },
  { "HAKMEM_HUGE_CACHE_MB", &hm_options.huge_cache_mb, 256, 0, 1 << 20,
    "MiB of freed blocks with a mapping of their own (above 4032 KiB, or grown by realloc past 2 MiB) kept mapped for reuse (purged after the delay)" },
  { "HAKMEM_THREAD_CACHE_KB", &hm_options.thread_cache_kb, 32768, 0, 1 << 20,
    "KiB of freed 4-256 KiB blocks each thread may keep for its next mallocs (a class's blocks given back after a second unused); 0: none" },
  { "HAKMEM_BACKGROUND", &hm_options.background, 1, 0, 1,
    "1: once the process has several threads, a background thread returns the free memory of threads that went quiet" },
  { "HAKMEM_SECURE", &hm_options.secure, 0, 0, 2,
    "1: hardened mode (exact double-free detection, checked free lists, quarantine, guard pages); 2: also zero freed blocks" },
  { "HAKMEM_STATS", &hm_options.stats, 0, 0, 1,
    "1: count every allocation and print a statistics report to stderr at exit" },
};

void options_init(void) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const struct option_def *o = &table[i];
    *o->value = o->def;
    const char *s = getenv(o->name);
    if (!s) continue;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno || v < o->min || v > o->max) {
      hm_warn("hakmem: warning: %s=\"%s\" is not a number in [%ld, %ld]; using the default %ld\n",
              o->name, s, o->min, o->max, o->def);
      continue;
    }
    *o->value = v;
  }
  if (hm_options.stats) hm_stats_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  hm_secure_level = (int)hm_options.secure;
  hm_secure = hm_secure_level > 0;
  hm_slow_mode = hm_options.stats || hm_secure;
  hm_page_flags = hm_slow_mode ? PAGE_SLOW : 0;
}
