/* HAKMEM_HUGEPAGES=2: segments ask for transparent huge pages too, so the
 * mapping that holds small blocks is eligible for them (smaps' THPeligible);
 * at the default (1) blocks with a mapping of their own may be, while the
 * program fills them, and a segment's half once its heap holds SEG_HUGE_MIN
 * in 4 KiB pages and fills them: a small heap keeps 4 KiB pages. */
#include "test.h"
#include "hakmem.h"
#include "internal.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TEST_ENV("HAKMEM_HUGEPAGES=2")

/* THPeligible of the mapping that holds p: 1, 0, or -1 if smaps does not say. */
static int thp_eligible(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[256];
  int in = 0, eligible = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && sscanf(line, "THPeligible: %d", &eligible) == 1) break;
  }
  fclose(f);
  return eligible;
}

/* Is the kernel's THP setting (enabled: "always [madvise] never") this one? */
static bool thp_setting(const char *which) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char s[128] = "", want[32];
  if (f) { if (!fgets(s, sizeof s, f)) s[0] = 0; fclose(f); }
  snprintf(want, sizeof want, "[%s]", which);
  return strstr(s, want) != NULL;
}
static bool thp_possible(void) { return thp_setting("always") || thp_setting("madvise"); }

TEST(segments_ask_for_huge_pages) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  void *p = hakmem_malloc(64);
  int e = thp_eligible(p);
  if (e < 0) { SKIP("smaps has no THPeligible (kernel older than 5.x)"); hakmem_free(p); return; }
  CHECKF(e == 1, "a small block's segment is not eligible for huge pages (THPeligible %d)", e);
  hakmem_free(p);
}

/* ---- the decay purges whole huge pages --------------------------------------- */

/* Resident OS pages of [p, p + n) (os_resident), or (size_t)-1. */
static size_t resident(const void *p, size_t n) {
  size_t in;
  return os_resident((void *)p, n, &in) ? in : (size_t)-1;
}

#define NB 180000                                  /* blocks of 64 B: about three segments */
static char *nb[NB];

/* Three segments full of 64-byte blocks (the second holds nothing else: the
 * heap's earlier pages are in the first, which starts at a random slice, and
 * the class's current page, which stays, is in the third): the second's
 * address. */
static uintptr_t fill_segments(void) {
  for (int i = 0; i < NB; i++) {
    nb[i] = hakmem_malloc(64);
    memset(nb[i], 1, 64);
  }
  return (uintptr_t)nb[NB / 2] & ~(((uintptr_t)4 << 20) - 1);
}
/* Free every block of segment seg from slice `from` on. */
static void free_from_slice(uintptr_t seg, unsigned from) {
  for (int i = 0; i < NB; i++) {
    uintptr_t off = (uintptr_t)nb[i] - seg;
    if (off < ((uintptr_t)4 << 20) && off >= (uintptr_t)from * SLICE_SIZE) { hakmem_free(nb[i]); nb[i] = NULL; }
  }
}
/* The decay as the heap's slow path (busy) or the purger (quiet) runs it,
 * until nothing of [p, p + n) is resident (or 3 s: the delay may have grown
 * with the earlier tests' reuse). */
static void decay_until_gone(enum purge_mode mode, const void *p, size_t n) {
  for (int i = 0; i < 100 && resident(p, n) != 0; i++) {
    test_sleep_ms(30);
    heap_enter(hm_tls_heap);
    segment_purge_due(hm_tls_heap, mode, NULL);
    heap_leave(hm_tls_heap);
  }
}

/* Every block of the second segment's slices 16-63 freed: once the decay has
 * passed, its upper 2 MiB (no page in use) is purged, and the free slices of
 * its lower 2 MiB (pages in use: slices 1-15, as many as are free) stay
 * resident, its huge page whole. */
