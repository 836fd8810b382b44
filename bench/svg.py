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


def chart(title, benches, variants, ratio, rss_ratio, ref, labels=None, first=None):
    """ratio: speed relative to ref (>1 faster); labels: the legend's name of
    each variant (with its version); first: the first panel's title."""
    extra = iter(EXTRA_COLORS * len(variants))          # the named colours first, then the others in turn
    colors = {v: COLORS.get(v) or next(extra) for v in variants}
    labels = labels or {}
    group = BAR * len(variants) + GAP
    width = LEFT + group * len(benches) + 20
    panels = [(first or "Throughput relative to " + ref + " (higher is better)", ratio),
              ("Peak RSS relative to " + ref + " (lower is better)", rss_ratio)]
    legend = []                                         # (variant, text, x, y), wrapped to the width
    x, y = LEFT, 32
    for v in variants:
        text = labels.get(v, v) + (" (= 1x)" if v == ref else "")
        if x > LEFT and x + 14 + 7 * len(text) > width:
            x, y = LEFT, y + 16
        legend.append((v, text, x, y))
        x += 14 + 7 * len(text) + 16
    top = y + 28
    height = top + len(panels) * (PANEL + LABELS + 30)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    for v, text, x, y in legend:
        out.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{colors[v]}"/>'
                   f'<text x="{x + 14}" y="{y + 9}">{escape(text)}</text>')
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
