// C++ operators under hakmem (linked with -lhakmem, built by test_cxx.sh with
// -fsized-deallocation): every new/delete form goes to hakmem (checked with
// hakmem_malloc_usable_size, which aborts on a pointer hakmem does not own),
// alignment, arrays with cookies, containers across threads, exceptions,
// std::bad_alloc, nothrow and new_handler.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>
#include "hakmem.h"

static int failed = 0;
#define CHECK(name, cond)                                                       \
  do {                                                                          \
    if (cond) std::printf("ok - cxx:%s\n", name);                               \
    else { std::printf("not ok - cxx:%s: %s (line %d)\n", name, #cond, __LINE__); failed = 1; } \
    std::fflush(stdout);                                                        \
  } while (0)

// A sized delete whose size is larger than the block is reported (the
// child's stderr names it) and aborts.
static bool delete_mismatch_reported(void (*bad)()) {
  int err[2];
  if (pipe(err)) return false;
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], 2);
    bad();
    _exit(0);
  }
  close(err[1]);
  char msg[512] = {0};
  size_t len = 0;
  ssize_t k;
  while (len < sizeof msg - 1 && (k = read(err[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)k;
  close(err[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && std::strstr(msg, "size larger than the block");
}

static bool aligned(const void *p, size_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

struct alignas(128) Wide { char c[200]; };
struct alignas(256) WideD {                  // non-trivial destructor: array cookie
  char c[100];
  static int live;
  WideD() { live++; std::memset(c, 7, sizeof c); }
  ~WideD() { live--; }
};
int WideD::live = 0;
struct Plain { char c[100]; };               // sized delete: operator delete(void *, 100)
struct Counted {
  static int live;
  int v = 42;
  Counted() { live++; }
  ~Counted() { live--; }
};
int Counted::live = 0;

static int handler_calls = 0;
static void handler() { handler_calls++; std::set_new_handler(nullptr); }

int main() {
  int *a = new int(5);
  CHECK("new_is_hakmem", hakmem_malloc_usable_size(a) >= sizeof(int) && *a == 5 && aligned(a, 16));
  delete a;

  int *arr = new int[1000];
  for (int i = 0; i < 1000; i++) arr[i] = i;
  CHECK("new_array", hakmem_malloc_usable_size(arr) >= 1000 * sizeof(int) && arr[999] == 999);
  delete[] arr;

  void *z1 = ::operator new(0), *z2 = ::operator new(0);
  CHECK("new_zero_unique", z1 && z2 && z1 != z2 && hakmem_malloc_usable_size(z1) >= 1);
  ::operator delete(z1);
  ::operator delete(z2);

  char *nt = new (std::nothrow) char[77];
  CHECK("nothrow_new", nt != nullptr && hakmem_malloc_usable_size(nt) >= 77);
  delete[] nt;
  int *nt1 = new (std::nothrow) int(3);
  CHECK("nothrow_new_scalar", nt1 && *nt1 == 3 && hakmem_malloc_usable_size(nt1) >= sizeof(int));
  delete nt1;

  Plain *pl = new Plain;                      // delete uses the sized form
  CHECK("sized_delete_object", hakmem_malloc_usable_size(pl) >= sizeof(Plain));
  delete pl;
  Counted *ca = new Counted[500];             // cookie + sized array delete
  CHECK("array_with_cookie", Counted::live == 500 && ca[499].v == 42);   // ca is past the cookie: not a block start
  delete[] ca;
  CHECK("array_destructors_ran", Counted::live == 0);

  Wide *w = new Wide;
  Wide *wa = new Wide[3];
  CHECK("alignas_128_new", aligned(w, 128) && aligned(wa, 128) && hakmem_malloc_usable_size(w) >= sizeof(Wide));
  delete w;
  delete[] wa;
  WideD *wd = new WideD[7];                   // aligned + cookie + aligned sized array delete
  CHECK("alignas_256_array_with_cookie", aligned(wd, 256) && WideD::live == 7 && wd[6].c[99] == 7);
  delete[] wd;
  CHECK("aligned_array_destructors_ran", WideD::live == 0);

  bool all_aligned = true;
  for (size_t al = 16; al <= (1u << 22); al <<= 1) {
    for (size_t n : {size_t(1), al / 2 + 3, al * 3 + 1}) {
      void *p = ::operator new(n, std::align_val_t(al));
      if (!aligned(p, al) || hakmem_malloc_usable_size(p) < n) all_aligned = false;
      std::memset(p, 1, n);
      if (n & 1) ::operator delete(p, n, std::align_val_t(al));
      else ::operator delete(p, std::align_val_t(al));
      void *q = ::operator new[](n, std::align_val_t(al));
      if (!aligned(q, al)) all_aligned = false;
      if (n & 1) ::operator delete[](q, n, std::align_val_t(al));
      else ::operator delete[](q, std::align_val_t(al));
    }
  }
  CHECK("align_val_t_16_to_4M", all_aligned);
  void *p = ::operator new(64, std::align_val_t(256), std::nothrow);
  CHECK("align_val_t_nothrow", p && aligned(p, 256));
  ::operator delete(p, std::align_val_t(256), std::nothrow);
  p = ::operator new[](64, std::align_val_t(512), std::nothrow);
  CHECK("align_val_t_nothrow_array", p && aligned(p, 512));
  ::operator delete[](p, std::align_val_t(512), std::nothrow);
  p = ::operator new(500);
  ::operator delete(p, 500);
  p = ::operator new[](500);
  ::operator delete[](p, 500);
  p = ::operator new(100, std::nothrow);
  ::operator delete(p, std::nothrow);
  p = ::operator new[](100, std::nothrow);
  ::operator delete[](p, std::nothrow);
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete(nullptr, std::align_val_t(64));
  CHECK("explicit_operator_forms", true);
  CHECK("sized_delete_mismatch", delete_mismatch_reported([] { ::operator delete(::operator new(100), 4096); }));
  CHECK("sized_array_delete_mismatch",
        delete_mismatch_reported([] { ::operator delete[](::operator new[](5000), 300000); }));
  CHECK("aligned_sized_delete_mismatch", delete_mismatch_reported([] {
          ::operator delete(::operator new(64, std::align_val_t(256)), 70000, std::align_val_t(256)); }));

  std::map<std::string, std::vector<std::string>> m;
  for (int i = 0; i < 50000; i++) m[std::to_string(i % 5000)].push_back(std::string(i % 100 + 1, 'x'));
  size_t total = 0;
  for (auto &kv : m) for (auto &s : kv.second) total += s.size();
  m.clear();
  CHECK("containers", total == 2525000);

  // Containers built on some threads, destroyed on others (remote deletes).
  std::atomic<long> sum{0};
  {
    std::vector<std::unique_ptr<std::unordered_map<int, std::string>>> maps(8);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++)
      ts.emplace_back([&, t] {
        for (int k = t; k < 8; k += 4) {
          maps[k].reset(new std::unordered_map<int, std::string>);
          for (int i = 0; i < 20000; i++) (*maps[k])[i] = std::string(i % 50 + 1, char('a' + k));
        }
      });
    for (auto &t : ts) t.join();
    ts.clear();
    for (int t = 0; t < 4; t++)
      ts.emplace_back([&, t] {
        for (int k = (t + 1) % 4; k < 8; k += 4) {        // not the building thread
          long s = 0;
          for (auto &kv : *maps[k]) s += (long)kv.second.size();
          sum += s;
          maps[k].reset();
        }
      });
    for (auto &t : ts) t.join();
  }
  CHECK("containers_across_threads", sum == 8L * 510000);

  auto sp = std::make_shared<std::vector<int>>(100000, 3);
  std::weak_ptr<std::vector<int>> wp = sp;
  sp.reset();
  CHECK("shared_ptr", wp.expired());

  int caught = 0;
  for (int i = 0; i < 10000; i++) {           // exception objects are malloc'd
    try { throw std::runtime_error(std::string(i % 300 + 1, 'e')); }
    catch (const std::runtime_error &e) { caught += std::strlen(e.what()) > 0; }
  }
  CHECK("exceptions", caught == 10000);

  bool threw = false;
  try { volatile size_t huge = SIZE_MAX / 2; char *h = new char[huge]; h[0] = 1; delete[] h; }
  catch (const std::bad_alloc &) { threw = true; }
  CHECK("bad_alloc_thrown", threw);
  threw = false;
  try { void *h = ::operator new(SIZE_MAX / 4, std::align_val_t(4096)); ::operator delete(h, std::align_val_t(4096)); }
  catch (const std::bad_alloc &) { threw = true; }
  CHECK("bad_alloc_thrown_aligned", threw);
  threw = false;
  try { volatile size_t n = SIZE_MAX / 8; int *h = new int[n]; delete[] h; }   // size overflow in new[]
  catch (const std::bad_alloc &) { threw = true; }
  CHECK("bad_array_new_length", threw);
  volatile size_t huge2 = SIZE_MAX / 4;
  char *hn = new (std::nothrow) char[huge2];
  CHECK("nothrow_returns_null", hn == nullptr);
  void *hna = ::operator new(huge2, std::align_val_t(64), std::nothrow);
  CHECK("nothrow_aligned_returns_null", hna == nullptr);
  std::set_new_handler(handler);
  threw = false;
  try { char *h = new char[huge2]; delete[] h; } catch (const std::bad_alloc &) { threw = true; }
  CHECK("new_handler_called", handler_calls == 1 && threw);
  char *after = new char[100];                 // still works after failures
  CHECK("works_after_failures", after && hakmem_malloc_usable_size(after) >= 100);
  delete[] after;
  return failed;
}
