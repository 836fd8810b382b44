/* fork() while other threads allocate (plain malloc: hakmem in the normal
 * build).  Three threads churn blocks of 1 B - 3 MiB while the main thread
 * forks 150 times and another thread forks 50 times.  Each child checks and
 * frees blocks inherited from its parent, allocates 600 blocks (the sizes
 * the churning threads use), reallocs and callocs, starts a thread
 * that allocates and frees blocks of the child's main thread, every fifth
 * time forks a grandchild, and _exit(0)s; the parent's own blocks must be
 * unchanged.  A child that does not finish within 20 s is
 * taken as deadlocked: killed, and the test fails. */
#define TEST_DEFAULT_TIMEOUT 240      /* one long case; slow machines */
#include "test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#define CHILD_LIMIT_MS 20000
#define CHILD_BLOCKS 600

static atomic_int stop;
static atomic_long churn_ops;

static size_t churn_size(uint32_t r) {
  switch (r % 16) {
  case 0: return (r >> 8) % 300000 + 1;              /* medium and large */
  case 1: return r % 64 == 1 ? (3u << 20) + (r >> 20) : (r >> 8) % 60000 + 1;   /* rarely huge */
  default: return (r >> 8) % 2000 + 1;                /* small */
  }
}

static void *churn(void *arg) {
  void *slot[128] = {0};
  uint32_t r = (uint32_t)(uintptr_t)arg * 2654435761u;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    r = r * 1103515245u + 12345u;
    int i = (r >> 16) & 127;
    free(slot[i]);
    size_t n = churn_size(r);
    slot[i] = (r & 3) == 0 ? calloc(1, n) : malloc(n);
    if (slot[i]) memset(slot[i], (int)r, n < 256 ? n : 256);
    if ((r & 255) == 7 && slot[i]) { void *q = realloc(slot[i], n + 5000); if (q) slot[i] = q; }
    atomic_fetch_add_explicit(&churn_ops, 1, memory_order_relaxed);
  }
  for (int i = 0; i < 128; i++) free(slot[i]);
  return NULL;
}

static void *child_thread(void *arg) {
  void **from_main = arg;
  for (int i = 0; i < 1000; i++) free(malloc((size_t)i * 7 % 5000 + 1));
  for (int i = 0; i < 100; i++) free(from_main[i]);   /* remote frees inside the child */
  return NULL;
}

static int wait_child(pid_t pid);

