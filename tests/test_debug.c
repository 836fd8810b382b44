/* The debug build's checks (make debug: hakmem and this test built with
 * -DHM_DEBUG).  A broken invariant is reported as "hakmem: assertion failed:
 * <expr> (file:line)" and the process aborts, for an assertion in the code
 * as for the validation walk (heap_validate, src/debug.c).  Each case breaks
 * one on purpose in a child.  The release build compiles the assertions
 * out: there the cases are skipped. */
#include "test.h"
#include "hakmem.h"
#include "internal.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#define RELEASE_SKIP "release build: hakmem's assertions are compiled out (make debug runs this)"

/* heap_collect_all requires the heap's lock: called without it. */
static void collect_unlocked(void) {
  void *p = hakmem_malloc(64);                 /* (this thread's heap) */
  heap_collect_all(hm_tls_heap);
  hakmem_free(p);
}

/* A page counts one block more in use than its free list leaves: the walk
 * malloc_trim runs finds it. */
static void count_off_by_one(void) {
  void *p = hakmem_malloc(64);
  page_t *pg = page_of(segment_of(p), p);
  page_set_used(pg, page_used(pg) + 1);
  hakmem_malloc_trim(0);
}

static void expect_assertion(void (*fn)(void), const char *where, const char *what) {
  char msg[2048];
  int st = run_in_child(fn, msg, sizeof msg);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strncmp(msg, "hakmem: assertion failed: ", 26) == 0 &&
         strstr(msg, where) != NULL,
         "%s: expected SIGABRT and \"hakmem: assertion failed: ...%s...\", got status %#x and \"%.200s\"", what, where,
         (unsigned)st, msg);
}

TEST(lock_assertion_reports_and_aborts) {
  if (!HM_DEBUG_ON) { SKIP(RELEASE_SKIP); return; }
  expect_assertion(collect_unlocked, "heap_held(h) (src/thread.c:", "heap_collect_all without the heap lock");
}

TEST(validation_walk_finds_a_wrong_page_count) {
  if (!HM_DEBUG_ON) { SKIP(RELEASE_SKIP); return; }
  expect_assertion(count_off_by_one, "page_used(pg) (src/debug.c:", "a page's used count one too high");
}

TEST_MAIN()
