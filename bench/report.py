#!/usr/bin/env python3
"""Turn bench/run.sh's raw lines into tables (markdown, printed and written
next to the raw file), a CSV and an SVG chart.  One function per mode:

  report.py compare   STEM COMMIT RUNS BENCHES VARIANTS   table, CSV, chart
  report.py ab        STEM SPEC_A SPEC_B RUNS BENCHES     verdict per benchmark
  report.py callgrind STEM COMMIT                         instructions per pair
  report.py syscalls  STEM COMMIT BENCHES VARIANTS        OS call counts

Raw lines are "bench variant run key=value ..." (the RESULT fields)."""
import datetime, math, os, statistics, sys

import svg

REF = "mimalloc"
RSS_SAMPLES = ["rss0_kib", "rss50_kib", "rss100_kib", "rss200_kib"]
NOT_EXTRA = {"run", "ops", "secs", "ops_per_sec", "maxrss_kib", "peak_rss_kib", "peak_kib", "mallocs", *RSS_SAMPLES}


def read_raw(path):
    """{(bench, variant): [ {field: float}, ... one per run ]}"""
    runs = {}
    for line in open(path):
        b, v, run, *kv = line.split()
        f = {k: float(x) for k, x in (p.split("=", 1) for p in kv)}
        f["run"] = int(run)
        f["peak_kib"] = f.get("peak_rss_kib", f.get("maxrss_kib", math.nan))   # the server's own, for redis
        runs.setdefault((b, v), []).append(f)
    return runs


def values(runs, b, v, field):
    return [r[field] for r in runs.get((b, v), []) if field in r]


def med(xs):
    return statistics.median(xs) if xs else math.nan


