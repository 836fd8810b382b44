/* test.h — a minimal test harness.  TEST(name) defines a case (registered
 * automatically); TEST_MAIN() runs every case in order.  Each case prints one
 * line, "ok - file:name" or "not ok - file:name: reason", which tests/run.sh
 * counts.  A failed CHECK records the failure and the case goes on. */
#ifndef HAKMEM_TEST_H
#define HAKMEM_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void (*test_fn)(void);
static struct { const char *name; test_fn fn; } test_cases[256];
static int test_count;
static int test_failed_now;
static char test_reason[512];

#define TEST(tname)                                                             \
  static void test_##tname(void);                                               \
  __attribute__((constructor)) static void test_register_##tname(void) {        \
    test_cases[test_count].name = #tname;                                       \
    test_cases[test_count++].fn = test_##tname;                                 \
  }                                                                             \
  static void test_##tname(void)

#define CHECKF(cond, ...)                                                       \
  do {                                                                          \
    if (!(cond)) {                                                              \
      if (!test_failed_now) {                                                   \
        int n_ = snprintf(test_reason, sizeof test_reason, "%s:%d: ", __FILE__, __LINE__); \
        snprintf(test_reason + n_, sizeof test_reason - (size_t)n_, __VA_ARGS__); \
      }                                                                         \
      test_failed_now = 1;                                                      \
    }                                                                           \
  } while (0)
#define CHECK(cond) CHECKF(cond, "%s", #cond)

/* Environment: SANITIZED=1 when run under a sanitizer (scale work down). */
static inline int test_sanitized(void) { const char *s = getenv("SANITIZED"); return s && *s == '1'; }

/* Every test program is bounded in time: SIGALRM ends a hung one (run.sh
 * reports it), whatever a deadlock might be waiting on. */
#define TEST_MAIN()                                                             \
  int main(void) {                                                              \
    int failed = 0;                                                             \
    alarm(test_sanitized() ? 900 : 240);                                        \
    const char *file = strrchr(__FILE__, '/') ? strrchr(__FILE__, '/') + 1 : __FILE__; \
    for (int i = 0; i < test_count; i++) {                                      \
      test_failed_now = 0;                                                      \
      test_cases[i].fn();                                                       \
      if (test_failed_now) { failed++; printf("not ok - %s:%s: %s\n", file, test_cases[i].name, test_reason); } \
      else printf("ok - %s:%s\n", file, test_cases[i].name);                    \
      fflush(stdout);                                                           \
    }                                                                           \
    return failed ? 1 : 0;                                                      \
  }
#endif
