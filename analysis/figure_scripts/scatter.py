# One point per row (x, value), one series per condition, each point labelled
# with its split; optional chance line (CHANCE) and Pareto-front marks
# (column `front` = 1) joined per condition.
import math
import os
import sys

from matplotlib.lines import Line2D

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracr_figure as tf  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
rows = tf.read_rows(os.path.join(here, CSV))
cond = tf.Conditions(rows)
conditions = tf.distinct(rows, "condition")
labels = list(conditions) + ([CHANCE_LABEL] if CHANCE is not None else [])
fig, ax = tf.new_figure(SIZE, tf.legend_rows(labels, SIZE))
handles = []
for c in conditions:
    pts = sorted(((tf.num(r["xvalue"]), tf.num(r["value"]), r) for r in rows if r["condition"] == c),
                 key=lambda p: p[0])
    first = pts[0][2]
    colour, marker = cond.colour[first["hue"]], cond.marker[first["style"]]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=cond.linestyle[first["style"]] if JOIN else "none",
            marker=marker, markersize=3.5, color=colour, linewidth=0.9)
    front = [p for p in pts if p[2].get("front") == "1"]
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], marker=marker, markersize=5, color=colour,
                markerfacecolor="none", linestyle="-", linewidth=1.3)
    for x, y, r in pts:
        if r.get("point"):
            ax.annotate(r["point"], (x, y), textcoords="offset points", xytext=(2, 2),
                        fontsize=tf.matplotlib.rcParams["font.size"] - 2.5, color=colour)
    handles.append(Line2D([], [], color=colour, marker=marker, markersize=3.5,
                          linestyle=cond.linestyle[first["style"]] if JOIN else "none"))
if CHANCE is not None:
    ax.axhline(CHANCE, color="0.4", linestyle=":", linewidth=0.9)
    handles.append(Line2D([], [], color="0.4", linestyle=":", linewidth=0.9))
xs = [tf.num(r["xvalue"]) for r in rows]
if LOG_X is None:
    log_x, _ = tf.choose_log(None, xs)
else:
    log_x = LOG_X
if log_x:
    tf.log_axis(ax, "x")
log, _ = tf.choose_log(LOG_Y, [tf.num(r["value"]) for r in rows])
if log:
    tf.log_axis(ax)
if Y_MAX is not None:
    ax.set_ylim(top=Y_MAX)
ax.set_xlabel(X_LABEL)
ax.set_ylabel(Y_LABEL)
leg = tf.legend_below(fig, ax, handles, labels, SIZE)
tf.finish(fig, ax, os.path.join(here, FIGURE), NOTES, leg)
