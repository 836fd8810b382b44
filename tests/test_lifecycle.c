/* The process's life under hakmem behaves as under glibc's malloc: exit,
 * pthread_exit() from main, fork (also from a signal handler, also while other
 * threads read with getline and flush every stream), with and without the
 * purger (hakmem's background thread, src/purge.c) running; and malloc_trim
 * reaches another thread's memory.
 *
 * Each case runs its scenario in a fresh process: this program re-executed
 * with HM_SCENARIO=<name> (and the case's HAKMEM_* settings), whose main
 * runs that scenario.  The case waits for it with
 * a time limit (a hang is killed and fails) and checks how it ended. */
#include "test.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>

/* The process's threads (/proc/self/stat's 20th field), or 0. */
static int thread_count(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  char buf[512];
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  for (int field = 2; p && field < 20; field++) p = strchr(p + 1, ' ');
  return p ? atoi(p + 1) : 0;
}

/* ---- running a scenario ----------------------------------------------------------- */

/* How the scenario process ended: its exit status, 128 + a signal, or -1 if
 * it was still running after limit_ms (then killed). */
static int run_scenario(const char *name, const char *setting, long limit_ms) {
  char scen[64];
  snprintf(scen, sizeof scen, "HM_SCENARIO=%s", name);
  size_t n = 0;
  while (environ[n]) n++;
  char *env[n + 3];
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "HM_SCENARIO=", 12) && strncmp(environ[i], "HAKMEM_", 7)) env[k++] = environ[i];
  env[k++] = scen;
  if (setting) env[k++] = (char *)setting;
  env[k] = NULL;
  char *argv[] = {"/proc/self/exe", NULL};
  pid_t pid;
  fflush(stdout);
  if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env)) return 99;
  int st;
  uint64_t deadline = test_now_ms() + (uint64_t)limit_ms;
  while (test_now_ms() < deadline) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0) return 98;
    test_sleep_ms(5);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

static const char *ended(int st, char *buf, size_t n) {
  if (st == -1) snprintf(buf, n, "still running at the limit (a hang: killed)");
  else if (st > 128) snprintf(buf, n, "killed by signal %d", st - 128);
  else snprintf(buf, n, "exit status %d", st);
  return buf;
}

#define EXPECT_SCENARIO(name, setting, limit_ms, want)                                        \
  do {                                                                                        \
    char why_[96];                                                                            \
    int st_ = run_scenario(name, setting, limit_ms);                                          \
    CHECKF(st_ == (want), "%s%s%s: %s, expected exit status %d", name, (setting) ? " with " : "", \
           (setting) ? (const char *)(setting) : "", ended(st_, why_, sizeof why_), want);    \
  } while (0)

/* ---- what the scenarios share ------------------------------------------------------- */

/* Allocate and free blocks of many sizes for about ms milliseconds. */
static void churn_for(long ms) {
  uint64_t end = test_now_ms() + (uint64_t)ms, r = (uint64_t)(uintptr_t)&r | 1;
  void *slot[64] = {0};
  while (test_now_ms() < end)
    for (int i = 0; i < 1000; i++) {
      int k = (int)(test_rand(&r) % 64);
      free(slot[k]);
      slot[k] = malloc(16 + test_rand(&r) % 40000);
    }
  for (int k = 0; k < 64; k++) free(slot[k]);
}

static void *churn_thread(void *arg) {
  churn_for((long)(intptr_t)arg);
  return NULL;
}

/* Until the purger runs (up to 4 s), found by its name: a count of threads
 * would miss it when a worker ended before it came up.  At once with
 * HAKMEM_BACKGROUND=0, which has none. */
static bool purger_started(void) {
  const char *bg = getenv("HAKMEM_BACKGROUND");
  if (bg && strcmp(bg, "0") == 0) return true;
  for (int i = 0; i < 800; i++) {
    free(malloc(100000));               /* malloc's slow path starts it */
    if (test_purger_threads() > 0) return true;
    test_sleep_ms(5);
  }
  return false;
}

/* ---- scenarios (exit status 0: as expected) ------------------------------------------ */

/* A worker allocates beside main; the purger starts; main joins the worker:
 * the process has one thread again within 5 s, the purger having returned
 * what the worker left, and at once after malloc_trim(0) (3: the purger
 * did not start within 4 s, 4: a thread is left). */
