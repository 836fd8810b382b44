/* lifecycle.c — a process's life with other threads allocating: exit, _exit,
 * abort, pthread_exit from main, exec, vfork and posix_spawn, signals
 * (hakmem's background thread, which starts once the process has had two
 * threads, must neither take them nor keep them from their default action),
 * and a library that allocates and frees across dlopen/dlclose.  Each case
 * runs in a child under a time limit; it must end as it does under glibc. */
#include "ext.h"

#include <dlfcn.h>
#include <libgen.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>

/* ---- threads that allocate until told to stop ------------------------------ */

enum { WORKERS = 4 };
static volatile int workers_stop;
static pthread_t workers[WORKERS];
static pid_t worker_tids[WORKERS + 1];   /* and main's, for the signal cases */

static void *allocate_forever(void *arg) {
  uint64_t r = (uint64_t)(intptr_t)arg * 2654435761u + 1;
  void *keep[64] = {0};
  __atomic_store_n(&worker_tids[(intptr_t)arg], (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
  while (!workers_stop) {
    int i = (int)(test_rand(&r) % 64);
    size_t n = (size_t)1 << (test_rand(&r) % 17);
    free(keep[i]);
    keep[i] = test_rand(&r) % 4 ? malloc(n) : calloc(1, n);
    if (keep[i]) ((char *)keep[i])[n - 1] = 1;
    if (test_rand(&r) % 8 == 0) keep[i] = realloc(keep[i], n * 2);
  }
  for (int i = 0; i < 64; i++) free(keep[i]);
  return NULL;
}

static void start_workers(void) {
  for (intptr_t i = 0; i < WORKERS; i++) pthread_create(&workers[i], NULL, allocate_forever, (void *)i);
  for (int i = 0; i < WORKERS; i++)
    while (!__atomic_load_n(&worker_tids[i], __ATOMIC_ACQUIRE)) sched_yield();
  test_sleep_ms(50);
}

static void stop_workers(void) {
  workers_stop = 1;
  for (int i = 0; i < WORKERS; i++) pthread_join(workers[i], NULL);
}

#define EXPECT_EXIT(fn, code, limit_ms)                                          \
  do {                                                                          \
    ext_result_t r_ = ext_child(fn, NULL, limit_ms);                            \
    CHECKF(ext_exited(&r_, code), "child: %s (expected exit status %d)", r_.what, code); \
  } while (0)

/* ---- exit, _exit, abort, pthread_exit -------------------------------------- */

static int exit_while_allocating(void *unused) { start_workers(); exit(7); }
TEST(exit_while_threads_allocate) { EXPECT_EXIT(exit_while_allocating, 7, 10000); }

static int quick_exit_while_allocating(void *unused) { start_workers(); _exit(9); }
TEST(_exit_while_threads_allocate) { EXPECT_EXIT(quick_exit_while_allocating, 9, 10000); }

static int abort_while_allocating(void *unused) { start_workers(); abort(); }
TEST(abort_while_threads_allocate) {
  ext_result_t r = ext_child(abort_while_allocating, NULL, 10000);
  CHECKF(ext_signaled(&r, SIGABRT), "child: %s (expected SIGABRT)", r.what);
}

/* main ends with pthread_exit while the others still work: the process
 * exits 0 when the last of them ends (they stop after 200 ms). */
static void *stop_later(void *unused) {
  test_sleep_ms(200);
  workers_stop = 1;
  return NULL;
}
static int pthread_exit_from_main(void *unused) {
  start_workers();
  pthread_t t;
  pthread_create(&t, NULL, stop_later, NULL);
  pthread_exit(NULL);
}
TEST(pthread_exit_from_main_with_threads) { EXPECT_EXIT(pthread_exit_from_main, 0, 5000); }

/* The same after every other thread was joined. */
static int pthread_exit_after_join(void *unused) {
  start_workers();
  stop_workers();
  pthread_exit(NULL);
}
TEST(pthread_exit_from_main_after_join) { EXPECT_EXIT(pthread_exit_after_join, 0, 5000); }

/* Once its threads are joined the process is single-threaded again: it may
 * enter a new user namespace (the kernel refuses a multi-threaded one).
 * Under hakmem the purger, which gives back what the exited threads left,
 * goes within seconds of the last join, and at once with malloc_trim(0). */
static int unshare_after_join(void *trim) {
  start_workers();
  stop_workers();
  if (trim) malloc_trim(0);
  for (int waited = 0; unshare(CLONE_NEWUSER) != 0; waited += 10) {
    if (errno != EINVAL) return errno == EPERM || errno == ENOSPC ? 4 : 5;
    if (trim || !ext_under_hakmem() || waited >= 5000) return 3;
    test_sleep_ms(10);
  }
  return 0;
}
static void check_unshare(void *trim) {
  ext_result_t r = ext_child(unshare_after_join, trim, 10000);
  if (ext_exited(&r, 4)) { SKIP("user namespaces are not allowed here"); return; }
  CHECKF(ext_exited(&r, 0), "child: %s (3: unshare(CLONE_NEWUSER) says EINVAL: a thread is left; 4 not allowed)", r.what);
}
TEST(single_threaded_after_join_and_trim) { check_unshare((void *)1); }
TEST(single_threaded_soon_after_join) { check_unshare(NULL); }

/* ---- exec, vfork, posix_spawn ---------------------------------------------- */

static char *const exit_3[] = {"sh", "-c", "exit 3", NULL};

static int exec_while_allocating(void *unused) {
  start_workers();
  execv("/bin/sh", exit_3);
  return 2;
}
TEST(exec_while_threads_allocate) { EXPECT_EXIT(exec_while_allocating, 3, 10000); }

static int exec_after_join(void *unused) {
  start_workers();
  stop_workers();
  execv("/bin/sh", exit_3);
  return 2;
}
TEST(exec_after_threads) { EXPECT_EXIT(exec_after_join, 3, 10000); }

static int vfork_while_allocating(void *unused) {
  start_workers();
  int status;
  pid_t pid = vfork();
  if (pid == 0) { execv("/bin/sh", exit_3); _exit(2); }
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 3) return 3;
  pid = vfork();
  if (pid == 0) _exit(4);
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 4) return 4;
  stop_workers();
  return 0;
}
TEST(vfork_while_threads_allocate) { EXPECT_EXIT(vfork_while_allocating, 0, 10000); }

