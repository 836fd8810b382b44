/* test.h — a minimal test harness for hakmem's test programs.
 *
 *   TEST(name) { ... CHECK(x == 1); CHECKF(p != NULL, "size %zu", n); ... }
 *   TEST_MAIN()
 *
 * TEST(name) defines a case (registered automatically, run in file order);
 * TEST_MAIN() defines main(), which runs every case (or only the cases named
 * on the command line) and prints one line per case:
 *
 *   ok - test_api.c:calloc_overflow
 *   not ok - test_api.c:calloc_overflow: tests/test_api.c:91: errno == ENOMEM
 *
 * tests/run.sh counts those lines.  A failed CHECK records the first failure
 * (file:line and the expression, or CHECKF's message) and the case goes on;
 * the next case runs regardless.  A case that cannot go on returns early.
 * A case that cannot run here calls SKIP("why") and returns: it prints
 * "ok - test_x.c:name # SKIP why" (a failed CHECK before it still fails it).
 * CHECK may be used from any thread of the case; the threads must be joined
 * before the case returns.  Lines starting with "# " (NOTE) are diagnostics
 * that run.sh shows as they come.
 *
 * Each case has a time limit: env TEST_CASE_TIMEOUT seconds, else
 * TEST_DEFAULT_TIMEOUT (120 unless the file defines it before including
 * test.h), 600 when SANITIZED=1.  A hung case prints "not ok - ...: timed
 * out".  A crash (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL; under ASan only
 * SIGABRT, which hakmem's error reports raise; under TSan none) prints
 * "not ok - ...: crashed with signal N", with the case's CONTEXT(...) and
 * any CHECK that failed before.  After a crash or a time-out the program
 * re-executes itself to run the remaining cases, the exit status still
 * counting the failure.  Forked children are not affected (a child that is
 * meant to die calls test_child_defaults()).
 * Exit status: 0 iff every case passed. */
#ifndef HAKMEM_TEST_H
#define HAKMEM_TEST_H
#include <dirent.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define TEST_SANITIZER_BUILD 1
#endif
#endif
#ifndef TEST_SANITIZER_BUILD
#define TEST_SANITIZER_BUILD 0
#endif
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN_BUILD 1
#endif
#endif
#ifndef TEST_TSAN_BUILD
#define TEST_TSAN_BUILD 0
#endif

#define TEST_MAX_CASES 256
#ifndef TEST_DEFAULT_TIMEOUT          /* seconds per case; a file may raise it */
#define TEST_DEFAULT_TIMEOUT 120
#endif
typedef void (*test_fn)(void);
static struct { const char *name; test_fn fn; } test_cases[TEST_MAX_CASES];
static int test_count;
static int test_failed_now;          /* failed CHECKs in the current case (atomic) */
static char test_reason[512];
static const char *test_file_name = "?";
static const char *volatile test_current = "(startup)";
static pid_t test_main_pid;
static unsigned test_case_timeout;
static char test_context[256];        /* CONTEXT(...): named in a crash report */
static char test_skip[256];           /* SKIP(...): why the case checked nothing */

#define TEST(tname)                                                             \
  static void test_##tname(void);                                               \
  __attribute__((constructor)) static void test_register_##tname(void) {        \
    if (test_count >= TEST_MAX_CASES) { fputs("test.h: too many cases\n", stderr); abort(); } \
    test_cases[test_count].name = #tname;                                       \
    test_cases[test_count++].fn = test_##tname;                                 \
  }                                                                             \
  static void test_##tname(void)

#define CHECKF(cond, ...)                                                       \
  do {                                                                          \
    if (!(cond)) {                                                              \
      if (__atomic_fetch_add(&test_failed_now, 1, __ATOMIC_ACQ_REL) == 0) {     \
        int n_ = snprintf(test_reason, sizeof test_reason, "%s:%d: ", __FILE__, __LINE__); \
        if (n_ < 0 || n_ >= (int)sizeof test_reason) n_ = 0;                    \
        snprintf(test_reason + n_, sizeof test_reason - (size_t)n_, __VA_ARGS__); \
      }                                                                         \
    }                                                                           \
  } while (0)
#define CHECK(cond) CHECKF(cond, "%s", #cond)

/* What the case is doing now, for the report if it crashes or hangs:
 * CONTEXT("realloc of %zu to %zu", n, m); CONTEXT_CLEAR() when done. */
#define CONTEXT(...) snprintf(test_context, sizeof test_context, __VA_ARGS__)
#define CONTEXT_CLEAR() (test_context[0] = 0)

/* The case cannot check what it is for here (a kernel setting, a missing
 * tool): it is reported as "ok - ... # SKIP why", which run.sh counts as
 * skipped, not passed.  The case returns after it. */
#define SKIP(...) snprintf(test_skip, sizeof test_skip, __VA_ARGS__)