def si(x):
    """3 significant digits with k/M/G: 70.0M, 4.11k."""
    if x != x:
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def mib(kib):
    return "-" if kib != kib else f"{kib / 1024:.1f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def geomean(xs):
    xs = [x for x in xs if x == x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def write(stem, md, csv_rows=None):
    open(stem + ".md", "w").write("\n".join(md) + "\n")
    written = [stem + ".md"]
    if csv_rows:
        open(stem + ".csv", "w").write("\n".join(",".join(map(str, r)) for r in csv_rows) + "\n")
        written.append(stem + ".csv")
    print("\n".join(md))
    return written


def compare(stem, commit, nruns, benches, variants):
    runs = read_raw(stem + ".raw")
    ops = {(b, v): values(runs, b, v, "ops_per_sec") for b in benches for v in variants}
    peak = {(b, v): med(values(runs, b, v, "peak_kib")) for b in benches for v in variants}
    has_ref = REF in variants
    ratio = {k: med(x) / med(ops[(k[0], REF)]) if has_ref and x and ops[(k[0], REF)] else math.nan
             for k, x in ops.items()}
    rss_ratio = {k: p / peak[(k[0], REF)] if has_ref else math.nan for k, p in peak.items()}

    md = [f"# hakmem benchmark comparison: {commit}, {datetime.date.today()}", "",
          f"`make bench`: {nruns} interleaved runs per benchmark and allocator, on {os.cpu_count()} cores "
          f"(load average at the end {os.getloadavg()[0]:.1f}).", "",
          f"Throughput in operations per second: median [min-max] and, after it, the median relative to "
          f"{REF}'s (>1 is faster). Single-thread benchmarks are timed in CPU time, which a busy machine "
          f"does not inflate; multi-threaded ones in wall time. What an operation is: bench/README.md.", ""]
    rows = []
    for b in benches:
        row = [b]
        for v in variants:
            x = ops[(b, v)]
            row.append(f"{si(med(x))} [{si(min(x))}-{si(max(x))}] {ratio[(b, v)]:.2f}x" if x else "failed")
        rows.append(row)
    gm = [geomean([1 / ratio[(b, v)] for b in benches if ratio[(b, v)] == ratio[(b, v)]]) for v in variants]
    rows.append([f"**time vs {REF}, geomean** (<1 is faster)"] + [f"**{g:.3f}**" for g in gm])
    md += table(["benchmark"] + variants, rows)

    md += ["", "Peak RSS in MiB, median (for redis: the server's VmHWM).", ""]
    md += table(["benchmark"] + variants, [[b] + [mib(peak[(b, v)]) for v in variants] for b in benches])

    rss_benches = [b for b in benches if any(values(runs, b, v, "rss200_kib") for v in variants)]
    if rss_benches:
        md += ["", "RSS after free (MiB, median): peak, then RSS 0/50/100/200 ms after the last free.", ""]
        md += table(["benchmark", "allocator", "peak", "0 ms", "50 ms", "100 ms", "200 ms"],
                    [[b, v, mib(peak[(b, v)])] + [mib(med(values(runs, b, v, f))) for f in RSS_SAMPLES]
                     for b in rss_benches for v in variants])

    fields = lambda b: sorted({k for v in variants for r in runs.get((b, v), []) for k in r} - NOT_EXTRA)
    extras = [(b, f) for b in benches for f in fields(b)               # all-zero rows say nothing
              if any(x != 0 for v in variants for x in values(runs, b, v, f))]
    if extras:
        md += ["", "Other measurements (median).", ""]
        md += table(["benchmark", "measure"] + variants,
                    [[b, f] + [si(med(values(runs, b, v, f))) for v in variants] for b, f in extras])

    csv = [["benchmark", "allocator", "runs", "median_ops_per_sec", "min_ops_per_sec", "max_ops_per_sec",
            f"ratio_to_{REF}", "median_peak_rss_kib"] + RSS_SAMPLES]
    for b in benches:
        for v in variants:
            x = ops[(b, v)]
            if x:
                csv.append([b, v, len(x), f"{med(x):.0f}", f"{min(x):.0f}", f"{max(x):.0f}", f"{ratio[(b, v)]:.4f}",
                            f"{peak[(b, v)]:.0f}"] + [f"{med(values(runs, b, v, f)):.0f}" for f in RSS_SAMPLES])
    written = write(stem, md, csv)
    if has_ref:
        open(stem + ".svg", "w").write(svg.chart(f"hakmem {commit}, {datetime.date.today()}, {nruns} runs",
                                                 benches, variants, ratio, rss_ratio, REF))
        written.append(stem + ".svg")
    print("\nwritten: " + " ".join(written))


def verdict(a, b):
    r = b / a
    return r, "GO" if r >= 1.01 else "NO-GO" if r <= 0.99 else "NEUTRAL"


def ab(stem, spec_a, spec_b, nruns, benches):
    runs = read_raw(stem + ".raw")
    md = [f"# A/B: A = `{spec_a}`, B = `{spec_b}`, {nruns} interleaved runs, {datetime.date.today()}", "",
          "Throughput medians [min-max]; verdict on the ratio of medians B/A: GO >= 1.01, NO-GO <= 0.99, "
          "else NEUTRAL. `B won`: in how many runs B beat the A run next to it (near half: noise).", ""]
    rows, ratios, count = [], [], {}
    for b in benches:
        xa, xb = values(runs, b, "A", "ops_per_sec"), values(runs, b, "B", "ops_per_sec")
        if not xa or not xb:
            rows.append([b, "failed"] + [""] * 6)
            continue
        r, v = verdict(med(xa), med(xb))
        ratios.append(r)
        count[v] = count.get(v, 0) + 1
        a_of = {f["run"]: f["ops_per_sec"] for f in runs[(b, "A")]}
        pairs = [(a_of[f["run"]], f["ops_per_sec"]) for f in runs[(b, "B")] if f["run"] in a_of]
        rows.append([b, f"{si(med(xa))} [{si(min(xa))}-{si(max(xa))}]", f"{si(med(xb))} [{si(min(xb))}-{si(max(xb))}]",
                     f"{r:.3f}", f"**{v}**", f"{sum(y > x for x, y in pairs)}/{len(pairs)}",
                     mib(med(values(runs, b, "A", "peak_kib"))), mib(med(values(runs, b, "B", "peak_kib")))])
    md += table(["benchmark", "A", "B", "B/A", "verdict", "B won", "peak MiB A", "peak MiB B"], rows)
    md += ["", f"Geomean B/A: {geomean(ratios):.3f}; " + ", ".join(f"{k} {n}" for k, n in sorted(count.items()))]
    print("\nwritten: " + " ".join(write(stem, md)))


def callgrind(stem, commit):
    """Raw lines: bench variant iters mallocs total_instructions main_self."""
    cost, variants, benches = {}, [], []
    for line in open(stem + "-callgrind.raw"):
        b, v, it, m, total, self = line.split()
        cost.setdefault((b, v), []).append((int(it), int(m), int(total), int(self)))
        variants += [v] if v not in variants else []
        benches += [b] if b not in benches else []
    per_pair, loop = {}, {}
    for k, rows in cost.items():
        (_, m1, t1, s1), (_, m2, t2, s2) = sorted(rows)[:2]
        per_pair[k] = ((t2 - s2) - (t1 - s1)) / (m2 - m1)
        loop[k] = (s2 - s1) / (m2 - m1)
    md = [f"# Instructions per malloc+free pair: {commit}, {datetime.date.today()}", "",
          "valgrind --tool=callgrind at two iteration counts; the difference, less the benchmark's own loop, "
          "divided by the extra malloc+free pairs: the allocator's user-space instructions per pair "
          "(exact and repeatable; system calls and page faults are not counted).", ""]
    # One ratio column: hakmem against the reference, or the second build against the first.
    pair = ("hakmem", REF) if {"hakmem", REF} <= set(variants) else tuple(variants[::-1]) if len(variants) == 2 else None
    hdr = ["benchmark"] + variants + ([f"{pair[0]}/{pair[1]}"] if pair else [])
    rows = []
    for b in benches:
        row = [b] + [f"{per_pair[(b, v)]:.1f}" if (b, v) in per_pair else "-" for v in variants]
        if pair and (b, pair[0]) in per_pair and (b, pair[1]) in per_pair:
            row.append(f"{per_pair[(b, pair[0])] / per_pair[(b, pair[1])]:.3f}")
        rows.append(row)
    md += table(hdr, rows)
    md += ["", "The benchmark loop itself (not counted above): " +
           ", ".join(f"{b} {loop[(b, variants[0])]:.1f}" for b in benches) + " instructions per pair."]
    print("\nwritten: " + " ".join(write(stem + "-callgrind", md)))


def syscalls(stem, commit, benches, variants):
    runs = read_raw(stem + "-syscalls.raw")
    calls = ["mmap", "munmap", "madvise", "mremap", "brk"]
    md = [f"# OS calls per run (strace -f -c): {commit}, {datetime.date.today()}", "",
          "One run of each benchmark per allocator. The counts include those of start-up, shown alone in the "
          "row `startup` (a run that allocates nothing). larson runs for a fixed time, so its counts grow "
          "with its throughput; larson and churn start thousands of threads, and glibc releases each "
          "exited thread's stack with one madvise, whatever the allocator. So the last column puts the "
          "calls beyond start-up per million operations, which compares a fixed-time run fairly.", ""]
    start = {}                                      # each allocator's start-up total
    for v in variants:
        r = runs.get(("startup", v), [{}])[0]
        start[v] = sum(int(r.get(c, 0)) for c in calls) if r else None
    rows = []
    for b in benches:
        for v in variants:
            r = runs.get((b, v), [{}])[0]
            if not r:
                rows.append([b, v, "failed"] + [""] * (len(calls) + 2))
                continue
            n = [int(r.get(c, 0)) for c in calls]
            ops, per = float(r.get("ops", 0) or 0), ""
            if ops > 0 and start[v] is not None and b != "startup":
                x = (sum(n) - start[v]) / ops * 1e6
                per = f"{x:.1f}" if x < 1000 else si(x)
            rows.append([b, v, si(r.get("ops", math.nan))] + [str(x) for x in n] + [str(sum(n)), per])
    md += table(["benchmark", "allocator", "ops"] + calls + ["total", "beyond start-up per M ops"], rows)
    print("\nwritten: " + " ".join(write(stem + "-syscalls", md)))


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "compare":
        compare(args[0], args[1], args[2], args[3].split(), args[4].split())
    elif mode == "ab":
        ab(args[0], args[1], args[2], args[3], args[4].split())
    elif mode == "callgrind":
        callgrind(args[0], args[1])
    elif mode == "syscalls":
        syscalls(args[0], args[1], args[2].split(), args[3].split())
    else:
        sys.exit(__doc__)
