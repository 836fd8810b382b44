/* HAKMEM_HUGEPAGES=2: segments ask for transparent huge pages too, so the
 * mapping that holds small blocks is eligible for them (smaps' THPeligible);
 * at the default (1) only blocks with a mapping of their own may be, while
 * the program fills them, and a program of small blocks keeps 4 KiB pages. */
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

/* Three segments full of 64-byte blocks; then every block of the second
 * one's slices 16-63 freed (the second holds nothing else: the heap's
 * earlier pages are in the first, which starts at a random slice, and the
 * class's current page, which stays, is in the third).  Once the decay has
 * passed, the second segment's upper 2 MiB (no page in use) is purged, and
 * the free slices of its lower 2 MiB (pages in use: slices 1-15) stay
 * resident, its huge page whole. */
TEST(decay_purges_whole_huge_pages) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  for (int i = 0; i < NB; i++) {
    nb[i] = hakmem_malloc(64);
    memset(nb[i], 1, 64);
  }
  uintptr_t seg = (uintptr_t)nb[NB / 2] & ~(((uintptr_t)4 << 20) - 1);
  for (int i = 0; i < NB; i++) {
    uintptr_t off = (uintptr_t)nb[i] - seg;
    if (off < ((uintptr_t)4 << 20) && off >= (uintptr_t)16 << 16) { hakmem_free(nb[i]); nb[i] = NULL; }
  }
  const char *low_free = (const char *)seg + ((size_t)16 << 16), *high = (const char *)seg + ((size_t)2 << 20);
  for (int i = 0; i < 10 && resident(high, (size_t)2 << 20) != 0; i++) {   /* the decay, as a slow path runs it */
    test_sleep_ms(30);
    heap_enter(hm_tls_heap);
    segment_purge_due(hm_tls_heap, PURGE_BUSY, NULL);
    heap_leave(hm_tls_heap);
  }
  size_t low_in = resident(low_free, (size_t)1 << 20), high_in = resident(high, (size_t)2 << 20);
  NOTE("after the decay: %zu of 256 free pages resident in the first half, %zu of 512 in the second", low_in, high_in);
  CHECKF(high_in == 0, "the second 2 MiB, no page in use, kept %zu pages resident", high_in);
  CHECKF(low_in == 256, "the first 2 MiB, pages in use, had its free slices purged (%zu of 256 resident)", low_in);
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

/* The default, in a child exec'd with it (set, so that TEST_ENV keeps it). */
static void exec_default(void) {
  char *argv[] = {"test_hugepages", "--default-probe", NULL};
  char *env[] = {"HAKMEM_HUGEPAGES=1", NULL};
  execve("/proc/self/exe", argv, env);
  _exit(2);
}
__attribute__((constructor)) static void default_probe(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--default-probe")) return;
  void *p = hakmem_malloc(64);
  _exit(thp_eligible(p) == 0 ? 0 : 1);
}
TEST(default_keeps_small_pages_for_segments) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  char msg[256];
  int st = run_in_child(exec_default, msg, sizeof msg);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x: at HAKMEM_HUGEPAGES=1 a segment is eligible", st);
}

TEST_MAIN()
