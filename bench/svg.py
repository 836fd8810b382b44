"""The comparison chart, written by hand as SVG: two panels of grouped bars,
throughput and peak RSS, each relative to the reference allocator on a log
scale (bars grow up or down from 1x, so 2x and 0.5x look equally far)."""
import math
from xml.sax.saxutils import escape

COLORS = {"hakmem": "#d62728", "glibc": "#7f7f7f", "mimalloc": "#1f77b4", "jemalloc": "#2ca02c",
          "tcmalloc": "#ff7f0e"}
EXTRA_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#17becf"]
LO, HI = 1 / 8, 8                      # the axis: 0.125x .. 8x; bars beyond are clipped
TICKS = [0.125, 0.25, 0.5, 1, 2, 4, 8]
BAR, GAP, LEFT, PANEL, LABELS = 7, 14, 60, 220, 95


def chart(title, benches, variants, ratio, rss_ratio, ref):
    colors = {v: COLORS.get(v, EXTRA_COLORS[i % len(EXTRA_COLORS)]) for i, v in enumerate(variants)}
    group = BAR * len(variants) + GAP
    width = LEFT + group * len(benches) + 20
    panels = [("Throughput relative to " + ref + " (higher is better)", ratio),
              ("Peak RSS relative to " + ref + " (lower is better)", rss_ratio)]
    height = 60 + len(panels) * (PANEL + LABELS + 30)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    x = LEFT
    for v in variants:                                  # legend
        label = v + (" (= 1x)" if v == ref else "")
        out.append(f'<rect x="{x}" y="32" width="10" height="10" fill="{colors[v]}"/>'
                   f'<text x="{x + 14}" y="41">{escape(label)}</text>')
        x += 14 + 7 * len(label) + 16
    top = 60
    for name, values in panels:
        out += panel(name, top, width, benches, variants, values, colors)
        top += PANEL + LABELS + 30
    out.append("</svg>")
    return "\n".join(out) + "\n"


def panel(name, top, width, benches, variants, values, colors):
    def y(r):
        r = min(max(r, LO), HI)
        return top + 15 + (math.log2(HI) - math.log2(r)) / (math.log2(HI) - math.log2(LO)) * PANEL

    out = [f'<text x="{LEFT}" y="{top + 10}" font-weight="bold">{escape(name)}</text>']
    for t in TICKS:
        style = 'stroke="#000"' if t == 1 else 'stroke="#ddd"'
        out.append(f'<line x1="{LEFT}" x2="{width - 20}" y1="{y(t):.1f}" y2="{y(t):.1f}" {style}/>'
                   f'<text x="{LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t:g}x</text>')
    group = BAR * len(variants) + GAP
    for i, b in enumerate(benches):
        x0 = LEFT + GAP / 2 + i * group
        for j, v in enumerate(variants):
            r = values.get((b, v), math.nan)
            if r != r:
                continue
            y1, y2 = sorted((y(1), y(r)))
            out.append(f'<rect x="{x0 + j * BAR:.1f}" y="{y1:.1f}" width="{BAR - 1}" height="{max(y2 - y1, 1):.1f}" '
                       f'fill="{colors[v]}"><title>{escape(b)} {escape(v)}: {r:.2f}x</title></rect>')
        lx, ly = x0 + group / 2 - GAP / 2, top + PANEL + 25
        out.append(f'<text x="{lx:.1f}" y="{ly}" text-anchor="end" transform="rotate(-45 {lx:.1f} {ly})">'
                   f'{escape(b)}</text>')
    return out