TEST(decay_purges_whole_huge_pages) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  uintptr_t seg = fill_segments();
  free_from_slice(seg, 16);
  const char *low_free = (const char *)seg + ((size_t)16 << 16), *high = (const char *)seg + ((size_t)2 << 20);
  decay_until_gone(PURGE_BUSY, high, (size_t)2 << 20);
  size_t low_in = resident(low_free, (size_t)1 << 20), high_in = resident(high, (size_t)2 << 20);
  NOTE("after the decay: %zu of 256 free pages resident in the first half, %zu of 512 in the second", low_in, high_in);
  CHECKF(high_in == 0, "the second 2 MiB, no page in use, kept %zu pages resident", high_in);
  CHECKF(low_in == 256, "the first 2 MiB, pages in use, had its free slices purged (%zu of 256 resident)", low_in);
  /* Then slices 8-15 freed too: the first half, mostly free, asks for 4 KiB
   * pages and its free slices are purged; slices 1-7 stay. */
  free_from_slice(seg, 8);
  const char *mostly = (const char *)seg + ((size_t)8 << 16);
  decay_until_gone(PURGE_BUSY, mostly, (size_t)24 << 16);
  size_t freed_in = resident(mostly, (size_t)24 << 16), used_in = resident((const char *)seg + SLICE_SIZE, (size_t)7 << 16);
  NOTE("slices 8-31 free: %zu of 384 pages resident; slices 1-7 in use: %zu of 112", freed_in, used_in);
  CHECKF(freed_in == 0, "a half mostly free kept %zu of its 384 free pages resident", freed_in);
  CHECKF(used_in == 112, "a half mostly free lost pages in use (%zu of 112 resident)", used_in);
  CHECKF(thp_eligible(mostly) == 0, "a half mostly free still asks for huge pages (THPeligible %d)", thp_eligible(mostly));
  for (int i = 0; i < NB; i++) hakmem_free(nb[i]);
}

/* A quiet heap keeps no free slice in a huge page: slices 24-63 of a full
 * segment freed, the busy decay purges the upper half whole and keeps the
 * lower one (a quarter of it free) whole; the decay of a quiet heap (the
 * purger's trim, or the thread's exit) purges slices 24-31 too, and that half
 * asks for 4 KiB pages. */
TEST(quiet_heap_splits_huge_pages) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  hakmem_malloc_trim(0);                       /* (the last test's pages, its blocks cached: gone) */
  uintptr_t seg = fill_segments();
  free_from_slice(seg, 24);
  const char *low_free = (const char *)seg + ((size_t)24 << 16), *high = (const char *)seg + ((size_t)2 << 20);
  decay_until_gone(PURGE_BUSY, high, (size_t)2 << 20);
  size_t busy_in = resident(low_free, (size_t)8 << 16);
  decay_until_gone(PURGE_IDLE, low_free, (size_t)8 << 16);
  size_t quiet_in = resident(low_free, (size_t)8 << 16), used_in = resident((const char *)seg + SLICE_SIZE, (size_t)23 << 16);
  NOTE("slices 24-31 free: %zu of 128 pages resident while busy, %zu once quiet; slices 1-23 in use: %zu of 368",
       busy_in, quiet_in, used_in);
  CHECKF(resident(high, (size_t)2 << 20) == 0, "the second 2 MiB, no page in use, stayed resident");
  CHECKF(busy_in == 128, "a busy heap split a huge page a quarter free (%zu of 128 free pages resident)", busy_in);
  CHECKF(quiet_in == 0, "a quiet heap kept %zu of 128 free pages resident", quiet_in);
  CHECKF(used_in == 368, "a quiet heap lost pages in use (%zu of 368 resident)", used_in);
  CHECKF(thp_eligible(low_free) == 0, "a quiet heap's half with free slices still asks for huge pages (THPeligible %d)",
         thp_eligible(low_free));
  for (int i = 0; i < NB; i++) hakmem_free(nb[i]);
}

/* The statistics show the process's memory in huge pages: 32 MiB of small
 * blocks, touched, are mostly in them (where the kernel has huge pages to
 * give: none at all is reported as skipped). */
