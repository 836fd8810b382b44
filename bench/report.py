#!/usr/bin/env python3
"""Turn bench/run.sh's raw lines into tables (markdown, printed and written
next to the raw file), a CSV and an SVG chart.  One function per mode:

  report.py compare   STEM COMMIT RUNS BENCHES VARIANTS [SUITE [NOTE]]
                                                          table, CSV, chart
  report.py ab        STEM SPEC_A SPEC_B RUNS BENCHES     verdict per benchmark
  report.py callgrind STEM COMMIT                         instructions per pair
  report.py syscalls  STEM COMMIT BENCHES VARIANTS        OS call counts

Raw lines are "bench variant run key=value ..." (the RESULT fields).  Beside
them run.sh writes STEM.allocs ("name version library" of each allocator)
and STEM.skipped ("bench why" of each row it could not run).  The ratios are
to the allocator REF names, else mimalloc, else the first mimalloc* given,
else the first one other than hakmem."""
import datetime, math, os, statistics, sys

import svg

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


def read_lines(path):
    try:
        return [line.rstrip("\n") for line in open(path) if line.strip()]
    except FileNotFoundError:
        return []


def read_allocs(stem):
    """{allocator: (version, library)}"""
    return {n: (ver, lib) for n, ver, lib in (line.split(" ", 2) for line in read_lines(stem + ".allocs"))}


def label(v, allocs):
    """An allocator's name with its version, for table heads and the legend."""
    return f"{v} {allocs[v][0]}" if v in allocs else v


def reference(variants):
    named = os.environ.get("REF")
    if named in variants:
        return named
    mimallocs = [v for v in variants if v.startswith("mimalloc")]
    others = [v for v in variants if v != "hakmem"]
    return "mimalloc" if "mimalloc" in variants else (mimallocs or others or variants)[0]


def write(stem, md, csv_rows=None):
    open(stem + ".md", "w").write("\n".join(md) + "\n")
    written = [stem + ".md"]
    if csv_rows:
        open(stem + ".csv", "w").write("\n".join(",".join(map(str, r)) for r in csv_rows) + "\n")
        written.append(stem + ".csv")
    print("\n".join(md))
    return written


