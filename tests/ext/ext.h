/* ext.h — what the programs of tests/ext/ share on top of test.h.
 *
 * These programs are linked with the C library only: tests/ext/modes.sh runs
 * each of them under glibc's malloc and under hakmem (LD_PRELOAD, default and
 * HAKMEM_SECURE=1) and compares the results.  EXT_ALLOCATOR names the mode
 * ("glibc", "hakmem" or "hakmem-secure"; "glibc" when unset).
 *
 * ext_child() runs a function in a forked child, in a process group of its
 * own, under a time limit: a child that hangs (a deadlock in fork, exit or a
 * signal handler) is killed with its whole group and reported, so one hang
 * costs its case, not the run. */
#ifndef HAKMEM_EXT_H
#define HAKMEM_EXT_H
#ifndef TEST_DEFAULT_TIMEOUT
#define TEST_DEFAULT_TIMEOUT 60
#endif
#include "test.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/wait.h>

static inline const char *ext_allocator(void) {
  const char *a = getenv("EXT_ALLOCATOR");
  return a && *a ? a : "glibc";
}
static inline bool ext_under_hakmem(void) { return strncmp(ext_allocator(), "hakmem", 6) == 0; }

typedef struct {
  int status;        /* waitpid status, valid unless timed_out */
  bool timed_out;    /* killed after the time limit */
  char what[96];     /* "exit status 3", "killed by signal 6 (Aborted)", "timed out after 10000 ms" */
} ext_result_t;

/* Run fn(arg) in a child (its return value is the exit status) and wait at
 * most limit_ms for it.  Whatever is left of its process group afterwards
 * (grandchildren stuck in a fork) is killed too. */
static inline ext_result_t ext_child(int (*fn)(void *), void *arg, long limit_ms) {
  ext_result_t r = {0};
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) { snprintf(r.what, sizeof r.what, "fork failed: %s", strerror(errno)); r.status = -1; return r; }
  if (pid == 0) {
    setpgid(0, 0);
    test_child_defaults();
    int rc = fn(arg);
    fflush(NULL);
    _exit(rc);
  }
  setpgid(pid, pid);                     /* either side may win the race */
  uint64_t deadline = test_now_ms() + (uint64_t)limit_ms;
  for (;;) {
    pid_t w = waitpid(pid, &r.status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) { snprintf(r.what, sizeof r.what, "waitpid: %s", strerror(errno)); r.status = -1; return r; }
    if (test_now_ms() >= deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {}
      r.timed_out = true;
      break;
    }
    test_sleep_ms(5);
  }
  kill(-pid, SIGKILL);
  if (r.timed_out) snprintf(r.what, sizeof r.what, "timed out after %ld ms", limit_ms);
  else if (WIFEXITED(r.status)) snprintf(r.what, sizeof r.what, "exit status %d", WEXITSTATUS(r.status));
  else if (WIFSIGNALED(r.status)) snprintf(r.what, sizeof r.what, "killed by signal %d (%s)", WTERMSIG(r.status), strsignal(WTERMSIG(r.status)));
  else snprintf(r.what, sizeof r.what, "status 0x%x", r.status);
  return r;
}
static inline bool ext_exited(const ext_result_t *r, int code) {
  return !r->timed_out && WIFEXITED(r->status) && WEXITSTATUS(r->status) == code;
}
static inline bool ext_signaled(const ext_result_t *r, int sig) {
  return !r->timed_out && WIFSIGNALED(r->status) && WTERMSIG(r->status) == sig;
}

/* Fill and check n bytes with a pattern that depends on seed (a block's
 * address makes two blocks handed out at once, or an overwrite, show). */
static inline void ext_fill(void *p, size_t n, uintptr_t seed) {
  unsigned char *c = p;
  for (size_t i = 0; i < n; i++) c[i] = (unsigned char)((seed >> 4) + i * 7);
}
static inline bool ext_intact(const void *p, size_t n, uintptr_t seed) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) if (c[i] != (unsigned char)((seed >> 4) + i * 7)) return false;
  return true;
}
static inline bool ext_zero(const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) if (c[i]) return false;
  return true;
}
#endif