TEST(stats_show_huge_pages) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  enum { N = 1 << 19 };
  static char *b[N];
  for (int i = 0; i < N; i++) { b[i] = hakmem_malloc(64); b[i][0] = 1; }
  hakmem_stats_t st;
  hakmem_stats_get(&st);
  NOTE("%zu MiB in huge pages with 32 MiB of 64-byte blocks", st.huge_page_resident >> 20);
  if (st.huge_page_resident == 0) SKIP("the kernel gave no huge page (none free, or defrag off)");
  else CHECKF(st.huge_page_resident >= (24u << 20), "only %zu KiB in huge pages", st.huge_page_resident >> 10);
  for (int i = 0; i < N; i++) hakmem_free(b[i]);
}

/* ---- huge blocks: huge pages while the program fills them ------------------
 * At HAKMEM_HUGEPAGES=1 (set here, and no huge cache: each block a fresh
 * mapping, each a probe when its turn comes) a huge block asks for huge
 * pages after blocks that were filled, not after blocks touched at both ends
 * only (huge.c's thp_t): THPeligible of a new block's last stretch.  32
 * rounds move the score from either end to the other. */
static int huge_block_after(bool filled) {
  long mode = 0, cache = 0;
  hakmem_option_get("HAKMEM_HUGEPAGES", &mode);
  hakmem_option_get("HAKMEM_HUGE_CACHE_MB", &cache);
  hakmem_option_set("HAKMEM_HUGEPAGES", 1);
  hakmem_option_set("HAKMEM_HUGE_CACHE_MB", 0);
  size_t n = (size_t)16 << 20;
  for (int i = 0; i < 32; i++) {
    char *p = hakmem_malloc(n);
    if (filled) memset(p, 1, n);
    else p[0] = p[n - 1] = 1;
    hakmem_free(p);
  }
  char *p = hakmem_malloc(n);
  int e = thp_eligible(p + n - 1);
  hakmem_free(p);
  hakmem_option_set("HAKMEM_HUGEPAGES", mode);
  hakmem_option_set("HAKMEM_HUGE_CACHE_MB", cache);
  return e;
}

TEST(huge_blocks_touched_sparsely_keep_small_pages) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  if (thp_setting("always")) { SKIP("transparent huge pages are \"always\" here: every mapping is eligible"); return; }
  int e = huge_block_after(false);
  if (e < 0) { SKIP("smaps has no THPeligible (kernel older than 5.x)"); return; }
  CHECKF(e == 0, "after blocks touched at both ends only, a huge block asks for huge pages (THPeligible %d)", e);
}

TEST(huge_blocks_filled_get_huge_pages) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  int e = huge_block_after(true);
  if (e < 0) { SKIP("smaps has no THPeligible (kernel older than 5.x)"); return; }
  CHECKF(e == 1, "after filled blocks, a huge block does not ask for huge pages (THPeligible %d)", e);
  /* and back */
  if (thp_setting("always")) { NOTE("not checked: blocks touched sparsely again (THP is \"always\" here)"); return; }
  e = huge_block_after(false);
  CHECKF(e == 0, "after blocks touched at both ends again, THPeligible %d", e);
}

/* The default probe's exit status, bits (default_probe). */
enum { PROBE_FIRST = 1, PROBE_UPPER = 2, PROBE_NEXT = 4, PROBE_UNKNOWN = 8, PROBE_UPPER_UNCHECKED = 16,
       PROBE_EXEC = 64 };

/* The default, in a child exec'd with it (set, so that TEST_ENV keeps it),
 * which fills the blocks it makes or leaves them untouched. */
static void exec_default(const char *touch) {
  char *argv[] = {"test_hugepages", "--default-probe", (char *)touch, NULL};
  char *env[] = {"HAKMEM_HUGEPAGES=1", NULL};
  execve("/proc/self/exe", argv, env);
  _exit(PROBE_EXEC);
}
static void exec_filled(void) { exec_default("filled"); }
static void exec_untouched(void) { exec_default("untouched"); }