/* A diagnostic line ("# ...") shown by run.sh as it comes. */
#define NOTE(...)                                                               \
  do { printf("# "); printf(__VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

/* Environment: SANITIZED=1 when run under a sanitizer (scale work down). */
static inline int test_sanitized(void) {
  const char *s = getenv("SANITIZED");
  return TEST_SANITIZER_BUILD || (s && *s == '1');
}

/* ---- helpers the programs share ---------------------------------------------- */

/* This program's path, to exec it again for a case that needs a fresh
 * process (readlink: under valgrind, /proc/self/exe is valgrind's). */
static inline const char *test_self_exe(void) {
  static char path[4096];
  if (!path[0]) {
    ssize_t k = readlink("/proc/self/exe", path, sizeof path - 1);
    path[k > 0 ? k : 0] = 0;
  }
  return path;
}

/* How many of this process's threads are hakmem's purger (it names itself
 * hakmem-purge). */
static inline int test_purger_threads(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%.20s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f) && !strncmp(comm, "hakmem-purge", 12)) n++;
    fclose(f);
  }
  if (d) closedir(d);
  return n;
}

/* The process's resident set in KiB (/proc/self/statm). */
static inline long test_rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long a = 0, b = 0;
  if (f) { if (fscanf(f, "%ld %ld", &a, &b) != 2) b = 0; fclose(f); }
  return b * (sysconf(_SC_PAGESIZE) / 1024);
}
/* The first number in a file (a /proc/sys setting), or -1. */
static inline long test_read_long(const char *path) {
  FILE *f = fopen(path, "r");
  long v = -1;
  if (f) { if (fscanf(f, "%ld", &v) != 1) v = -1; fclose(f); }
  return v;
}
static inline void test_sleep_ms(long ms) {
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}
static inline uint64_t test_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
static inline uint64_t test_rand(uint64_t *r) { *r ^= *r << 13; *r ^= *r >> 7; *r ^= *r << 17; return *r; }
/* Does the kernel have what hakmem's thread caches need (membarrier's
 * private expedited command)?  Without it they are off. */
