/* decay.c — when free memory goes back to the OS: once it has stayed free
 * for a delay that adapts to the program.
 *
 * Each kind of free memory has a decay_t: a heap's free slices, the shared
 * segment cache, the retired segments, the abandoned ones, the cached huge
 * blocks.  Memory freed waits the delay, at least HAKMEM_PURGE_DELAY_MS,
 * before it is purged or unmapped.  Memory wanted again within two delays of
 * going back went too early (the program cycles through it): the delay
 * doubles, up to PURGE_DELAY_MAX_MS.  A purge that no reuse follows brings
 * it back down toward HAKMEM_PURGE_DELAY_MS by a quarter. */
#include "internal.h"
#include "options.h"

static uint64_t base(void) { return (uint64_t)atomic_load_explicit(&hm_options.purge_delay_ms, memory_order_relaxed); }

/* The delay, within [base, max(base, PURGE_DELAY_MAX_MS)].  A fresh decay
 * starts at the base.  When hakmem_option_set has moved the base, the delay
 * moves with it, keeping what reuse made it grow over the old base: a delay
 * that was the old base alone becomes the new one (60 s set to 0 is 0, not
 * the 1 s cap of a delay grown by reuse). */
uint64_t decay_delay(decay_t *d) {
  uint64_t b = base(), top = b > PURGE_DELAY_MAX_MS ? b : PURGE_DELAY_MAX_MS;
  if (d->base_ms != b) {
    d->delay_ms = d->base_ms ? d->delay_ms * b / d->base_ms : b;
    d->base_ms = b;
  }
  if (d->delay_ms < b) d->delay_ms = b;
  if (d->delay_ms > top) d->delay_ms = top;
  return d->delay_ms;
}

void decay_reset(decay_t *d) { d->delay_ms = d->base_ms = base(); }

bool decay_at_base(decay_t *d) { return decay_delay(d) == base(); }

/* The window is two delays, and two milliseconds at least: with
 * HAKMEM_PURGE_DELAY_MS=0 it would be empty, the delay would never grow, and
 * every big block freed would be purged and faulted in again. */
void decay_reused(decay_t *d, uint64_t gone_ms, uint64_t now) {
  uint64_t delay = decay_delay(d);
  if (now - gone_ms >= 2 * (delay ? delay : 1)) return;
  d->delay_ms = delay ? delay * 2 : 1;
  decay_delay(d);                              /* (at most the top) */
}

void decay_purged(decay_t *d) {
  uint64_t delay = decay_delay(d);
  d->delay_ms = delay - (delay + 3) / 4;       /* (1 ms goes back to 0) */
  decay_delay(d);
}
