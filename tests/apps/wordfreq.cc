// A template-heavy C++ program for tests/test_preload.sh: g++ -O2 compiles it
// under LD_PRELOAD (cc1plus parsing and optimizing much of the standard
// library is a real allocation workload), then it runs: word frequencies of
// its input through <regex>, hash maps, sorting and streams.
#include <algorithm>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

using Count = std::pair<std::string, long>;
using Stat = std::variant<long, double, std::string>;

static std::string show(const Stat &s) {
  return std::visit([](const auto &v) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(3) << v;
    return o.str();
  }, s);
}

static std::optional<Count> longest(const std::unordered_map<std::string, long> &m) {
  auto it = std::max_element(m.begin(), m.end(), [](const auto &a, const auto &b) {
    return a.first.size() != b.first.size() ? a.first.size() < b.first.size() : a.first > b.first;
  });
  if (it == m.end()) return std::nullopt;
  return *it;
}

int main() {
  const std::regex word("[A-Za-z][A-Za-z0-9']*");
  std::unordered_map<std::string, long> freq;
  std::map<size_t, std::set<std::string>> by_length;
  std::vector<std::unique_ptr<std::string>> lines;
  long words = 0;
  for (std::string line; std::getline(std::cin, line);) {
    lines.push_back(std::make_unique<std::string>(line));
    for (std::sregex_iterator it(line.begin(), line.end(), word), end; it != end; ++it) {
      std::string w = it->str();
      std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return std::tolower(c); });
      ++freq[w];
      by_length[w.size()].insert(w);
      ++words;
    }
  }
  std::vector<Count> top(freq.begin(), freq.end());
  std::sort(top.begin(), top.end(), [](const Count &a, const Count &b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  top.resize(std::min<size_t>(top.size(), 10));

  std::map<std::string, Stat> stats{{"lines", (long)lines.size()}, {"words", words},
                                    {"distinct", (long)freq.size()}};
  double letters = std::accumulate(freq.begin(), freq.end(), 0.0,
                                   [](double t, const auto &kv) { return t + kv.first.size() * kv.second; });
  stats["mean_length"] = words ? letters / words : 0.0;
  if (auto l = longest(freq)) stats["longest"] = l->first;

  for (const auto &[name, value] : stats) std::cout << name << " = " << show(value) << "\n";
  for (const auto &[w, n] : top) std::cout << std::setw(8) << n << "  " << w << "\n";
  for (const auto &[len, ws] : by_length)
    std::cout << "length " << len << ": " << ws.size() << " words, first " << *ws.begin() << "\n";
  return 0;
}
