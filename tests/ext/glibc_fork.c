/* glibc_fork.c — fork and malloc, after glibc's tst-mallocfork, tst-mallocfork2,
 * tst-mallocfork3 and tst-malloc-fork-deadlock: fork from a signal handler
 * that interrupted malloc, free or fork (async-signal-safe in a
 * single-threaded process, and _Fork in any), and fork racing with threads
 * that allocate under stdio locks.  Each case runs in a child under a time
 * limit, so a deadlock is reported as such. */
#include "ext.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>

static void on_signal(int sig, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

/* Wait for a child that exits at once; -1 unless it exited with 0.  It polls:
 * on this machine's kernel a blocking waitpid in a signal handler now and
 * then sleeps on after the child is gone (seen under glibc's malloc too). */
static pid_t reap(pid_t pid) {
  int status;
  pid_t r;
  struct timespec pause = {0, 50000};
  while ((r = waitpid(pid, &status, WNOHANG)) == 0 || (r < 0 && errno == EINTR)) nanosleep(&pause, NULL);
  return r == pid && status == 0 ? r : -1;
}

/* A process that sends SIGUSR1 to its parent as fast as it can (with a
 * yield between), until the parent is gone. */
static pid_t start_sender(void) {
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) {
    while (getppid() == parent && kill(parent, SIGUSR1) == 0) sched_yield();
    _exit(0);
  }
  return pid;
}

/* ---- tst-mallocfork: fork (and exit) from a handler, once ------------------ */

static volatile sig_atomic_t handled, handler_failed;

static void fork_and_exit(int sig) {
  pid_t child = fork();
  if (child == 0) exit(0);             /* exit, not _exit: atexit handlers and stdio in the child */
  if (child < 0 || reap(child) < 0) handler_failed = 1;
  handled = 1;
}

static int mallocfork_child(void *unused) {
  void *volatile keep = malloc(sizeof(int));
  on_signal(SIGUSR1, fork_and_exit);
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) { kill(parent, SIGUSR1); _exit(0); }
  if (reap(pid) < 0) return 2;
  while (!handled) test_sleep_ms(1);
  free(keep);
  return handler_failed ? 3 : 0;
}

TEST(tst_mallocfork) {
  ext_result_t r = ext_child(mallocfork_child, NULL, 20000);
  CHECKF(ext_exited(&r, 0), "child: %s", r.what);
}

/* ---- tst-mallocfork2: fork from a handler that interrupted malloc or free --- */

static pid_t sender;

static void stop_sender_and_fork(int sig) {
  if (handled) return;                 /* one fork per round: let the loop go on */
  if (sender > 0) kill(sender, SIGSTOP);
  handled = 1;
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid < 0 || reap(pid) < 0) handler_failed = 1;
}

/* Allocate and free at random while the signals come; with fork_too, the
 * loop forks as well, so the handler's fork interrupts a fork. */
static int signalled_forks(void *fork_too) {
  enum { OBJECTS = 1009, MAX_SIZE = 70000, SIGNALS = 300 };   /* glibc: 1000 */
  static void *objects[OBJECTS];
  on_signal(SIGUSR1, stop_sender_and_fork);
  sender = start_sender();
  unsigned signals = 0, seed = 1;
  uint64_t deadline = test_now_ms() + 6000;
  while (signals < SIGNALS && test_now_ms() < deadline) {
    int slot = rand_r(&seed) % OBJECTS;
    size_t size = (size_t)rand_r(&seed) % MAX_SIZE;
    kill(sender, SIGCONT);
    handled = 0;
    if (fork_too && slot % 4 == 0) {
      pid_t pid = fork();
      if (pid == 0) _exit(0);
      if (pid < 0 || reap(pid) < 0) return 2;
    }
    free(objects[slot]);
    objects[slot] = malloc(size);
    if (!objects[slot]) return 3;
    signals += handled;
    if (handler_failed) return 4;
  }
  kill(sender, SIGKILL);
  for (int i = 0; i < OBJECTS; i++) free(objects[i]);
  printf("# %u signals handled\n", signals);
  return signals > 0 ? 0 : 5;
}

TEST(tst_mallocfork2) {
  ext_result_t r = ext_child(signalled_forks, NULL, 10000);
  CHECKF(ext_exited(&r, 0), "child: %s (2 fork, 3 malloc, 4 the handler's fork, 5 no signal came)", r.what);
}

/* Not in glibc: the same, with the main loop forking too, so some signals
 * interrupt a fork (glibc takes no lock in a single-threaded fork). */
TEST(fork_in_handler_during_fork) {
  ext_result_t r = ext_child(signalled_forks, (void *)1, 10000);
  CHECKF(ext_exited(&r, 0), "child: %s (2 fork, 3 malloc, 4 the handler's fork, 5 no signal came)", r.what);
}

