/* HAKMEM_HUGEPAGES=2: segments ask for transparent huge pages too, so the
 * mapping that holds small blocks is eligible for them (smaps' THPeligible);
 * at the default (1) only blocks with a mapping of their own are, and a
 * program of small blocks keeps 4 KiB pages. */
#include "test.h"
#include "hakmem.h"

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

static bool thp_possible(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char s[128] = "";
  if (f) { if (!fgets(s, sizeof s, f)) s[0] = 0; fclose(f); }
  return strstr(s, "[never]") == NULL && s[0];
}

TEST(segments_ask_for_huge_pages) {
  if (!thp_possible()) { SKIP("transparent huge pages are off here"); return; }
  void *p = hakmem_malloc(64);
  int e = thp_eligible(p);
  if (e < 0) { SKIP("smaps has no THPeligible (kernel older than 5.x)"); hakmem_free(p); return; }
  CHECKF(e == 1, "a small block's segment is not eligible for huge pages (THPeligible %d)", e);
  hakmem_free(p);
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