static int join_then(bool trim) {
  pthread_t t;
  pthread_create(&t, NULL, churn_thread, (void *)(intptr_t)200);
  if (!purger_started()) return 3;
  pthread_join(t, NULL);
  if (trim) return malloc_trim(0), thread_count() == 1 ? 0 : 4;
  for (int i = 0; i < 500 && thread_count() > 1; i++) test_sleep_ms(10);
  return thread_count() == 1 ? 0 : 4;
}
static int sc_join(void) { return join_then(false); }
static int sc_join_trim(void) { return join_then(true); }

/* main calls pthread_exit() while a worker allocates; the process ends with
 * the worker, status 0. */
static int sc_pthread_exit(void) {
  pthread_t t;
  pthread_create(&t, NULL, churn_thread, (void *)(intptr_t)300);
  if (!purger_started()) return 3;
  pthread_exit(NULL);
}

/* main calls pthread_exit() after its worker ended: the purger is all that is
 * left but main. */
static int sc_pthread_exit_last(void) {
  pthread_t t;
  pthread_create(&t, NULL, churn_thread, (void *)(intptr_t)100);
  if (!purger_started()) return 3;
  pthread_join(t, NULL);
  free(malloc(50));
  pthread_exit(NULL);
}

/* exit() while threads allocate. */
static int sc_exit_busy(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn_thread, (void *)(intptr_t)5000);
  churn_for(150);
  exit(0);
}

/* fork() from a signal handler that interrupted fork() (glibc's
 * tst-mallocfork2): the process is single-threaded; a second process sends
 * signals until this one has taken 5000 and at least one of them came inside
 * a fork, as an atfork handler of the scenario's own (registered after
 * hakmem's, so its window holds hakmem's) counts; on a loaded machine that
 * takes more signals.  5: none came inside a fork in 20 s (the race was not
 * tried). */
static volatile sig_atomic_t in_fork, forks_in_fork, signals;
static void fork_begins(void) { in_fork = 1; }
static void fork_ends(void) { in_fork = 0; }
static void fork_in_handler(int sig) {
  (void)sig;
  int saved = errno;
  signals++;
  if (in_fork) forks_in_fork++;
  pid_t p = fork();
  if (p == 0) _exit(0);
  if (p > 0) waitpid(p, NULL, 0);
  errno = saved;
}
static int sc_fork_in_handler(void) {
  free(malloc(100));                          /* hakmem's atfork handlers are in place */
  pthread_atfork(fork_begins, fork_ends, fork_ends);
  struct sigaction sa = {.sa_handler = fork_in_handler};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  pid_t me = getpid(), sender = fork();
  if (sender == 0) {
    while (kill(me, SIGUSR1) == 0) usleep(100);
    _exit(0);
  }
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    void *a = malloc(100), *b = malloc(20000);
    pid_t p = fork();
    if (p == 0) {
      free(malloc(300));
      _exit(0);
    }
    if (p > 0) while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {}
    free(a);
    free(b);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((signals < 5000 || !forks_in_fork) && t.tv_sec - t0.tv_sec < 20);
  kill(sender, SIGKILL);
  while (waitpid(sender, NULL, 0) < 0 && errno == EINTR) {}
  return forks_in_fork ? 0 : 5;
}

/* fork() while threads read a long line with getline (which reallocs while
 * holding the FILE's lock) and another flushes every stream (holding stdio's
 * list lock while it waits for each FILE's) (glibc's
 * tst-malloc-fork-deadlock). */
static atomic_bool stop_all;
static char line_file[64];
static void *reader(void *arg) {
  (void)arg;
  FILE *f = fopen(line_file, "r");
  if (!f) abort();
  while (!atomic_load(&stop_all)) {
    rewind(f);
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, f) < 0) abort();
    free(line);
  }
  fclose(f);
  return NULL;
}
static void *flusher(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_all)) fflush(NULL);
  return NULL;
}
static void *forker(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_all)) {
    pid_t p = fork();
    if (p == 0) _exit(17);
    int st;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 17) abort();
  }
  return NULL;
}
static int sc_fork_getline(void) {
  snprintf(line_file, sizeof line_file, "/tmp/hakmem-line-%d", (int)getpid());
  FILE *f = fopen(line_file, "w");
  if (!f) return 3;
  for (int i = 0; i < 50000; i++) fputc('x', f);
  fputc('\n', f);
  fclose(f);
  pthread_t t[13];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, forker, NULL);
  for (int i = 4; i < 12; i++) pthread_create(&t[i], NULL, reader, NULL);
  pthread_create(&t[12], NULL, flusher, NULL);
  test_sleep_ms(2000);
  atomic_store(&stop_all, true);
  for (int i = 0; i < 13; i++) pthread_join(t[i], NULL);
  unlink(line_file);
  return 0;
}

