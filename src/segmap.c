/* segmap.c — the segment map: which SEG_SIZE chunks of the address space are
 * hakmem's segments, and of which kind (internal.h, segment.h).
 *
 * free's fast path reads the window (hm_segmap), one byte per segment of
 * SEGMAP_SIZE segments; the window is placed when the first segment is
 * registered, centred on the start of os.c's region for aligned mappings
 * (any segment's, aligned to SEG_SIZE or more, may come first), or without
 * one (hinting off) on that segment.  A segment outside the window has its
 * byte in the far map, whose chunks of the same size are mapped as segments
 * outside it are registered.  Both are there for good. */
#include "internal.h"

_Atomic uint64_t hm_segmap_lo;
_Atomic(uint8_t) hm_segmap[SEGMAP_SIZE];

#define FAR_CHUNKS ((size_t)1 << (ADDR_BITS - SEG_SHIFT - SEGMAP_BITS))
static _Atomic(_Atomic(uint8_t) *) far_map[FAR_CHUNKS];
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static bool window_placed;                   /* (map_lock) */

_Atomic(uint8_t) *segmap_far(uintptr_t i) {
  if (i >> SEGMAP_BITS >= FAR_CHUNKS) return NULL;
  _Atomic(uint8_t) *chunk = atomic_load_explicit(&far_map[i >> SEGMAP_BITS], memory_order_acquire);
  return chunk ? &chunk[i & (SEGMAP_SIZE - 1)] : NULL;
}

/* The entry of segment s, made if it has none (a segment is registered);
 * NULL if the far chunk it needs cannot be mapped. */
_Atomic(uint8_t) *segmap_make(segment_t *s) {
  uintptr_t i = (uintptr_t)s >> SEG_SHIFT;
  pthread_mutex_lock(&map_lock);
  if (!window_placed) {
    uintptr_t start = os_hint_start(), mid = start ? start >> SEG_SHIFT : i;
    atomic_store_explicit(&hm_segmap_lo, mid > SEGMAP_SIZE / 2 ? mid - SEGMAP_SIZE / 2 : 0, memory_order_relaxed);
    window_placed = true;
  }
  _Atomic(uint8_t) *e = segmap_entry(i);
  if (!e && i >> SEGMAP_BITS < FAR_CHUNKS) {
    _Atomic(uint8_t) *chunk = os_map(SEGMAP_SIZE);
    if (chunk) {
      atomic_store_explicit(&far_map[i >> SEGMAP_BITS], chunk, memory_order_release);
      e = &chunk[i & (SEGMAP_SIZE - 1)];
    }
  }
  pthread_mutex_unlock(&map_lock);
  return e;
}

/* Set the map entry of s, which has one (segmap_make). */
void segmap_set(segment_t *s, uint8_t v) {
  hm_assert(((uintptr_t)s & SEG_MASK) == 0 && v <= SEGMAP_HUGE);
  atomic_store_explicit(segmap_entry((uintptr_t)s >> SEG_SHIFT), v, memory_order_release);
}

uint8_t segmap_kind(const segment_t *s) {     /* (a split span's may have none) */
  _Atomic(uint8_t) *e = segmap_entry((uintptr_t)s >> SEG_SHIFT);
  return e ? atomic_load_explicit(e, memory_order_relaxed) : 0;
}

/* fork: the lock is held across it (thread.c's fork handlers). */
void segmap_fork_prepare(void) { pthread_mutex_lock(&map_lock); }
void segmap_fork_parent(void) { pthread_mutex_unlock(&map_lock); }