/* Its exit status (a failure's bits): PROBE_FIRST when the program's first
 * block is eligible (a small heap); PROBE_UPPER when the upper half of the
 * first segment disagrees with the rule (PROBE_UPPER_UNCHECKED: its origin
 * sat beside the line); PROBE_NEXT when a fresh segment's block after
 * SEG_HUGE_MIN or more of them, in 4 KiB pages, disagrees with want (filled:
 * eligible; untouched: not); PROBE_UNKNOWN when smaps does not say,
 * PROBE_EXEC when the child could not be exec'd.
 * The first segment's size-class pages go from its random origin up: its
 * upper half is first touched when the heap has filled the lower half's
 * pages of 64-byte blocks, and asks then if those are SEG_HUGE_MIN or more
 * (16 slices of 64 KiB).  What they hold is counted, not taken from the
 * origin: other classes' pages (thp_eligible reads smaps through stdio,
 * whose buffers are hakmem's) may take slices among them.  The two
 * counts beside that line are not checked: those pages' few resident bytes
 * may move it. */
__attribute__((constructor)) static void default_probe(int argc, char **argv) {
  if (argc < 3 || strcmp(argv[1], "--default-probe")) return;
  bool fill = !strcmp(argv[2], "filled");
  int bad = 0;
  char *p = hakmem_malloc(64);
  memset(p, 1, 64);
  int e = thp_eligible(p);
  if (e < 0) _exit(PROBE_UNKNOWN);
  if (e != 0) bad |= PROBE_FIRST;
  uintptr_t first = (uintptr_t)p & ~(uintptr_t)SEG_MASK;
  const int pages = SEG_HUGE_MIN / SLICE_SIZE;
  if (fill) {
    char *upper = NULL;
    size_t made = 1;                             /* blocks before the upper half's first */
    for (int i = 0; i < NB && !upper; i++) {     /* (kept: the first segment stays full) */
      char *b = hakmem_malloc(64);
      memset(b, 1, 64);
      if ((uintptr_t)b - first >= SEG_SIZE / 2 && (uintptr_t)b - first < SEG_SIZE) upper = b;
      else made++;
    }
    int below = (int)(made * 64 / SLICE_SIZE);   /* (slices of them) */
    if (!upper || (below <= pages && below >= pages - 1)) bad |= PROBE_UPPER_UNCHECKED;
    else if (thp_eligible(upper) != (below >= pages)) bad |= PROBE_UPPER;
  }
  size_t n = SEG_SIZE / 2 + SLICE_SIZE, had = 0;    /* (a segment each) */
  while (had < SEG_HUGE_MIN) {
    char *b = hakmem_malloc(n);
    if (fill) memset(b, 1, n);
    had += n;
  }
  if (thp_eligible(hakmem_malloc(n)) != fill) bad |= PROBE_NEXT;
  _exit(bad);
}
/* The child's verdict, for segments filled or left untouched. */
static void check_default(void (*child)(void), const char *touched) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  char msg[256];
  int st = run_in_child(child, msg, sizeof msg);
  CHECKF(WIFEXITED(st), "status %#x: the probe did not exit", st);
  int bad = WIFEXITED(st) ? WEXITSTATUS(st) : 0;
  if (bad == PROBE_UNKNOWN) { SKIP("smaps has no THPeligible (kernel older than 5.x)"); return; }
  CHECKF(bad != PROBE_EXEC, "the probe could not exec /proc/self/exe");
  if (bad == PROBE_EXEC) return;
  if (bad & PROBE_UPPER_UNCHECKED) NOTE("not checked: the upper half of the first segment (its origin beside SEG_HUGE_MIN)");
  CHECKF(!(bad & PROBE_FIRST), "at HAKMEM_HUGEPAGES=1 a program's first block is eligible for huge pages");
  CHECKF(!(bad & PROBE_UPPER), "at HAKMEM_HUGEPAGES=1 the upper half of the first segment, %s, disagrees with "
         "the heap's size when it was first touched", touched);
  CHECKF(!(bad & PROBE_NEXT), "at HAKMEM_HUGEPAGES=1 a fresh segment after %u KiB of %s blocks is %s for huge pages",
         SEG_HUGE_MIN >> 10, touched, strcmp(touched, "filled") ? "eligible" : "not eligible");
}
TEST(default_segments_filled_get_huge_pages) { check_default(exec_filled, "filled"); }
TEST(default_segments_untouched_keep_small_pages) { check_default(exec_untouched, "untouched"); }

TEST_MAIN()