def compare(stem, commit, nruns, benches, variants, suite="default", note=""):
    runs = read_raw(stem + ".raw")
    allocs, ref = read_allocs(stem), reference(variants)
    heads = [label(v, allocs) for v in variants]
    timed = suite == "mimalloc-bench"           # rows measured in seconds, as bench.sh counts them
    field = "secs" if timed else "ops_per_sec"
    xs = {(b, v): values(runs, b, v, field) for b in benches for v in variants}
    cost = {k: (med(x) if timed else 1 / med(x)) if x and med(x) > 0 else math.nan   # time, lower is better
            for k, x in xs.items()}
    speed = {k: cost[(k[0], ref)] / c for k, c in cost.items()}      # >1: faster than ref
    peak = {(b, v): med(values(runs, b, v, "peak_kib")) for b in benches for v in variants}
    rss_ratio = {k: p / peak[(k[0], ref)] for k, p in peak.items()}
    # hakmem's time over the fastest other allocator's, per row
    peers = [v for v in variants if v != "hakmem"]
    best = {}
    if "hakmem" in variants and peers:
        for b in benches:
            done = [v for v in peers if cost[(b, v)] == cost[(b, v)]]
            if done and cost[(b, "hakmem")] == cost[(b, "hakmem")]:
                v = min(done, key=lambda v: cost[(b, v)])
                best[b] = (cost[(b, "hakmem")] / cost[(b, v)], v)
    skipped = [line.split(" ", 1) for line in read_lines(stem + ".skipped")]

    load = f"on {os.cpu_count()} cores (load average at the end {os.getloadavg()[0]:.1f})"
    if timed:
        md = [f"# mimalloc-bench suite: hakmem {commit}, {datetime.date.today()}", "",
              f"`SUITE=mimalloc-bench bench/run.sh`: the programs of {note} (the arguments of its bench.sh), "
              f"{nruns} interleaved runs per row and allocator, {load}.", "",
              "Time in seconds as bench.sh counts it (wall clock; for larson, xmalloc-test, rptest and glibc-thread "
              "the time it derives from the rate they report): median [min-max] and, after it, the median relative "
              f"to {ref}'s (<1 is faster)."]
    else:
        md = [f"# hakmem benchmark comparison: {commit}, {datetime.date.today()}", "",
              f"`make bench`: {nruns} interleaved runs per benchmark and allocator, {load}.", "",
              f"Throughput in operations per second: median [min-max] and, after it, the median relative to "
              f"{ref}'s (>1 is faster). Single-thread benchmarks are timed in CPU time, which a busy machine "
              f"does not inflate; multi-threaded ones in wall time. What an operation is: bench/README.md."]
    if best:
        md[-1] += (" `hakmem / best peer`: hakmem's median time over that of the fastest other allocator "
                   "(named; <1: hakmem is the fastest).")
    md += ["", "Allocators: " + ", ".join(f"{v} {allocs[v][0]} (`{allocs[v][1]}`)" if v in allocs else v
                                          for v in variants) + ".", ""]
    rows = []
    for b in benches:
        row = [b]
        for v in variants:
            x, r = xs[(b, v)], speed[(b, v)]
            row.append(f"{si(med(x))} [{si(min(x))}-{si(max(x))}] {1 / r if timed else r:.2f}x" if x else "failed")
        if best:
            row.append(f"{best[b][0]:.2f} ({best[b][1]})" if b in best else "-")
        rows.append(row)
    rows += [[b, f"skipped: {why}"] + [""] * (len(variants) - 1 + bool(best)) for b, why in skipped]
    gm = [geomean([1 / speed[(b, v)] for b in benches]) for v in variants]
    rows.append([f"**time vs {ref}, geomean** (<1 is faster)"] + [f"**{g:.3f}**" for g in gm] +
                ([f"**{geomean([r for r, _ in best.values()]):.3f}**"] if best else []))
    md += table(["benchmark"] + heads + (["hakmem / best peer"] if best else []), rows)

    md += ["", "Peak RSS in MiB, median (for redis: the server's VmHWM).", ""]
    rows = [[b] + [mib(peak[(b, v)]) for v in variants] for b in benches]
    rows.append([f"**peak RSS vs {ref}, geomean**"] +
                [f"**{geomean([rss_ratio[(b, v)] for b in benches]):.3f}**" for v in variants])
    md += table(["benchmark"] + heads, rows)

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
        md += table(["benchmark", "measure"] + heads,
                    [[b, f] + [si(med(values(runs, b, v, f))) for v in variants] for b, f in extras])

    csv = [["benchmark", "allocator", "version", "runs", f"median_{field}", f"min_{field}", f"max_{field}",
            f"time_ratio_to_{ref}", "median_peak_rss_kib"] + RSS_SAMPLES]
    for b in benches:
        for v in variants:
            x = xs[(b, v)]
            if x:
                csv.append([b, v, allocs.get(v, ("",))[0], len(x), f"{med(x):.6g}", f"{min(x):.6g}", f"{max(x):.6g}",
                            f"{1 / speed[(b, v)]:.4f}", f"{peak[(b, v)]:.0f}"] +
                           [f"{med(values(runs, b, v, f)):.0f}" for f in RSS_SAMPLES])
    written = write(stem, md, csv)
    first = (f"Speed relative to {ref} ({ref}'s time / time; higher is better)" if timed else
             f"Throughput relative to {ref} (higher is better)")
    title = f"{'mimalloc-bench suite: ' if timed else ''}hakmem {commit}, {datetime.date.today()}, {nruns} runs"
    open(stem + ".svg", "w").write(svg.chart(title, benches, variants, speed, rss_ratio, ref,
                                             {v: label(v, allocs) for v in variants}, first))
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
    ref, allocs = reference(variants), read_allocs(stem)
    pair = ("hakmem", ref) if {"hakmem", ref} <= set(variants) else tuple(variants[::-1]) if len(variants) == 2 else None
    hdr = ["benchmark"] + [label(v, allocs) for v in variants] + ([f"{pair[0]}/{pair[1]}"] if pair else [])
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
    runs, allocs = read_raw(stem + "-syscalls.raw"), read_allocs(stem)
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
                rows.append([b, label(v, allocs), "failed"] + [""] * (len(calls) + 2))
                continue
            n = [int(r.get(c, 0)) for c in calls]
            ops, per = float(r.get("ops", 0) or 0), ""
            if ops > 0 and start[v] is not None and b != "startup":
                x = (sum(n) - start[v]) / ops * 1e6
                per = f"{x:.1f}" if x < 1000 else si(x)
            rows.append([b, label(v, allocs), si(r.get("ops", math.nan))] + [str(x) for x in n] + [str(sum(n)), per])
    md += table(["benchmark", "allocator", "ops"] + calls + ["total", "beyond start-up per M ops"], rows)
    print("\nwritten: " + " ".join(write(stem + "-syscalls", md)))


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "compare":
        compare(args[0], args[1], args[2], args[3].split(), args[4].split(), *args[5:7])
    elif mode == "ab":
        ab(args[0], args[1], args[2], args[3], args[4].split())
    elif mode == "callgrind":
        callgrind(args[0], args[1])
    elif mode == "syscalls":
        syscalls(args[0], args[1], args[2].split(), args[3].split())
    else:
        sys.exit(__doc__)
