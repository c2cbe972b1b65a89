"""Shared by the figure scripts `tracrctl report --figures DIR` writes: the
size and fonts of a figure, colours and line styles per condition, the choice
of a log axis, thinned tick labels, notes and saving as PDF, SVG and PNG.

Each figure script (latency.py, stages.py, ...) reads its own CSV and calls
these helpers; restyle a figure by editing its script (or this file). tracrctl
writes both again only when it writes the figures again.
"""
import csv
import json
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (width in, height in, font pt): a 3.3-inch column of a two-column paper, a 7-inch page.
SIZES = {"column": (3.3, 2.5, 8.0), "page": (7.0, 3.4, 9.0)}
# Line styles and markers for the second condition axis (the first is colour).
STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(text):
    """A CSV cell as a number; an empty cell (no value) is NaN."""
    return float(text) if text not in ("", None) else math.nan


def distinct(rows, key):
    """The values of one column, in the order they first appear."""
    out = []
    for r in rows:
        if r[key] not in out:
            out.append(r[key])
    return out


def palette(n):
    try:  # seaborn's colour-blind palette when Debian's python3-seaborn is there
        import seaborn as sns

        colours = sns.color_palette("colorblind", max(n, 1))
        return [matplotlib.colors.to_hex(c) for c in colours]
    except ImportError:
        cycle = plt.get_cmap("tab10").colors
        return [matplotlib.colors.to_hex(cycle[i % len(cycle)]) for i in range(max(n, 1))]


def new_figure(size, legend_rows=0, tick_labels=(), panels=1):
    """A figure of the named size with embedded TrueType fonts (PDF) and text
    kept as text (SVG); taller by the rows its legend needs below the axes and
    by the room rotated tick labels take. With panels > 1: that many axes
    stacked, sharing the x axis (a list of axes is returned)."""
    width, height, font = SIZES[size]
    shown, horizontal = thinned(tick_labels, size)
    if shown and not horizontal:
        height += max(0.0, max(len(s) for s in shown) * (font - 1) * 0.6 / 72 - 0.25)
    matplotlib.rcParams.update({
        "font.size": font, "axes.titlesize": font, "axes.labelsize": font, "legend.fontsize": font - 0.5,
        "xtick.labelsize": font - 1, "ytick.labelsize": font - 1,
        "pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none", "svg.hashsalt": "tracr",
        "text.parse_math": False,  # run names and labels are text: a "$" is a dollar sign
        "path.simplify": False,  # every measured point stays a vertex of its line
        "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
    })
    height += legend_rows * font * 1.5 / 72
    if panels > 1:
        height += (panels - 1) * height * 0.45
        fig, axes = plt.subplots(panels, 1, sharex=True, figsize=(width, height))
        return fig, list(axes)
    fig, ax = plt.subplots(figsize=(width, height))
    return fig, (ax if panels == 1 else [ax])


class Conditions:
    """Colour by the first axis the runs differ in (HUE column), line style
    and marker by the second (STYLE column); one legend entry per condition."""

    def __init__(self, rows):
        hues, styles = distinct(rows, "hue"), distinct(rows, "style")
        colours = palette(len(hues))
        self.colour = {h: colours[i] for i, h in enumerate(hues)}
        self.linestyle = {s: STYLES[i % len(STYLES)] for i, s in enumerate(styles)}
        self.marker = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(styles)}


def choose_log(log_y, values):
    """LOG_Y as written in the script: True/False, or None to choose: a log
    axis when the positive values span more than 20x."""
    if log_y is not None:
        return bool(log_y), "set"
    pos = [v for v in values if v > 0 and math.isfinite(v)]
    if not pos:
        return False, "auto"
    return max(pos) / min(pos) > 20, "auto"


def kept(n, size):
    """Which of n category ticks fit the axis at this size: every k-th, the
    last kept too when it is not crowded by the one before."""
    width, _, font = SIZES[size]
    fit_vertical = max(1, int(width * 0.85 * 72 / (font * 1.35)))
    step = max(1, math.ceil(n / fit_vertical))
    keep = list(range(0, n, step))
    if keep and keep[-1] != n - 1 and n - 1 - keep[-1] >= max(1, 0.75 * step):
        keep.append(n - 1)
    return keep


