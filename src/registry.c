/* registry.c — the registry of every mapped segment (normal or huge, in use
 * or cached), and the census that walks it (mallinfo2, the stats report).
 *
 * Registering, unmapping and moving a segment take the registry lock: the
 * census never reads a header that goes away. */
#include "internal.h"
#include "stats.h"

#include <string.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static segment_t *registry;

void registry_add(segment_t *s) {
  hm_assert(((uintptr_t)s & SEG_MASK) == 0 && s->size > 0);
  pthread_mutex_lock(&registry_lock);
  s->all_prev = NULL;
  s->all_next = registry;
  if (registry) registry->all_prev = s;
  registry = s;
  pthread_mutex_unlock(&registry_lock);
}

/* (registry_lock held) */
static void unlink_locked(segment_t *s) {
  hm_assert(s->all_prev ? s->all_prev->all_next == s : registry == s);   /* registered */
  hm_assert(!s->all_next || s->all_next->all_prev == s);
  if (s->all_prev) s->all_prev->all_next = s->all_next; else registry = s->all_next;
  if (s->all_next) s->all_next->all_prev = s->all_prev;
}

/* s is no segment of its own any more (a huge span merged into the one
 * before it): it leaves the registry, its memory stays mapped. */
void registry_remove(segment_t *s) {
  pthread_mutex_lock(&registry_lock);
  unlink_locked(s);
  pthread_mutex_unlock(&registry_lock);
}

/* s leaves the registry and is unmapped. */
void registry_unmap(segment_t *s) {
  pthread_mutex_lock(&registry_lock);
  unlink_locked(s);
  os_unmap(s, s->size);
  pthread_mutex_unlock(&registry_lock);
}

/* Unmap the run of adjacent segments at the head of list s (ascending, linked
 * by next, none in use) with one munmap; returns the rest of the list. */
segment_t *registry_unmap_run(segment_t *s) {
  uint8_t *start = (uint8_t *)s, *end = start;
  pthread_mutex_lock(&registry_lock);
  while (s && (uint8_t *)s == end) {
    segment_t *next = s->next;
    hm_assert(!s->heap && !segmap_kind(s));
    end += s->size;
    unlink_locked(s);
    stat_dec(STAT_SEGMENTS);
    s = next;
  }
  os_unmap(start, (size_t)(end - start));
  pthread_mutex_unlock(&registry_lock);
  return s;
}

/* Move huge segment s (mapped size bytes) to dst, total bytes, with mremap:
 * the header moves with the pages, and the registry, the segment map and the
 * header's slice entries follow it.  NULL (s as it was, dst unmapped) on
 * failure. */
segment_t *registry_remap_huge(segment_t *s, size_t total, void *dst) {
  pthread_mutex_lock(&registry_lock);
  segmap_set(s, 0);
  segment_t *ns = os_remap(s, s->size, total, dst);
  if (!ns) {
    os_unmap(dst, total);
    segmap_set(s, SEGMAP_HUGE);
    pthread_mutex_unlock(&registry_lock);
    return NULL;
  }
  if (ns->all_prev) ns->all_prev->all_next = ns; else registry = ns;
  if (ns->all_next) ns->all_next->all_prev = ns;
  for (size_t i = 0; i < SLICES; i++) ns->slice_page[i] = &ns->pages[1];
  segmap_set(ns, SEGMAP_HUGE);
  pthread_mutex_unlock(&registry_lock);
  return ns;
}

/* A snapshot of every mapped segment: blocks in use per class, and how much
 * of the memory may be resident.  Other threads keep allocating while we read
 * their page descriptors, so the figures are approximate by a few blocks
 * (deliberately unsynchronised reads; the registry lock keeps every header
 * mapped).  Committed counts carved page memory, free slices not yet purged,
 * segment headers and unpurged huge mappings.  (Blocks waiting in thread
 * caches count as used here: stats.c takes them out.) */
__attribute__((no_sanitize("thread")))
void registry_census(census_t *c) {
  memset(c, 0, sizeof *c);
  size_t header = SEG_HEADER_SIZE;
  pthread_mutex_lock(&registry_lock);
  for (segment_t *s = registry; s; s = s->all_next) {
    uint8_t kind = segmap_kind(s);
    c->mapped += s->size;
    if (s->pages[1].cls == CLASS_HUGE) {                    /* a huge mapping */
      if (kind) {
        c->cls[CLASS_HUGE].pages++;
        c->cls[CLASS_HUGE].used++;
        c->cls[CLASS_HUGE].capacity++;
        c->in_use += s->pages[1].block_size;
        c->huge_bytes += s->pages[1].block_size;
        c->huge_mapped += s->size;
        c->committed += s->size;
      } else {
        c->cached += s->size;
        c->committed += s->purge_ms ? s->size : header;
        c->purgeable += s->purge_ms ? s->size - header : 0;
      }
      continue;
    }
    c->segments++;
    c->committed += header;
    uint64_t dirty = (uint64_t)__builtin_popcountll(s->dirty_slices & ~s->used_slices) * SLICE_SIZE;
    c->committed += dirty;
    c->purgeable += dirty;
    if (!kind) { c->cached += s->size; continue; }          /* empty, in the cache */
    page_t *pg;
    for_each_page(s, pg) {
      c->cls[pg->cls].pages++;
      c->cls[pg->cls].used += page_used(pg);
      c->cls[pg->cls].capacity += pg->capacity;
      c->in_use += (uint64_t)page_used(pg) * pg->block_size;
      c->committed += (page_area(pg) + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1);
    }
  }
  pthread_mutex_unlock(&registry_lock);
}

/* fork: the lock is held across it (thread.c's fork handlers). */
void registry_fork_prepare(void) { pthread_mutex_lock(&registry_lock); }
void registry_fork_parent(void) { pthread_mutex_unlock(&registry_lock); }
