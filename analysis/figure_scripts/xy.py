# A value against a number (time, step, epoch), one line per condition
# (DRAWSTYLE "steps-post" for a value held until it changes).
import os
import sys

from matplotlib.lines import Line2D

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracr_figure as tf  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
rows = tf.read_rows(os.path.join(here, CSV))
cond = tf.Conditions(rows)
conditions = tf.distinct(rows, "condition")
fig, ax = tf.new_figure(SIZE, tf.legend_rows(conditions, SIZE))
handles = []
for c in conditions:
    pts = sorted(((tf.num(r["xvalue"]), tf.num(r["value"]), r) for r in rows if r["condition"] == c), key=lambda p: p[0])
    first = pts[0][2]
    colour, style = cond.colour[first["hue"]], cond.linestyle[first["style"]]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], drawstyle=DRAWSTYLE, color=colour, linestyle=style,
            linewidth=1.0, marker=cond.marker[first["style"]] if len(pts) < 40 else None, markersize=3)
    handles.append(Line2D([], [], color=colour, linestyle=style, linewidth=1.0))
log, _ = tf.choose_log(LOG_Y, [tf.num(r["value"]) for r in rows])
if log:
    tf.log_axis(ax)
else:
    tf.plain_axis(ax)
ax.set_xlabel(X_LABEL)
ax.set_ylabel(Y_LABEL)
leg = tf.legend_below(fig, ax, handles, conditions, SIZE)
tf.finish(fig, ax, os.path.join(here, FIGURE), NOTES, leg)
