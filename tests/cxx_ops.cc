// C++ operators under hakmem (linked with -lhakmem): every new/delete form,
// std containers, new_handler and std::bad_alloc.
#include <cstdint>
#include <cstdio>
#include <map>
#include <new>
#include <string>
#include <vector>
#include "hakmem.h"

static int failed = 0;
#define CHECK(name, cond) do { if (cond) std::printf("ok - cxx:%s\n", name); else { std::printf("not ok - cxx:%s\n", name); failed = 1; } } while (0)

struct alignas(128) Wide { char c[200]; };
static int handler_calls = 0;
static void handler() { handler_calls++; std::set_new_handler(nullptr); }

int main() {
  int *a = new int(5);
  CHECK("new_is_hakmem", hakmem_malloc_usable_size(a) >= sizeof(int));
  delete a;
  int *arr = new int[1000];
  for (int i = 0; i < 1000; i++) arr[i] = i;
  CHECK("new_array", hakmem_malloc_usable_size(arr) >= 1000 * sizeof(int) && arr[999] == 999);
  delete[] arr;
  char *nt = new (std::nothrow) char[77];
  CHECK("nothrow_new", nt != nullptr && hakmem_malloc_usable_size(nt) >= 77);
  delete[] nt;
  Wide *w = new Wide;
  Wide *wa = new Wide[3];
  CHECK("aligned_new", (reinterpret_cast<uintptr_t>(w) & 127) == 0 && (reinterpret_cast<uintptr_t>(wa) & 127) == 0);
  delete w;
  delete[] wa;
  void *p = ::operator new(300, std::align_val_t(4096));
  CHECK("align_val_t", (reinterpret_cast<uintptr_t>(p) & 4095) == 0 && hakmem_malloc_usable_size(p) >= 300);
  ::operator delete(p, 300, std::align_val_t(4096));
  p = ::operator new(64, std::align_val_t(256), std::nothrow);
  CHECK("align_val_t_nothrow", p && (reinterpret_cast<uintptr_t>(p) & 255) == 0);
  ::operator delete(p, std::align_val_t(256));
  p = ::operator new(500);
  ::operator delete(p, 500);   // sized delete

  std::map<std::string, std::vector<std::string>> m;
  for (int i = 0; i < 50000; i++) m[std::to_string(i % 5000)].push_back(std::string(i % 100 + 1, 'x'));
  size_t total = 0;
  for (auto &kv : m) for (auto &s : kv.second) total += s.size();
  m.clear();
  CHECK("containers", total == 2525000);

  bool threw = false;
  try { volatile size_t huge = SIZE_MAX / 2; char *h = new char[huge]; h[0] = 1; delete[] h; }
  catch (const std::bad_alloc &) { threw = true; }
  CHECK("bad_alloc_thrown", threw);
  volatile size_t huge2 = SIZE_MAX / 4;
  char *hn = new (std::nothrow) char[huge2];
  CHECK("nothrow_returns_null", hn == nullptr);
  std::set_new_handler(handler);
  threw = false;
  try { char *h = new char[huge2]; delete[] h; } catch (const std::bad_alloc &) { threw = true; }
  CHECK("new_handler_called", handler_calls == 1 && threw);
  return failed;
}