/* ---- tst-mallocfork3: _Fork from handlers in a multi-threaded process ------ */

static pthread_barrier_t round_barrier;
static pthread_t main_thread;
static volatile int stop_senders;

static void handler_fork(int sig) {
  pid_t pid = _Fork();
  if (pid == 0) _exit(0);
  if (pid < 0 || reap(pid) < 0) handler_failed = 1;
  handled = 1;
}

/* Each round between two barriers, so the signals come while main is in
 * _Fork, free or malloc; stop_senders is read after the first. */
static void *signal_main(void *unused) {
  for (;;) {
    pthread_barrier_wait(&round_barrier);
    if (stop_senders) return NULL;
    pthread_kill(main_thread, SIGUSR1);
    pthread_barrier_wait(&round_barrier);
  }
}

static int mallocfork3_child(void *unused) {
  enum { SENDERS = 5, OBJECTS = 1009, MAX_SIZE = 70000, ITERATIONS = 1500 };  /* glibc: 10000 */
  static void *objects[OBJECTS];
  on_signal(SIGUSR1, handler_fork);
  main_thread = pthread_self();
  pthread_barrier_init(&round_barrier, NULL, SENDERS + 1);
  pthread_t t[SENDERS];
  for (int i = 0; i < SENDERS; i++) {
    int e = pthread_create(&t[i], NULL, signal_main, NULL);
    if (e) { printf("# pthread_create: %s\n", strerror(e)); return 5; }
  }
  unsigned seed = 1;
  for (int i = 0; i < ITERATIONS; i++) {
    int slot = rand_r(&seed) % OBJECTS;
    size_t size = (size_t)rand_r(&seed) % MAX_SIZE;
    bool do_fork = rand_r(&seed) % 7 == 0;
    pthread_barrier_wait(&round_barrier);
    if (do_fork) {
      pid_t pid = _Fork();
      if (pid == 0) _exit(0);
      if (pid < 0 || reap(pid) < 0) return 2;
    }
    free(objects[slot]);
    objects[slot] = malloc(size);
    pthread_barrier_wait(&round_barrier);
    if (!objects[slot]) return 3;
    if (handler_failed) return 4;
  }
  stop_senders = 1;
  pthread_barrier_wait(&round_barrier);
  for (int i = 0; i < SENDERS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < OBJECTS; i++) free(objects[i]);
  return 0;
}

TEST(tst_mallocfork3) {
  ext_result_t r = ext_child(mallocfork3_child, NULL, 20000);
  CHECKF(ext_exited(&r, 0), "child: %s (2 _Fork, 3 malloc, 4 the handler's _Fork, 5 pthread_create)", r.what);
}

/* ---- tst-malloc-fork-deadlock: fork, getline and fflush(NULL) at once ------ */

static volatile int fd_stop;
static char fd_path[64];

static void *forker(void *unused) {
  while (!fd_stop) {
    pid_t pid = fork();
    if (pid == 0) _exit(17);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 17) return (void *)1;
  }
  return NULL;
}

static void *reader(void *unused) {
  FILE *f = fopen(fd_path, "r");
  if (!f) return (void *)1;
  while (!fd_stop) {
    rewind(f);
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, f) != 50001) { free(line); fclose(f); return (void *)1; }
    free(line);
  }
  fclose(f);
  return NULL;
}

static void *flusher(void *unused) {
  while (!fd_stop) if (fflush(NULL) != 0) return (void *)1;
  return NULL;
}

static int fork_deadlock_child(void *unused) {
  pthread_t t[13];
  for (int i = 0; i < 13; i++) pthread_create(&t[i], NULL, i < 4 ? forker : i < 12 ? reader : flusher, NULL);
  test_sleep_ms(2000);
  fd_stop = 1;
  int bad = 0;
  for (int i = 0; i < 13; i++) { void *rv; pthread_join(t[i], &rv); bad |= rv != NULL; }
  return bad ? 3 : 0;
}

TEST(tst_malloc_fork_deadlock) {
  snprintf(fd_path, sizeof fd_path, "/tmp/hakmem-fork-deadlock-%d", (int)getpid());
  FILE *f = fopen(fd_path, "w");           /* one line of 50000 bytes */
  if (!f) { CHECKF(0, "cannot write %s", fd_path); return; }
  for (int i = 0; i < 50000; i++) fputc('x', f);
  fputc('\n', f);
  fclose(f);
  ext_result_t r = ext_child(fork_deadlock_child, NULL, 8000);
  CHECKF(ext_exited(&r, 0), "child: %s (4 forking, 8 getline, 1 fflush(NULL) threads for 2 s; 3: one of them failed)", r.what);
  unlink(fd_path);
}

TEST_MAIN()
