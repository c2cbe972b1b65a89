# Values per split (placement), one series per condition: a line through the
# medians with an interquartile box and p5-p95 whiskers where the CSV has
# them (dodged per series), or dodged bars (BARS). Predicted series are
# dashed in the colour of the measured series of the same condition.
import math
import os
import sys

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracr_figure as tf  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
rows = tf.read_rows(os.path.join(here, CSV))
cond = tf.Conditions(rows)
ticks = {}
for r in rows:
    ticks[int(r["x"])] = r["tick"]
positions = sorted(ticks)

series = tf.distinct([{"k": (r["condition"], r["series"])} for r in rows], "k")  # in the CSV's order
has_predicted = any(s == "predicted" for _, s in series)
labels = [next(r["label"] for r in rows if (r["condition"], r["series"]) == k) for k in series]
fig, ax = tf.new_figure(SIZE, tf.legend_rows(labels, SIZE), [ticks[p] for p in positions])

values = [tf.num(r[c]) for r in rows for c in ("value", "p5", "p95") if c in r]
log, how = tf.choose_log(LOG_Y, values)
spread = [k for k in series if any(r["p25"] for r in rows if (r["condition"], r["series"]) == k)]
width = 0.75
handles = []
for i, key in enumerate(series):
    pts = sorted(((int(r["x"]), r) for r in rows if (r["condition"], r["series"]) == key), key=lambda p: p[0])
    first = pts[0][1]
    colour = "0.45" if key[1].startswith("raw") else cond.colour[first["hue"]]
    if key[1] == "predicted":
        style = "--"
    elif key[1].startswith("raw"):
        style = ":"
    else:  # beside predicted series, measured ones are solid: the second axis is told by the marker
        style = "-" if has_predicted else cond.linestyle[first["style"]]
    marker = cond.marker[first["style"]]
    n = len(series) if BARS else max(len(spread), 1)
    j = i if BARS else (spread.index(key) if key in spread else (n - 1) / 2)
    off = (j - (n - 1) / 2) * width / n
    xs = [x + off for x, _ in pts]
    ys = [tf.num(r["value"]) for _, r in pts]
    if BARS:
        ax.bar(xs, ys, width / n, color=colour, edgecolor="black", linewidth=0.3,
               hatch=None if style == "-" else "//")
        handles.append(Patch(facecolor=colour, edgecolor="black", linewidth=0.3, hatch=None if style == "-" else "//"))
        continue
    ax.plot(xs, ys, linestyle=style, marker=marker, markersize=3, color=colour, linewidth=1.1, zorder=3)
    handles.append(Line2D([], [], color=colour, linestyle=style, marker=marker, markersize=3, linewidth=1.1))
    if key in spread:
        stats = [{"med": tf.num(r["value"]), "q1": tf.num(r["p25"]), "q3": tf.num(r["p75"]),
                  "whislo": tf.num(r["p5"]), "whishi": tf.num(r["p95"]), "fliers": []} for _, r in pts]
        ax.bxp(stats, positions=xs, widths=min(0.6 / n, 0.25), showfliers=False, manage_ticks=False,
               boxprops={"color": colour, "linewidth": 0.8}, whiskerprops={"color": colour, "linewidth": 0.8},
               capprops={"color": colour, "linewidth": 0.8}, medianprops={"color": colour, "linewidth": 1.2},
               zorder=2)

if log:
    tf.log_axis(ax)
else:
    tf.plain_axis(ax)
    if not any(v < 0 for v in values if math.isfinite(v)):
        ax.set_ylim(bottom=0)
if ZERO_LINE:
    ax.axhline(0, color="black", linewidth=0.6)
ax.set_xlim(min(positions) - 0.6, max(positions) + 0.6)
tf.split_ticks(ax, positions, [ticks[p] for p in positions], SIZE)
ax.set_xlabel(X_LABEL)
ax.set_ylabel(Y_LABEL)
leg = tf.legend_below(fig, ax, handles, labels, SIZE)
tf.finish(fig, ax, os.path.join(here, FIGURE), NOTES, leg)
