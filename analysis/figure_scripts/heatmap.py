# Median latency over the two cuts of a chain's placements (participant |
# first device | second device), one panel per condition; grey: not
# measured; the lowest median outlined. LOG_Y: a log colour scale.
import math
import os
import sys

import matplotlib
import numpy as np
from matplotlib.colors import LogNorm, Normalize
from matplotlib.patches import Rectangle

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracr_figure as tf  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
rows = tf.read_rows(os.path.join(here, CSV))
conditions = tf.distinct(rows, "condition")
firsts = sorted({int(r["k1"]) for r in rows})
seconds = sorted({int(r["k2"]) for r in rows})
t1 = {int(r["k1"]): r["k1_tick"] for r in rows}
t2 = {int(r["k2"]): r["k2_tick"] for r in rows}
fig, axes = tf.new_figure(SIZE, 0, [t2[k] for k in seconds], panels=len(conditions))
axes = axes if isinstance(axes, list) else [axes]
values = [tf.num(r["value"]) for r in rows]
log, _ = tf.choose_log(LOG_Y, values)
pos = [v for v in values if v > 0 and math.isfinite(v)] or [1.0]
norm = LogNorm(min(pos), max(pos)) if log else Normalize(min(pos), max(pos))
cmap = matplotlib.colormaps["viridis_r"].copy()
cmap.set_bad("0.85")
small = len(firsts) * len(seconds) <= 120
for ax, c in zip(axes, conditions):
    grid = [[math.nan] * len(seconds) for _ in firsts]
    best = None
    for r in rows:
        if r["condition"] != c:
            continue
        i, j, v = firsts.index(int(r["k1"])), seconds.index(int(r["k2"])), tf.num(r["value"])
        grid[i][j] = v
        if math.isfinite(v) and (best is None or v < best[2]):
            best = (i, j, v)
    im = ax.imshow(np.ma.masked_invalid(np.array(grid, dtype=float)), cmap=cmap, norm=norm, aspect="auto",
                   origin="lower", interpolation="nearest")
    if small:
        for i in range(len(firsts)):
            for j in range(len(seconds)):
                if math.isfinite(grid[i][j]):
                    ax.text(j, i, tf.short_number(float(f"{grid[i][j]:.3g}")), ha="center", va="center",
                            fontsize=matplotlib.rcParams["font.size"] - 2.5,
                            color="white" if norm(grid[i][j]) > 0.6 else "black")
    if best:
        ax.add_patch(Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.4))
    ax.set_yticks(range(len(firsts)))
    ax.set_yticklabels([t1[k] for k in firsts])
    ax.set_ylabel(Y_LABEL)
    ax.grid(False)
    if len(conditions) > 1:
        ax.set_title(c, loc="left", fontsize=matplotlib.rcParams["font.size"] - 0.5)
    fig.colorbar(im, ax=ax, label=Z_LABEL, format=matplotlib.ticker.FuncFormatter(lambda v, _: tf.short_number(v)))
tf.split_ticks(axes[-1], list(range(len(seconds))), [t2[k] for k in seconds], SIZE)
axes[-1].set_xlabel(X_LABEL)
tf.finish(fig, axes[-1], os.path.join(here, FIGURE), NOTES, None)
