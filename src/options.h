/* options.h — the HAKMEM_* settings, read once at start-up (options.c). */
#ifndef HAKMEM_OPTIONS_H
#define HAKMEM_OPTIONS_H

typedef struct options_s {
  long purge_delay_ms;   /* HAKMEM_PURGE_DELAY_MS */
  long segment_cache;    /* HAKMEM_SEGMENT_CACHE */
  long stats;            /* HAKMEM_STATS */
} options_t;

extern options_t hm_options;
void options_init(void);
#endif
