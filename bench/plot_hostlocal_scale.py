#!/usr/bin/python3
"""Draws the host-local scale curves (ADD, CHECK, DEL median ms against existing leases, rcni
and Go) from results.jsonl as a PNG.

Usage: plot_hostlocal_scale.py <results.jsonl> <chart.png>. Needs python3-matplotlib.
"""
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGURE = "host-local scale"


def main(src, dst):
    curves = {}
    for line in open(src):
        rec = json.loads(line)
        if rec.get("kind") != "samples" or rec["figure"] != FIGURE or rec["median"] is None:
            continue
        m = re.match(r"(\w+) at (\d+) leases", rec["item"])
        if m:
            op, count = m.group(1), int(m.group(2))
            curves.setdefault((op, rec["implementation"]), []).append((count, rec["median"]))
    if not curves:
        sys.exit("no host-local scale samples to plot")
    ops = ["ADD", "CHECK", "DEL"]
    fig, axes = plt.subplots(1, len(ops), figsize=(15, 4.2))
    for ax, op in zip(axes, ops):
        for impl, color in [("rcni", "#d9534f"), ("go", "#5bc0de")]:
            points = sorted(curves.get((op, impl), []))
            if points:
                xs = [p[0] for p in points]
                ys = [p[1] for p in points]
                ax.plot(xs, ys, marker="o", color=color, label=impl)
                for x, y in points:
                    ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points",
                                xytext=(0, 6), ha="center", fontsize=8)
        ax.set_xscale("symlog", linthresh=100)
        ax.set_xlabel("leases already in the range")
        ax.set_ylabel("median ms, spawn to exit")
        ax.set_title(f"host-local {op}: rcni (red) vs Go (blue)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
