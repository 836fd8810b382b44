/* glibc_double_free.c — double frees are caught, and a live block whose bytes
 * look like a freed one's is not mistaken for one, after glibc's tst-tcfree1,
 * tst-tcfree2, tst-tcfree4 and tst-tcfree3.  Each double free runs in a child
 * that must die of SIGABRT after saying "double free" on stderr (glibc and
 * hakmem both do); the child's stderr is kept out of the run's. */
#include "ext.h"

#include <fcntl.h>
#include <gnu/libc-version.h>

static char message[512];

/* Run fn in a child with stderr in a file; the first line is kept in message. */
static ext_result_t with_stderr(int (*fn)(void *)) {
  char path[] = "/tmp/hakmem-double-free-XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  dup2(fd, 2);
  ext_result_t r = ext_child(fn, NULL, 10000);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, message, sizeof message - 1, 0);
  message[n > 0 ? n : 0] = 0;
  message[strcspn(message, "\n")] = 0;
  close(fd);
  unlink(path);
  return r;
}

#define EXPECT_CAUGHT(fn)                                                        \
  do {                                                                          \
    ext_result_t r_ = with_stderr(fn);                                          \
    CHECKF(ext_signaled(&r_, SIGABRT), "child: %s (expected SIGABRT); stderr: %s", r_.what, message); \
    CHECKF(strstr(message, "double free") != NULL, "the report does not say \"double free\": %s", message); \
  } while (0)

/* One small block freed twice in a row. */
static int twice(void *unused) {
  char *volatile x = malloc(32);
  free(x);
  free(x);
  return 0;
}
TEST(tst_tcfree1) { EXPECT_CAUGHT(twice); }

/* The first of twenty freed blocks freed again, after the other nineteen. */
static int first_of_twenty(void *unused) {
  char *volatile p[20];
  for (int i = 0; i < 20; i++) p[i] = malloc(20);
  for (int i = 0; i < 20; i++) free(p[i]);
  free(p[0]);
  return 0;
}
TEST(tst_tcfree2) { EXPECT_CAUGHT(first_of_twenty); }

/* A freed block's neighbour overflows by one zero byte into it (glibc's
 * size field), then the block is freed again. */
static int after_off_by_one(void *unused) {
  const char *payload = "BBBBBBBBBBBBBBBBBBBBBBBB";
  char *volatile first = malloc(strlen(payload));
  char *volatile second = malloc(0x118);
  free(second);
  strcpy(first, payload);                /* one byte too many */
  free(second);
  return 0;
}
TEST(tst_tcfree4) {
  if (!ext_under_hakmem() && strverscmp(gnu_get_libc_version(), "2.42") < 0) {
    SKIP("glibc %s does not catch this one (its test came with 2.42)", gnu_get_libc_version());
    return;
  }
  EXPECT_CAUGHT(after_off_by_one);
}

/* Live blocks holding a copy of a freed block's bytes (its free-list word
 * and key) are freed without complaint. */
static int lookalikes(void *unused) {
  void **volatile a = malloc(32), **volatile b = malloc(32), **volatile c = malloc(127 * 1024);
  memset((void *)c, 0xff, 127 * 1024);
  free((void *)a);
  memcpy((void *)b, (void *)a, 32);
  memcpy((void *)c, (void *)a, 32);
  free((void *)b);
  free((void *)c);
  return 0;
}
TEST(tst_tcfree3) {
  ext_result_t r = with_stderr(lookalikes);
  CHECKF(ext_exited(&r, 0), "child: %s; stderr: %s", r.what, message);
}

TEST_MAIN()