static int spawn_while_allocating(void *unused) {
  start_workers();
  for (int i = 0; i < 20; i++) {
    pid_t pid;
    int status;
    if (posix_spawn(&pid, "/bin/sh", NULL, NULL, exit_3, environ)) return 2;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 3) return 3;
  }
  stop_workers();
  return 0;
}
TEST(posix_spawn_while_threads_allocate) { EXPECT_EXIT(spawn_while_allocating, 0, 20000); }

/* ---- signals ------------------------------------------------------------------ */

static volatile int handled, wrong_thread;

static void count_on_app_thread(int sig) {
  pid_t me = (pid_t)syscall(SYS_gettid);
  bool ours = false;
  for (int i = 0; i <= WORKERS; i++) ours |= worker_tids[i] == me;
  if (!ours) wrong_thread = 1;
  __atomic_fetch_add(&handled, 1, __ATOMIC_RELAXED);
}

/* Process-directed signals, one at a time while the threads allocate (the
 * background thread, if any, runs by then): each is handled, always on one
 * of the program's threads. */
static int signals_to_process(void *unused) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = count_on_app_thread;
  sigaction(SIGUSR1, &sa, NULL);
  worker_tids[WORKERS] = (pid_t)syscall(SYS_gettid);
  start_workers();
  for (int i = 0; i < 2000; i++) {
    int before = handled;
    kill(getpid(), SIGUSR1);
    uint64_t deadline = test_now_ms() + 2000;
    while (handled == before)
      if (test_now_ms() > deadline) return 2;
  }
  stop_workers();
  return wrong_thread ? 3 : 0;
}
TEST(signals_while_background_thread_runs) {
  ext_result_t r = ext_child(signals_to_process, NULL, 20000);
  CHECKF(ext_exited(&r, 0), "child: %s (2: a signal was never handled, 3: one was handled on a thread the program did not start)", r.what);
}

/* Every program thread blocks SIGUSR2 and one waits for it with sigwait: a
 * thread that left it unblocked would die of it (default action). */