/* In the child: 0 on success, a small number naming what failed. */
static int child_work(unsigned char **inherited, int n, int grandchild) {
  for (int i = 0; i < n; i++)                          /* the parent's blocks came along intact */
    if (inherited[i][0] != (unsigned char)i || inherited[i][15] != (unsigned char)i) return 3;
  for (int i = 0; i < n; i++) free(inherited[i]);
  static void *v[CHILD_BLOCKS];
  for (int i = 0; i < CHILD_BLOCKS; i++) {
    size_t sz = churn_size((uint32_t)i * 2654435761u);
    v[i] = i % 10 == 0 ? calloc(1, sz) : malloc(sz);
    if (!v[i]) return 1;
    if (i % 10 == 0 && ((unsigned char *)v[i])[sz - 1] != 0) return 4;
    memset(v[i], i, sz < 64 ? sz : 64);
  }
  for (int i = 0; i < CHILD_BLOCKS; i += 7) {
    void *q = realloc(v[i], 3000);
    if (!q) return 1;
    v[i] = q;
  }
  for (int i = 100; i < CHILD_BLOCKS; i++) free(v[i]);
  pthread_t t;
  if (pthread_create(&t, NULL, child_thread, v)) return 2;
  pthread_join(t, NULL);
  if (grandchild) {                                    /* fork again, from the child */
    pid_t pid = fork();
    if (pid == 0) {
      void *w[100];
      for (int i = 0; i < 100; i++) if (!(w[i] = malloc(100 + (size_t)i * 1000))) _exit(1);
      for (int i = 0; i < 100; i++) free(w[i]);
      _exit(0);
    }
    if (pid < 0) return 5;
    int st = wait_child(pid);
    if (st) return st == -1 ? 6 : 7;
  }
  return 0;
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

/* Exit status of the child, 128 + signal if it died of one, or -1 if it
 * hung (killed after CHILD_LIMIT_MS). */
static int wait_child(pid_t pid) {
  int st;
  long deadline = now_ms() + CHILD_LIMIT_MS;
  for (int us = 100; now_ms() < deadline; us = us < 20000 ? us * 2 : us) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0) return 99;
    usleep((useconds_t)us);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

typedef struct { int forks, hung, bad, first_bad, parent_bad; } result_t;

/* Fork k times; the parent keeps a few blocks of its own across each fork. */
static void fork_loop(result_t *res, int k, int nblocks) {
  unsigned char *mine[200];
  for (int f = 0; f < k; f++) {
    for (int i = 0; i < nblocks; i++) {
      mine[i] = malloc(16 + (size_t)i * 97 + (i == 5 ? 400000 : 0));
      memset(mine[i], i, 16);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      test_child_defaults();
      _exit(child_work(mine, nblocks, f % 5 == 0));
    }
    if (pid < 0) { res->bad++; if (!res->first_bad) res->first_bad = 100; continue; }
    res->forks++;
    for (int i = 0; i < nblocks; i++) {
      if (mine[i][0] != (unsigned char)i || mine[i][15] != (unsigned char)i) res->parent_bad++;
      free(mine[i]);
    }
    int st = wait_child(pid);
    if (st == -1) res->hung++;
    else if (st) { res->bad++; if (!res->first_bad) res->first_bad = st; }
  }
}

static result_t thread_res;
static void *forker(void *arg) {   /* forks from a thread that is not main */
  (void)arg;
  fork_loop(&thread_res, 50, 100);
  return NULL;
}

/* glibc frees a joined thread's TLS while holding the lock pthread_create
 * takes: the purger thread must not be started from that free.  In a child
 * (a fresh allocator: no purger yet), 1000 threads each keep a block until
 * all have one, then free it and exit; the joins must finish. */
static pthread_barrier_t teardown_gate;
static void *teardown_worker(void *arg) {
  (void)arg;
  char *volatile p = malloc(64);
  if (p) memset(p, 1, 64);
  pthread_barrier_wait(&teardown_gate);
  free(p);
  return NULL;
}

TEST(joins_after_first_thread_exit) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    enum { N = 1000 };
    static pthread_t t[N];
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 * 1024);
    pthread_barrier_init(&teardown_gate, NULL, N + 1);
    for (int i = 0; i < N; i++)
      if (pthread_create(&t[i], &a, teardown_worker, NULL)) _exit(2);
    pthread_barrier_wait(&teardown_gate);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    _exit(0);
  }
  int st = wait_child(pid);
  CHECKF(st == 0, st < 0 ? "the child hung joining its threads (deadlock)" : "the child failed: status %d", st);
}

TEST(fork_under_load) {
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
  result_t res = {0};
  fork_loop(&res, 150, 200);
  pthread_t f;
  pthread_create(&f, NULL, forker, NULL);
  pthread_join(f, NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  NOTE("%d + %d forks, %ld allocations by the churning threads meanwhile", res.forks, thread_res.forks,
       atomic_load(&churn_ops));
  CHECKF(res.hung == 0 && thread_res.hung == 0, "%d children deadlocked (killed after %d s)", res.hung + thread_res.hung,
         CHILD_LIMIT_MS / 1000);
  CHECKF(res.bad == 0, "%d children failed; the first with status %d%s", res.bad, res.first_bad,
         res.first_bad > 128 ? " (128 + signal)" : "");
  CHECKF(thread_res.bad == 0, "%d children forked from a non-main thread failed; the first with status %d",
         thread_res.bad, thread_res.first_bad);
  CHECKF(res.parent_bad + thread_res.parent_bad == 0, "%d parent blocks changed across fork",
         res.parent_bad + thread_res.parent_bad);
  CHECK(res.forks == 150 && thread_res.forks == 50);
}

TEST_MAIN()
