/* fork while other threads allocate: children must allocate, free, start a
 * thread and exit; a deadlocked child fails the test (killed after 20 s). */
#include "test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>

static atomic_int stop;

static void *churn(void *arg) {
  void *slot[128] = {0};
  uint32_t r = (uint32_t)(uintptr_t)arg;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    r = r * 1103515245u + 12345u;
    int i = (r >> 8) & 127;
    free(slot[i]);
    slot[i] = malloc(r % 8 == 0 ? (r >> 12) % 300000 + 1 : (r >> 12) % 2000 + 1);
  }
  for (int i = 0; i < 128; i++) free(slot[i]);
  return NULL;
}

static void *child_thread(void *arg) {
  for (int i = 0; i < 2000; i++) free(malloc((size_t)i * 7 % 5000 + 1));
  return arg;
}

/* In the child: allocate what the parent's threads were allocating, free
 * blocks inherited from the parent, start a thread.  0 on success. */
static int child_work(void **inherited, int n) {
  void *v[3000];
  for (int i = 0; i < 3000; i++) {
    v[i] = malloc((size_t)i * 37 % 70000 + 1);
    if (!v[i]) return 1;
    memset(v[i], i, 16);
  }
  for (int i = 0; i < 3000; i++) free(v[i]);
  for (int i = 0; i < n; i++) free(inherited[i]);
  pthread_t t;
  if (pthread_create(&t, NULL, child_thread, NULL)) return 2;
  pthread_join(t, NULL);
  return 0;
}

static int wait_child(pid_t pid) {  /* exit status, or -1 if it hung */
  int st;
  for (int i = 0; i < 2000; i++) {
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

static void *forker(void *arg) {   /* forks from a thread that is not main */
  int *result = arg;
  void *mine[100];
  for (int k = 0; k < 20; k++) {
    for (int i = 0; i < 100; i++) mine[i] = malloc(64 + i);
    pid_t pid = fork();
    if (pid == 0) _exit(child_work(mine, 100));
    for (int i = 0; i < 100; i++) free(mine[i]);
    int st = wait_child(pid);
    if (st) { *result = st; return NULL; }
  }
  return NULL;
}

TEST(fork_under_load) {
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
  void *mine[200];
  int bad = 0, hung = 0;
  for (int k = 0; k < 60 && !bad; k++) {
    for (int i = 0; i < 200; i++) mine[i] = malloc(16 + (size_t)i * 100);
    pid_t pid = fork();
    if (pid == 0) _exit(child_work(mine, 200));
    for (int i = 0; i < 200; i++) free(mine[i]);
    int st = wait_child(pid);
    if (st == -1) hung++;
    else if (st) bad = st;
  }
  int from_thread = 0;
  pthread_t f;
  pthread_create(&f, NULL, forker, &from_thread);
  pthread_join(f, NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  CHECKF(hung == 0, "%d children deadlocked", hung);
  CHECKF(bad == 0, "a child failed with status %d", bad);
  CHECKF(from_thread == 0, "a child forked from a thread failed with status %d", from_thread);
}

TEST_MAIN()
