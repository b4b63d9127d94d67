#!/usr/bin/python3
"""Draws the portmap scale curve (ADD/CHECK/DEL median vs mapped containers, rcni vs Go) from
results.jsonl as a PNG.

Usage: plot_portmap_scale.py <results.jsonl> <chart.png>. Needs python3-matplotlib.
"""
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LEVEL = re.compile(r"^(ADD|CHECK|DEL) at (\d+) mapped containers$")
BIG = re.compile(r"^(ADD|CHECK|DEL) beside 1 container with (\d+) mappings$")


def main(src, dst):
    curve, big = {}, {}
    for line in open(src):
        rec = json.loads(line)
        if rec.get("kind") != "row" or rec["figure"] != "portmap scale":
            continue
        m = LEVEL.match(rec["item"])
        b = BIG.match(rec["item"])
        for impl in ("rcni", "go"):
            if rec[impl] is None:
                continue
            if m:
                curve.setdefault((m.group(1), impl), []).append((int(m.group(2)), rec[impl]))
            elif b:
                big[(b.group(1), impl)] = (int(b.group(2)), rec[impl])
    if not curve:
        sys.exit("no portmap scale rows to plot")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    colors = {"rcni": "#d9534f", "go": "#5bc0de"}
    for ax, op in zip(axes, ["ADD", "CHECK", "DEL"]):
        for impl in ("rcni", "go"):
            pts = sorted(curve.get((op, impl), []))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colors[impl],
                        label=f"{impl}")
            if (op, impl) in big:
                n, v = big[(op, impl)]
                ax.axhline(v, color=colors[impl], ls=":", lw=1,
                           label=f"{impl}, beside 1 container with {n} mappings")
        ax.set_yscale("log")
        ax.set_xlabel("containers that already have a host port")
        ax.set_ylabel("median ms, spawn to exit (lower is better)")
        ax.set_title(f"portmap {op}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
