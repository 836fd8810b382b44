/* sites.c — a program with known call sites for test_profile.sh, run with
 * hakmem preloaded and HAKMEM_PROFILE set.  Linked with the C library alone,
 * with -rdynamic so that the profiler names its functions.
 *
 *   sites shares   4 threads; of the bytes allocated, 70 % by site_big, 20 %
 *                  by site_mid (both freed), 10 % by site_leak (never freed),
 *                  each with the same mix of sizes (16 B to 1 MiB); prints
 *                  "requested BYTES", what the three asked for
 *   sites signal PREFIX   threads allocate while the program sends itself
 *                  HAKMEM_PROFILE_SIGNAL (SIGUSR1) three times; each dump
 *                  (PREFIX.PID.N.live.folded) must appear
 *   sites fork     threads allocate while the main thread forks 50 children
 *                  that allocate and exit; all must finish
 *   sites children   60 children of one parent each allocate 100 KB and
 *                  exit (a child that sampled writes its profile): each
 *                  draws its own sample points, so about 18 % of them
 *                  sample (all or none would, with the parent's)
 *   sites dump PATH   hakmem_profile_dump(PATH) must return 0
 * Exit status 0 on success; a 60 s alarm ends a hung run. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS 4
#define BYTES_PER_THREAD (200ull << 20)     /* 800 MiB in all */

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Sizes from 16 bytes to 256 KiB, log-uniform, and 1 MiB now and then. */
static size_t size_of(uint64_t *s) {
  uint64_t r = next(s);
  if (r % 64 == 0) return 1 << 20;
  return (size_t)16 << (r >> 8) % 15 | (r >> 32) % 16;
}

/* The sites: each allocates, writes its block, and hands it back (no tail
 * call: each keeps its frame). */
__attribute__((noinline)) void *site_big(size_t n) {
  char *p = malloc(n);
  if (p) p[0] = p[n - 1] = 1;
  return p;
}
__attribute__((noinline)) void *site_mid(size_t n) {
  char *p = malloc(n);
  if (p) p[0] = p[n - 1] = 2;
  return p;
}
__attribute__((noinline)) void *site_leak(size_t n) {
  char *p = malloc(n);
  if (p) p[0] = p[n - 1] = 3;
  return p;
}

static _Atomic uint64_t requested;          /* bytes the sites asked for */

static void *shares_worker(void *arg) {
  uint64_t s = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1), done = 0;
  void *keep[8] = { 0 };
  unsigned k = 0;
  while (done < BYTES_PER_THREAD) {
    size_t n = size_of(&s);
    for (int i = 0; i < 7; i++) {              /* a few live at once, then freed */
      free(keep[k % 8]);
      keep[k++ % 8] = site_big(n);
    }
    for (int i = 0; i < 2; i++) free(site_mid(n));
    if (!site_leak(n)) return (void *)1;
    done += 10 * n;
  }
  atomic_fetch_add(&requested, done);
  for (int i = 0; i < 8; i++) free(keep[i]);
  return NULL;
}

static atomic_int stop;

static void *churn(void *arg) {
  uint64_t s = 88172645463325252ull + (uintptr_t)arg;
  while (!atomic_load(&stop)) free(site_mid(size_of(&s)));
  return NULL;
}

static int run_threads(void *(*fn)(void *), pthread_t *t) {
  for (uintptr_t i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, fn, (void *)i)) return 1;
  return 0;
}

static int join_threads(pthread_t *t) {
  int bad = 0;
  for (int i = 0; i < THREADS; i++) {
    void *r;
    pthread_join(t[i], &r);
    bad |= r != NULL;
  }
  return bad;
}

static void say(const char *s) { ssize_t w = write(1, s, strlen(s)); (void)w; }

int main(int argc, char **argv) {
  pthread_t t[THREADS];
  alarm(60);
  if (argc >= 2 && !strcmp(argv[1], "shares")) {
    if (run_threads(shares_worker, t) || join_threads(t)) return 1;
    char line[64];
    snprintf(line, sizeof line, "requested %llu\n", (unsigned long long)atomic_load(&requested));
    say(line);
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "signal")) {
    if (run_threads(churn, t)) return 1;
    for (int n = 1; n <= 3; n++) {
      char path[512];
      struct stat st;
      snprintf(path, sizeof path, "%s.%d.%d.live.folded", argv[2], (int)getpid(), n);
      raise(SIGUSR1);
      int waited = 0;
      while (stat(path, &st) != 0 && waited++ < 5000) {   /* the next allocation writes it */
        free(site_mid(64));
        usleep(1000);
      }
      if (waited > 5000) { say("no dump after the signal\n"); return 1; }
    }
    atomic_store(&stop, 1);
    return join_threads(t);
  }
  if (argc >= 2 && !strcmp(argv[1], "fork")) {
    if (run_threads(churn, t)) return 1;
    for (int i = 0; i < 50; i++) {
      pid_t pid = fork();
      if (pid < 0) return 1;
      if (pid == 0) {
        uint64_t s = 12345 + (uint64_t)i;
        for (int j = 0; j < 2000; j++) free(site_mid(size_of(&s)));
        _exit(0);
      }
      int status;
      if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) return 1;
    }
    atomic_store(&stop, 1);
    return join_threads(t);
  }
  if (argc >= 2 && !strcmp(argv[1], "children")) {
    free(site_mid(1000));
    for (int i = 0; i < 60; i++) {
      pid_t pid = fork();
      if (pid < 0) return 1;
      if (pid == 0) {
        for (int j = 0; j < 1000; j++) free(site_mid(100));
        exit(0);
      }
      int status;
      if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) return 1;
    }
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "dump")) {
    int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "hakmem_profile_dump");
    for (int i = 0; i < 2000; i++) free(site_big(100000));
    if (!dump || dump(argv[2]) != 0) { say("hakmem_profile_dump failed\n"); return 1; }
    return 0;
  }
  say("usage: sites shares | signal PREFIX | fork | children | dump PATH\n");
  return 2;
}
