// Built against an installed hakmem by tests/test_install.sh: prints
// "on hakmem" and exits 0 only if operator new (plain and aligned) is served
// by hakmem, i.e. the memory shows up in hakmem's own statistics.
#include <hakmem.h>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct alignas(256) Aligned { char bytes[4096]; };

static size_t in_use() {
  hakmem_stats_t s;
  hakmem_stats_get(&s);
  return s.in_use;
}

int main() {
  size_t before = in_use();
  std::vector<char> v(8u << 20, 'x');
  bool on = in_use() >= before + v.size();

  std::map<int, std::string> m;
  for (int i = 0; i < 10000; i++) m[i] = std::to_string(i * 7);
  before = in_use();
  std::vector<std::unique_ptr<Aligned>> a;
  for (int i = 0; i < 256; i++) a.emplace_back(new Aligned());
  on = on && in_use() >= before + a.size() * sizeof(Aligned);
  for (auto &p : a) on = on && reinterpret_cast<uintptr_t>(p.get()) % alignof(Aligned) == 0;
  on = on && m.size() == 10000 && m[9999] == "69993";

  std::puts(on ? "on hakmem" : "NOT on hakmem");
  return on ? 0 : 1;
}
