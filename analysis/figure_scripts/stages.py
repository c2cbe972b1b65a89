# The median time of each stage per split, stacked: one panel per condition
# (each with its own linear scale, so that a slow link does not flatten a
# fast one; stacked bars on a log axis would misstate each stage's share),
# stages in colour, named in the legend.
import os
import sys

from matplotlib.patches import Patch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracr_figure as tf  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
rows = tf.read_rows(os.path.join(here, CSV))
ticks = {int(r["x"]): r["tick"] for r in rows}
positions = sorted(ticks)
stages, conditions = tf.distinct(rows, "stage"), tf.distinct(rows, "condition")
colours = dict(zip(stages, tf.palette(len(stages))))
fig, axes = tf.new_figure(SIZE, tf.legend_rows(stages, SIZE), [ticks[p] for p in positions], panels=len(conditions))
axes = axes if isinstance(axes, list) else [axes]
totals = []
for ax, c in zip(axes, conditions):
    for x in positions:
        bottom = 0.0
        for s in stages:
            v = [tf.num(r["value"]) for r in rows if r["condition"] == c and r["stage"] == s and int(r["x"]) == x]
            if not v or not v[0] > 0:
                continue
            ax.bar(x, v[0], 0.7, bottom=bottom, color=colours[s], edgecolor="black", linewidth=0.3)
            bottom += v[0]
        totals.append(bottom)
    if len(conditions) > 1:
        ax.set_title(c, loc="left", fontsize=tf.matplotlib.rcParams["font.size"] - 0.5)
    ax.set_xlim(min(positions) - 0.6, max(positions) + 0.6)
    ax.set_ylabel(Y_LABEL)
log, how = tf.choose_log(LOG_Y, [t for t in totals if t > 0])
for ax in axes:
    if log:
        tf.log_axis(ax)
    else:
        tf.plain_axis(ax)
tf.split_ticks(axes[-1], positions, [ticks[p] for p in positions], SIZE)
axes[-1].set_xlabel(X_LABEL)
handles = [Patch(facecolor=colours[s], edgecolor="black", linewidth=0.3) for s in stages]
leg = tf.legend_below(fig, axes[-1], handles, stages, SIZE)
tf.finish(fig, axes[-1], os.path.join(here, FIGURE), NOTES, leg)