/* malloc_trim(0) from main gives back the free runs of a thread that waits
 * (run with a purge delay of a minute: nothing else would). */
static pthread_barrier_t trim_gate;
static void *trim_owner(void *arg) {
  (void)arg;
  void *b[10];
  for (int i = 0; i < 10; i++) memset(b[i] = malloc(300 << 10), 1, 300 << 10);
  for (int i = 1; i < 10; i++) free(b[i]);
  pthread_barrier_wait(&trim_gate);        /* main trims */
  pthread_barrier_wait(&trim_gate);
  free(b[0]);
  return NULL;
}
static int sc_trim_other_thread(void) {
  pthread_barrier_init(&trim_gate, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, trim_owner, NULL);
  pthread_barrier_wait(&trim_gate);
  long before = test_rss_kib();
  malloc_trim(0);
  long after = test_rss_kib();
  pthread_barrier_wait(&trim_gate);
  pthread_join(t, NULL);
  return before - after >= 2048 ? 0 : 6;   /* 2.7 MB were freed */
}

static const struct { const char *name; int (*run)(void); } scenarios[] = {
  {"join", sc_join}, {"join_trim", sc_join_trim}, {"pthread_exit", sc_pthread_exit}, {"pthread_exit_last", sc_pthread_exit_last},
  {"exit_busy", sc_exit_busy}, {"fork_in_handler", sc_fork_in_handler}, {"fork_getline", sc_fork_getline},
  {"trim_other_thread", sc_trim_other_thread},
};

static int scenario_main(const char *name) {
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
    if (strcmp(name, scenarios[i].name) == 0) return scenarios[i].run();
  return 90;
}

/* ---- the cases ---------------------------------------------------------------------- */

TEST(join_leaves_one_thread) {
  EXPECT_SCENARIO("join", NULL, 20000, 0);
  EXPECT_SCENARIO("join_trim", NULL, 20000, 0);
  EXPECT_SCENARIO("join", "HAKMEM_SECURE=1", 20000, 0);
}

TEST(pthread_exit_from_main_ends_with_last_thread) {
  EXPECT_SCENARIO("pthread_exit", NULL, 20000, 0);
  EXPECT_SCENARIO("pthread_exit_last", NULL, 20000, 0);
  EXPECT_SCENARIO("pthread_exit", "HAKMEM_SECURE=1", 20000, 0);
  EXPECT_SCENARIO("pthread_exit", "HAKMEM_BACKGROUND=0", 20000, 0);
}

TEST(exit_while_threads_allocate) {
  for (int i = 0; i < 5; i++) EXPECT_SCENARIO("exit_busy", NULL, 20000, 0);
  EXPECT_SCENARIO("exit_busy", "HAKMEM_SECURE=1", 20000, 0);
}

TEST(fork_in_signal_handler_during_fork) {
  EXPECT_SCENARIO("fork_in_handler", NULL, 30000, 0);
  EXPECT_SCENARIO("fork_in_handler", "HAKMEM_SECURE=1", 30000, 0);
}

TEST(fork_while_getline_and_fflush) {
  for (int i = 0; i < 3; i++) {
    EXPECT_SCENARIO("fork_getline", NULL, 30000, 0);
    EXPECT_SCENARIO("fork_getline", "HAKMEM_SECURE=1", 30000, 0);
  }
}

TEST(malloc_trim_returns_other_threads_free_runs) {
  EXPECT_SCENARIO("trim_other_thread", "HAKMEM_PURGE_DELAY_MS=60000", 20000, 0);
}

int main(int argc, char **argv) {
  const char *scenario = getenv("HM_SCENARIO");
  return scenario ? scenario_main(scenario) : test_main(argc, argv, __FILE__);
}