def thinned(labels, size):
    """The labels shown and whether they fit side by side (else rotated)."""
    width, _, font = SIZES[size]
    shown = [labels[i] for i in kept(len(labels), size)]
    longest = max((len(s) for s in shown), default=0)
    return shown, len(shown) * (longest + 1) * (font - 1) * 0.6 / 72 < width * 0.6


def short_number(v):
    """1, 20, 500, 2000, 50k, 2M: plain below 10,000, then k and M."""
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def log_axis(ax, axis="y"):
    """A log axis labelled in plain numbers at 1, 2 and 5 of each decade
    (100, 200, 500, 1000 rather than 10^2, 10^3)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _: short_number(v)))
    target.set_minor_formatter(NullFormatter())


def plain_axis(ax, axis="y"):
    """A linear axis labelled as the log axis is: 2000, 50k, 2M."""
    from matplotlib.ticker import FuncFormatter

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(FuncFormatter(lambda v, _: short_number(v)))


def split_ticks(ax, positions, labels, size):
    """Category tick labels, thinned to what fits the axis at this size,
    rotated when they would overlap."""
    keep = kept(len(positions), size)
    shown, horizontal = thinned(labels, size)
    ax.set_xticks([positions[i] for i in keep])
    ax.set_xticklabels(shown, rotation=0 if horizontal else 90, ha="center")
    return shown


def legend_below(fig, ax, handles, labels, size):
    """The legend under the axes, in as many columns as fit: never cut."""
    if not handles:
        return None
    width, _, font = SIZES[size]
    longest = max(len(s) for s in labels)
    cols = max(1, min(len(labels), int(width * 72 / (longest * font * 0.55 + 30))))
    return fig.legend(handles, labels, loc="lower center", ncol=cols, frameon=False, bbox_to_anchor=(0.5, 0.0))


def legend_rows(labels, size):
    if not labels:
        return 0
    width, _, font = SIZES[size]
    longest = max(len(s) for s in labels)
    cols = max(1, min(len(labels), int(width * 72 / (longest * font * 0.55 + 30))))
    return math.ceil(len(labels) / cols)


def finish(fig, ax, stem, notes=(), legend=None):
    """Notes under the figure (series left out and why), then PDF, SVG and
    PNG beside the script. With TRACR_FIGURE_MANIFEST set, one JSON line per
    figure says what was drawn (tracr's tests read it)."""
    bottom = 0.0
    if legend is not None:
        fig.canvas.draw()
        bb = legend.get_window_extent().transformed(fig.transFigure.inverted())
        bottom = bb.y1 + 0.02
    import textwrap

    font = matplotlib.rcParams["font.size"] - 1.5
    chars = max(20, int(fig.get_size_inches()[0] * 72 / (font * 0.55)))
    lines = [line for n in notes for line in textwrap.wrap(n, chars)]
    step = font * 1.3 / 72 / fig.get_size_inches()[1]
    for i, n in enumerate(reversed(lines)):
        fig.text(0.01, bottom + 0.005 + i * step, n, fontsize=font, style="italic", va="bottom")
    reserved = bottom + step * len(lines) + (0.01 if lines else 0)
    fig.tight_layout(rect=(0, reserved, 1, 1))
    for ext in ("pdf", "svg", "png"):
        meta = {"pdf": {"CreationDate": None}, "svg": {"Date": None}, "png": {}}[ext]
        fig.savefig(f"{stem}.{ext}", dpi=200, metadata=meta)
    manifest = os.environ.get("TRACR_FIGURE_MANIFEST")
    if manifest:
        entries = []
        if legend is not None:
            for h, t in zip(legend.legend_handles if hasattr(legend, "legend_handles") else legend.legendHandles,
                            legend.get_texts()):
                colour = h.get_color() if hasattr(h, "get_color") else h.get_facecolor()
                style = h.get_linestyle() if hasattr(h, "get_linestyle") else ""
                entries.append({"label": t.get_text(), "colour": matplotlib.colors.to_hex(colour),
                                "linestyle": str(style)})
        with open(manifest, "a") as f:
            f.write(json.dumps({
                "figure": os.path.basename(stem), "yscale": ax.get_yscale(), "xscale": ax.get_xscale(),
                "xticks": [t.get_text() for t in ax.get_xticklabels()], "legend": entries, "notes": list(notes),
                "size_in": [round(v, 3) for v in fig.get_size_inches()]}) + "\n")
    plt.close(fig)
