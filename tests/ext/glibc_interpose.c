/* glibc_interpose.c — the C library's own allocations go through the malloc in
 * use, after glibc's tst-interpose-nothread and tst-interpose-thread: blocks
 * the library allocates (getline, strdup, asprintf, open_memstream,
 * realpath, scandir, fopen's buffers) are freed or grown by the program and
 * the other way round, fork works, and under hakmem the program break never
 * moves (hakmem maps its memory; a moved break means a malloc other than
 * hakmem's served the library). */
#include "ext.h"

#include <dirent.h>
#include <limits.h>
#include <pthread.h>

static void *initial_brk;
__attribute__((constructor)) static void remember_brk(void) { initial_brk = sbrk(0); }

static void line_of(int number, char *buf, size_t len) {
  for (size_t i = 0; i + 2 < len; i++) buf[i] = (char)('A' + (number + (int)i) % 26);
  buf[len - 2] = '\n';
  buf[len - 1] = 0;
}

static const int lengths[] = {0, 45, 80, 2, 8201, 0, 17, -1};

/* Write lines of those lengths, read them back with getline (which grows
 * one buffer with realloc) and compare. */
static void getline_roundtrip(void) {
  char path[] = "/tmp/hakmem-interpose-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) { CHECKF(0, "mkstemp: %s", strerror(errno)); return; }
  FILE *f = fdopen(fd, "w");
  for (int i = 0; lengths[i] >= 0; i++) {
    char buf[lengths[i] + 2];
    line_of(i, buf, sizeof buf);
    fputs(buf, f);
  }
  CHECK(fclose(f) == 0);
  f = fopen(path, "r");
  char *line = NULL;
  size_t cap = 0;
  for (int i = 0;; i++) {
    errno = 0;
    ssize_t n = getline(&line, &cap, f);
    if (n < 0) { CHECKF(lengths[i] < 0 && errno == 0, "getline ended at line %d: %s", i, strerror(errno)); break; }
    CHECKF(lengths[i] >= 0 && n == lengths[i] + 1, "line %d: %zd bytes", i, n);
    if (lengths[i] < 0 || n != lengths[i] + 1) break;
    char want[lengths[i] + 2];
    line_of(i, want, sizeof want);
    CHECKF(strcmp(line, want) == 0, "line %d differs", i);
  }
  free(line);
  CHECK(fclose(f) == 0);
  unlink(path);
}

/* Blocks from the library, used and freed (or grown) by the program. */
static void library_blocks(void) {
  char *s = strdup("interposed");
  s = realloc(s, 4000);
  CHECK(s && strcmp(s, "interposed") == 0);
  free(s);
  char *a = NULL;
  CHECK(asprintf(&a, "%d-%s", 42, "x") == 4 && a && strcmp(a, "42-x") == 0);
  free(a);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  for (int i = 0; i < 10000; i++) fprintf(m, "%d,", i);
  CHECK(fclose(m) == 0 && len > 40000 && strncmp(buf, "0,1,2,", 6) == 0);
  free(buf);
  char *r = realpath("/tmp/../tmp", NULL);
  CHECK(r && strcmp(r, "/tmp") == 0);
  free(r);
  struct dirent **names;
  int n = scandir("/", &names, NULL, alphasort);
  CHECK(n > 2);
  for (int i = 0; i < n; i++) free(names[i]);
  if (n >= 0) free(names);
  static char text[] = "a line that does not fit in one byte\n";
  char *line = malloc(1);                /* the program's block, grown by the library */
  size_t cap = 1;
  FILE *f = fmemopen(text, strlen(text), "r");
  CHECK(getline(&line, &cap, f) == (ssize_t)strlen(text) && cap > strlen(text) && strcmp(line, text) == 0);
  fclose(f);
  free(line);
}

static void fork_works(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(55);
  int status;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 55);
}

static void *run_all(void *unused) {
  getline_roundtrip();
  library_blocks();
  fork_works();
  return NULL;
}

static void check_brk(void) {
  if (!ext_under_hakmem()) return;
  CHECKF(sbrk(0) == initial_brk, "the program break moved from %p to %p: not hakmem's malloc?", initial_brk, sbrk(0));
}

TEST(tst_interpose_nothread) {
  run_all(NULL);
  check_brk();
}

TEST(tst_interpose_thread) {
  pthread_t t;
  pthread_create(&t, NULL, run_all, NULL);
  pthread_join(t, NULL);
  check_brk();
}

TEST_MAIN()
