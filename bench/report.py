#!/usr/bin/env python3
"""Summarise bench/run.sh's raw lines (bench alloc run ops_per_sec maxrss_kib)
into a markdown table and a CSV: median and range of throughput, ratio to
mimalloc, median peak RSS."""
import statistics, sys

raw, stem, commit, runs, benches, allocs = sys.argv[1:7]
benches, allocs = benches.split(), allocs.split()
ops, rss = {}, {}
for line in open(raw):
    b, a, _, o, r = line.split()
    ops.setdefault((b, a), []).append(float(o))
    rss.setdefault((b, a), []).append(int(r))

def med(v): return statistics.median(v) if v else float("nan")

rows = ["benchmark,allocator,runs,median_ops_per_sec,min_ops_per_sec,max_ops_per_sec,ratio_to_mimalloc,median_peak_rss_kib"]
md = [f"# hakmem benchmark comparison ({commit}, {runs} interleaved runs)", "",
      "Throughput: median Mops/s [min-max] (ratio to mimalloc's median; >1 is faster). Peak RSS: median MiB.", "",
      "| benchmark | " + " | ".join(allocs) + " |", "|---|" + "---|" * len(allocs)]
for b in benches:
    ref = med(ops.get((b, "mimalloc"), []))
    cells, rcells = [], []
    for a in allocs:
        v = ops.get((b, a), [])
        if not v:
            cells.append("failed"); rcells.append("")
            continue
        m = med(v)
        ratio = m / ref if ref == ref and ref > 0 else float("nan")
        cells.append(f"{m/1e6:.1f} [{min(v)/1e6:.1f}-{max(v)/1e6:.1f}]" + (f" ({ratio:.2f}x)" if ratio == ratio else ""))
        rcells.append(f"{med(rss[(b, a)])/1024:.1f}")
        rows.append(f"{b},{a},{len(v)},{m:.0f},{min(v):.0f},{max(v):.0f},{ratio:.3f},{med(rss[(b, a)]):.0f}")
    md.append(f"| {b} | " + " | ".join(cells) + " |")
    md.append(f"| {b} peak RSS | " + " | ".join(rcells) + " |")
open(stem + ".md", "w").write("\n".join(md) + "\n")
open(stem + ".csv", "w").write("\n".join(rows) + "\n")
print("\n".join(md))
print(f"\nwritten: {stem}.md {stem}.csv")