static int sigwait_while_allocating(void *unused) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, NULL);  /* the workers inherit the mask */
  start_workers();
  struct timespec limit = {2, 0};
  for (int i = 0; i < 500; i++) {
    kill(getpid(), SIGUSR2);
    if (sigtimedwait(&set, NULL, &limit) != SIGUSR2) return 2;
  }
  stop_workers();
  return 0;
}
TEST(sigwait_while_background_thread_runs) { EXPECT_EXIT(sigwait_while_allocating, 0, 20000); }

/* SIGTERM's default action ends the process at once, while threads allocate
 * and after they were joined. */
static int wait_for_sigterm(void *joined) {
  start_workers();
  if (joined) stop_workers();
  kill(getpid(), SIGTERM);
  test_sleep_ms(5000);
  return 1;                              /* still alive */
}
TEST(sigterm_while_threads_allocate) {
  ext_result_t r = ext_child(wait_for_sigterm, NULL, 10000);
  CHECKF(ext_signaled(&r, SIGTERM), "child: %s (expected SIGTERM)", r.what);
}
TEST(sigterm_after_threads_joined) {
  ext_result_t r = ext_child(wait_for_sigterm, (void *)1, 10000);
  CHECKF(ext_signaled(&r, SIGTERM), "child: %s (expected SIGTERM)", r.what);
}

/* ---- dlopen/dlclose ------------------------------------------------------------ */

static char dso_path[4096];
static void *(*dso_alloc)(size_t, int);
static void (*dso_free)(void *);
static void *(*dso_realloc)(void *, size_t);
static long (*dso_tls_touch)(int);

static void *use_tls(void *fill) {
  long sum = dso_tls_touch((int)(intptr_t)fill);
  void *p = dso_alloc(1000, 1);
  free(p);
  return (void *)(intptr_t)(sum == 16 * (intptr_t)fill);
}

/* Thirty times: load the library, let it allocate and free across the
 * boundary (and for the threads' dynamic TLS), keep some of its blocks,
 * unload it; the kept blocks stay valid after dlclose. */
static int dl_cycles(void *unused) {
  enum { CYCLES = 30, N = 100 };
  static void *kept[CYCLES];
  for (int c = 0; c < CYCLES; c++) {
    void *h = dlopen(dso_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("# dlopen: %s\n", dlerror()); return 2; }
    dso_alloc = (void *(*)(size_t, int))dlsym(h, "dso_alloc");
    dso_free = (void (*)(void *))dlsym(h, "dso_free");
    dso_realloc = (void *(*)(void *, size_t))dlsym(h, "dso_realloc");
    dso_tls_touch = (long (*)(int))dlsym(h, "dso_tls_touch");
    if (!dso_alloc || !dso_free || !dso_realloc || !dso_tls_touch) return 3;
    void *theirs[N], *ours[N];
    for (int i = 0; i < N; i++) {
      theirs[i] = dso_alloc((size_t)(i * 97 % 5000) + 1, i);
      ours[i] = malloc((size_t)(i * 31 % 70000) + 1);
    }
    for (int i = 0; i < N; i++) {
      if (i % 2) free(theirs[i]); else theirs[i] = dso_realloc(theirs[i], 20000);
      dso_free(ours[i]);
    }
    for (int i = 0; i < N; i += 2) dso_free(theirs[i]);
    pthread_t t[4];
    for (intptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, use_tls, (void *)(i + 1));
    for (int i = 0; i < 4; i++) {
      void *ok;
      pthread_join(t[i], &ok);
      if (!ok) return 4;
    }
    kept[c] = dso_alloc(3000, c);
    if (dlclose(h)) return 5;
  }
  for (int c = 0; c < CYCLES; c++) {
    for (int i = 0; i < 3000; i++) if (((unsigned char *)kept[c])[i] != (unsigned char)c) return 6;
    free(kept[c]);
  }
  return 0;
}

TEST(dlopen_dlclose_across_the_boundary) {
  if (!realpath("/proc/self/exe", dso_path)) { CHECK(!"realpath /proc/self/exe"); return; }
  strcat(dirname(dso_path), "/lifecycle_dso.so");
  if (access(dso_path, R_OK)) { CHECKF(0, "%s not built", dso_path); return; }
  EXPECT_EXIT(dl_cycles, 0, 30000);
}

TEST_MAIN()