static inline int test_thread_caches_possible(void) {
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

/* TEST_ENV("HAKMEM_X=1"): hakmem reads its options once, at start-up, so a
 * program that needs a setting re-executes itself with it (before anything
 * is allocated) unless the variable is already set. */
extern char **environ;
static inline void test_reexec_with(const char *setting, char **argv) {
  size_t name = strcspn(setting, "=");
  for (char **e = environ; *e; e++) if (strncmp(*e, setting, name) == 0 && (*e)[name] == '=') return;
  size_t n = 0;
  while (environ[n]) n++;
  char *env[n + 2];
  for (size_t i = 0; i < n; i++) env[i] = environ[i];
  env[n] = (char *)setting;
  env[n + 1] = NULL;
  execve("/proc/self/exe", argv, env);
  perror("execve");
  _exit(1);
}
#define TEST_ENV(setting)                                                       \
  __attribute__((constructor(101))) static void test_env_setup(int argc, char **argv) { \
    (void)argc;                                                                 \
    test_reexec_with(setting, argv);                                            \
  }

/* Async-signal-safe output of "not ok - file:case: what<number>\n". */
static void test_sig_line(const char *what, long num, const char *tail) {
  char buf[1024];
  size_t n = 0;
  const char *parts[] = {"not ok - ", test_file_name, ":", test_current, ": ", what};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    for (const char *s = parts[i]; *s && n < sizeof buf - 32; s++) buf[n++] = *s;
  if (num >= 0) {
    char d[24];
    int k = 0;
    do { d[k++] = (char)('0' + num % 10); num /= 10; } while (num && k < 20);
    while (k) buf[n++] = d[--k];
  }
  for (const char *s = tail; *s && n < sizeof buf - 2; s++) buf[n++] = *s;
  if (test_context[0]) {
    for (const char *s = ", during: "; *s && n < sizeof buf - 2; s++) buf[n++] = *s;
    for (const char *s = test_context; *s && n < sizeof buf - 2; s++) buf[n++] = *s;
  }
  if (__atomic_load_n(&test_failed_now, __ATOMIC_RELAXED) && test_reason[0]) {   /* a CHECK failed before */
    for (const char *s = "; earlier: "; *s && n < sizeof buf - 2; s++) buf[n++] = *s;
    for (const char *s = test_reason; *s && n < sizeof buf - 2; s++) buf[n++] = *s;
  }
  buf[n++] = '\n';
  ssize_t w = write(STDOUT_FILENO, buf, n);
  (void)w;
}

/* After a crash or a time-out the program re-executes itself to run the
 * cases after the failed one ("--resume=<next case>,<failures so far>"),
 * so one broken case does not hide the others' results.  The arguments are
 * prepared before each case: nothing is built inside the signal handler. */
static char test_resume_arg[64];
static char *test_resume_argv[TEST_MAX_CASES + 3];

static void test_resume(void) {
  if (test_resume_argv[0]) execve("/proc/self/exe", test_resume_argv, environ);
}

static void test_on_alarm(int sig) {
  (void)sig;
  if (getpid() != test_main_pid) _exit(125);
  test_sig_line("timed out after ", (long)test_case_timeout, " s (deadlock or runaway case)");
  test_resume();
  _exit(2);
}

static void test_on_crash(int sig) {
  if (getpid() == test_main_pid) {
    const char *name = sig == SIGSEGV ? " (SIGSEGV)" : sig == SIGBUS ? " (SIGBUS)" : sig == SIGABRT ? " (SIGABRT)"
                     : sig == SIGFPE ? " (SIGFPE)" : sig == SIGILL ? " (SIGILL)" : "";
    test_sig_line("crashed with signal ", sig, name);
    test_resume();
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* For a forked child that is expected to die: default signal actions. */
static inline void test_child_defaults(void) {
  int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGALRM};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
  alarm(0);
}

/* Run fn in a forked child (default signal actions, 20 s alarm); return its
 * wait status, with the first line of its stderr in msg. */
static inline int run_in_child(void (*fn)(void), char *msg, size_t cap) {
  int err[2];
  if (pipe(err)) return -1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    test_child_defaults();
    alarm(20);
    dup2(err[1], 2);
    close(err[0]);
    fn();
    _exit(0);
  }
  close(err[1]);
  size_t len = 0;
  ssize_t k;
  while ((k = read(err[0], msg + len, cap - 1 - len)) > 0) len += (size_t)k;
  msg[len] = 0;
  close(err[0]);
  char *nl = strchr(msg, '\n');
  if (nl) *nl = 0;
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

static int test_selected(int argc, char **argv, int first, const char *name) {
  if (argc <= first) return 1;
  for (int i = first; i < argc; i++) if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

static int test_main(int argc, char **argv, const char *file) {
  int failed = 0, ran = 0, start = 0, first_arg = 1;
  test_file_name = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
  test_main_pid = getpid();
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && sscanf(argv[1], "--resume=%d,%d", &start, &failed) == 2) { first_arg = 2; ran = 1; }
  sigset_t none;                      /* a resumed program inherits the handler's blocked signal */
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  const char *t = getenv("TEST_CASE_TIMEOUT");
  test_case_timeout = t && atoi(t) > 0 ? (unsigned)atoi(t) : test_sanitized() ? 600 : TEST_DEFAULT_TIMEOUT;
  signal(SIGALRM, test_on_alarm);
  if (!TEST_SANITIZER_BUILD) {
    int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], test_on_crash);
  } else if (!TEST_TSAN_BUILD) {
    signal(SIGABRT, test_on_crash);   /* hakmem's own error reports; ASan keeps SEGV & co. */
  }
  /* resume arguments: argv[0], --resume=..., then the case filter if any */
  int na = 0;
  test_resume_argv[na++] = argv[0];
  test_resume_argv[na++] = test_resume_arg;
  for (int i = first_arg; i < argc && na < TEST_MAX_CASES + 2; i++) test_resume_argv[na++] = argv[i];
  test_resume_argv[na] = NULL;
  for (int i = start; i < test_count; i++) {
    if (!test_selected(argc, argv, first_arg, test_cases[i].name)) continue;
    ran++;
    test_failed_now = 0;
    test_reason[0] = 0;
    test_context[0] = 0;
    test_skip[0] = 0;
    test_current = test_cases[i].name;
    snprintf(test_resume_arg, sizeof test_resume_arg, "--resume=%d,%d", i + 1, failed + 1);
    fflush(stdout);
    alarm(test_case_timeout);
    test_cases[i].fn();
    alarm(0);
    int nfail = __atomic_load_n(&test_failed_now, __ATOMIC_ACQUIRE);
    if (nfail) {
      failed++;
      if (nfail > 1) printf("not ok - %s:%s: %s (and %d more failed checks)\n", test_file_name, test_cases[i].name, test_reason, nfail - 1);
      else printf("not ok - %s:%s: %s\n", test_file_name, test_cases[i].name, test_reason);
    } else if (test_skip[0]) {
      printf("ok - %s:%s # SKIP %s\n", test_file_name, test_cases[i].name, test_skip);
    } else {
      printf("ok - %s:%s\n", test_file_name, test_cases[i].name);
    }
    fflush(stdout);
  }
  test_current = "(exit)";
  test_resume_argv[0] = NULL;
  if (ran == 0) { printf("not ok - %s: no test case matched\n", test_file_name); return 1; }
  return failed ? 1 : 0;
}

#define TEST_MAIN()                                                             \
  int main(int argc, char **argv) { return test_main(argc, argv, __FILE__); }

#endif
