#!/usr/bin/python3
"""Draws the density curves (ADD and DEL median ms against attachments already on the node, for
rcni, Go and the iproute2 floor; bridge solid, ptp dashed) from results.jsonl as a PNG.

Usage: plot_density.py <results.jsonl> <chart.png>. Needs python3-matplotlib.
"""
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGURE = "density"
COLORS = {"rcni": "#d9534f", "go": "#5bc0de", "floor": "#777777"}
STYLES = {"bridge": "-", "ptp": "--"}


def main(src, dst):
    curves = {}
    for line in open(src):
        rec = json.loads(line)
        if rec.get("kind") != "samples" or rec["figure"] != FIGURE or rec["median"] is None:
            continue
        m = re.match(r"(\w+) (\w+) at (\d+) attachments", rec["item"])
        if m:
            plugin, op, count = m.group(1), m.group(2), int(m.group(3))
            key = (op, plugin, rec["implementation"])
            curves.setdefault(key, []).append((count, rec["median"]))
    if not curves:
        sys.exit("no density samples to plot")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, op in zip(axes, ["ADD", "DEL"]):
        for (o, plugin, impl), points in sorted(curves.items()):
            if o != op:
                continue
            points.sort()
            xs = [p[0] for p in points]
            ys = [p[1] for p in points]
            ax.plot(xs, ys, STYLES.get(plugin, "-"), marker="o", color=COLORS.get(impl),
                    label=f"{plugin} {impl}")
            for x, y in points:
                ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=7)
        ax.set_xlabel("attachments already on the node")
        ax.set_ylabel("median ms, spawn to exit")
        ax.set_title(f"{op}: rcni (red), Go (blue), iproute2 floor (grey)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
