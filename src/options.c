/* options.c — the one home of hakmem's settings.  Each option is read at
 * start-up from its HAKMEM_* environment variable; the program may read and
 * change it later by name (hakmem_option_get/set), but for those the
 * process is built around (HAKMEM_SECURE, HAKMEM_STATS, the thread caches'
 * bound and the heap profiler's), which are fixed once it starts.  A malformed or
 * out-of-range value is reported once and the default is used, but for
 * HAKMEM_SECURE, where it means the strictest level: a request for hardening
 * never turns into none.  A HAKMEM_* variable that names no option (a
 * misspelling) is reported once, with the closest name. */
#include "hot.h"
#include "options.h"
#include "profile.h"
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

options_t hm_options;
bool hm_slow_mode;
_Atomic bool hm_malloc_profiled;
bool hm_counting;
uint8_t hm_page_flags;

static const struct option_def {
  const char *name;
  _Atomic long *value;
  long def, min, max;
  bool strict;                    /* a malformed value means max, not def */
  bool fixed;                     /* set at start-up only */
  const char **text;              /* a text option instead (value NULL): read at start-up, as is */
} table[] = {
  { "HAKMEM_PURGE_DELAY_MS", &hm_options.purge_delay_ms, 10, 0, 60000, false, false, NULL },
  { "HAKMEM_SEGMENT_CACHE", &hm_options.segment_cache, 8, 0, 1024, false, false, NULL },
  { "HAKMEM_HUGE_CACHE_MB", &hm_options.huge_cache_mb, 256, 0, 1 << 20, false, false, NULL },
  { "HAKMEM_HUGEPAGES", &hm_options.hugepages, 1, 0, 2, false, false, NULL },
  { "HAKMEM_THREAD_CACHE_KB", &hm_options.thread_cache_kb, 32768, 0, 1 << 20, false, true, NULL },
  { "HAKMEM_BACKGROUND", &hm_options.background, 1, 0, 1, false, false, NULL },
  { "HAKMEM_SECURE", &hm_options.secure, 0, 0, 2, true, true, NULL },
  { "HAKMEM_STATS", &hm_options.stats, 0, 0, 1, false, true, NULL },
  { "HAKMEM_PROFILE", NULL, 0, 0, 0, false, true, &hm_options.profile },
  { "HAKMEM_PROFILE_RATE", &hm_options.profile_rate, 512 * 1024, 1, 1L << 30, false, true, NULL },
  { "HAKMEM_PROFILE_SIGNAL", &hm_options.profile_signal, 0, 0, 64, false, true, NULL },
};

#define OPTIONS (sizeof table / sizeof table[0])

/* Edits (insert, delete, replace a letter) from a to b, the first n of b. */
static size_t distance(const char *a, const char *b, size_t n) {
  size_t row[64], la = strlen(a);
  if (la >= 64 || n >= 64) return 64;
  for (size_t j = 0; j <= n; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= n; j++) {
      size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[n];
}

/* A HAKMEM_* variable that is no option: one warning, with the closest name. */
static void warn_unknown(void) {
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "HAKMEM_", 7)) continue;
    size_t n = strcspn(*e, "="), best_d = SIZE_MAX;
    const char *best = NULL;
    for (size_t i = 0; i < OPTIONS; i++) {
      size_t d = distance(table[i].name, *e, n);
      if (d < best_d) { best_d = d; best = table[i].name; }
    }
    if (best_d) hm_warn("hakmem: warning: %.*s is not a hakmem option (did you mean %s?); ignored\n", (int)n, *e, best);
  }
}

/* s as a value of option o: a whole number within its bounds. */
static bool parse(const struct option_def *o, const char *s, long *v) {
  char *end;
  errno = 0;
  *v = strtol(s, &end, 10);
  return end != s && *end == '\0' && !errno && *v >= o->min && *v <= o->max;
}

static bool options_read;

void options_init(void) {
  for (size_t i = 0; i < OPTIONS; i++) {
    const struct option_def *o = &table[i];
    const char *s = getenv(o->name);
    long v;
    if (o->text) { *o->text = s; continue; }
    *o->value = o->def;
    if (!s) continue;
    if (!parse(o, s, &v)) {
      long use = o->strict ? o->max : o->def;
      hm_warn("hakmem: warning: %s=\"%s\" is not a number in [%ld, %ld]; using %s %ld\n",
              o->name, s, o->min, o->max, o->strict ? "the strictest," : "the default", use);
      *o->value = use;
      continue;
    }
    *o->value = v;
  }
  options_read = true;
  warn_unknown();
  if (hm_options.stats) hm_stats_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  hm_secure_level = (int)hm_options.secure;
  hm_secure = hm_secure_level > 0;
  profile_init();
  hm_counting = hm_options.stats || hm_secure;
  hm_slow_mode = hm_counting || hm_profiling;
  hm_page_flags = hm_counting ? PAGE_SLOW : 0;
  atomic_store_explicit(&hm_malloc_profiled, hm_profiling && !hm_counting,   /* (counting: every call */
                        memory_order_relaxed);                             /* on the slow path) */
}

/* HAKMEM_STATS, for the report at exit: a program that never allocates never
 * read the options, so the variable is parsed here (silently: the warning
 * belongs to options_init). */
bool options_stats(void) {
  if (options_read) return hm_options.stats;
  for (size_t i = 0; i < OPTIONS; i++) {
    const char *s;
    long v;
    if (table[i].value == &hm_options.stats && (s = getenv(table[i].name))) return parse(&table[i], s, &v) && v;
  }
  return false;
}

/* ---- run-time control ------------------------------------------------------ */

/* The option called name: its variable's name or the rest after HAKMEM_, in
 * any case ("purge_delay_ms").  Numbers only: HAKMEM_PROFILE, a path, is
 * none. */
static const struct option_def *find(const char *name) {
  for (size_t i = 0; name && i < OPTIONS; i++)
    if (table[i].value && (!strcasecmp(name, table[i].name) || !strcasecmp(name, table[i].name + 7))) return &table[i];
  return NULL;
}

int hm_option_get(const char *name, long *value) {
  const struct option_def *o = find(name);
  if (!o || !value) return EINVAL;
  heap_process_ready();
  *value = atomic_load_explicit(o->value, memory_order_relaxed);
  return 0;
}

/* A new value takes effect from the next decision that reads it (the next
 * purge's delay, the next segment cached); the purger goes or comes with
 * HAKMEM_BACKGROUND at once. */
int hm_option_set(const char *name, long value) {
  const struct option_def *o = find(name);
  if (!o || value < o->min || value > o->max) return EINVAL;
  heap_process_ready();
  if (o->fixed) return value == atomic_load_explicit(o->value, memory_order_relaxed) ? 0 : EPERM;
  atomic_store_explicit(o->value, value, memory_order_relaxed);
  if (o->value == &hm_options.background) purge_background_changed();
  return 0;
}

HM_EXPORT_HAKMEM(option_get) HM_EXPORT_HAKMEM(option_set)
